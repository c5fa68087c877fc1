"""Engines that cannot run: the known failures of GLM-5-class (DSA) models on SM120.

The launch plan refuses these before anything starts (so `validate`, `command`, `serve`
and every tune trial refuse them alike), and the tune's space leaves their values out.
Each refusal names the flag, the card and the fix. Facts, read in the released sglang
wheels (docs/targets.md, "SM120 limits for DSA models"):

- The TRT-LLM-gen sparse MLA kernels (`--dsa-*-backend trtllm`, `--nsa-*` before 0.5.13)
  are not built for SM120 ("TllmGenFmhaRunner: Unsupported architecture"); sglang picks
  them itself for an FP8 KV cache on compute capability 10 and up unless it knows better.
- Up to sglang 0.5.16 no DSA backend runs on SM120: every one reached DeepGEMM's paged
  MQA indexer, which has no SM120 kernel (0.5.12, all backends, bf16 and FP8 KV). From
  0.5.17 sglang runs GLM's DSA (GlmMoeDsaForCausalLM) with an FP8 KV cache on SM120
  through `flashinfer_sparse_mla`, picks it there by default and refuses every other
  backend (0.5.22 adds `triton_sparse_mla` for prefill): flash_mla_sm120.py,
  `_validate_flashinfer_sparse_mla_backend`.
- sglang's decode CUDA graph ceiling on a 96 GB card at tensor parallel 4 and up is 512
  (memory_hook.py); capturing 512 for GLM's DSA on 8x RTX PRO 6000 ran out of memory,
  256 fitted. The plan caps it at 256 when graphs are on.

With `--attention-backend flashinfer` (the reference deployment's, dense MLA) the DSA
kernels are not used, and none of this applies.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from packaging.version import Version

from glm5svc.errors import ConfigError
from glm5svc.gpus import GpuFacts
from glm5svc.model_info import ModelFacts

# The DSA attention backend's names; unset, sglang picks it for a DSA model.
DSA_ATTENTION = {"dsa", "nsa"}
DSA_NAMES_SINCE = Version("0.5.13")  # --dsa-* (--nsa-* before; sglang_flags.FLAG_HISTORY)
DECODE_FLAGS = ("--dsa-decode-backend", "--nsa-decode-backend")
PREFILL_FLAGS = ("--dsa-prefill-backend", "--nsa-prefill-backend")
# The architectures sglang's SM120 sparse MLA path takes (flash_mla_sm120.py).
GLM_DSA_ARCHITECTURES = ("GlmMoeDsaForCausalLM", "GlmMoeDsaForCausalLMNextN")
SPARSE_MLA_SINCE = Version("0.5.17")  # flashinfer_sparse_mla, sglang's SM120 default
TRITON_PREFILL_SINCE = Version("0.5.22")  # triton_sparse_mla, prefill only
SPARSE_MLA = "flashinfer_sparse_mla"
TRITON_PREFILL = "triton_sparse_mla"
CURRENT_PROFILE = "cu130-0.5.23"  # the stack profile with an sglang that runs DSA on SM120
# sglang 0.5.10 and later choose trtllm for both DSA backends with an FP8 KV cache on
# compute capability 10 and up, unless the SM120 path above applies.
TRTLLM_DEFAULT_SINCE = Version("0.5.10")
# The decode graph ceiling: 512 (sglang's own default on 96 GB cards at tp >= 4) ran out of
# memory at capture for GLM's DSA on 8x RTX PRO 6000; 256 fitted.
GRAPH_CEILING_OOM = 512
GRAPH_CEILING_SAFE = 256
GRAPH_CEILING_FLAGS = ("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs")
GRAPHS_OFF_FLAGS = ("--disable-cuda-graph", "--disable-decode-cuda-graph")
SMALL_CARD_MIB = 100 * 1024  # 96 GB cards (RTX PRO 6000: 97,887 MiB) and smaller
FLASHINFER_ATTENTION_FIX = (
    "tuning.attention_backend: flashinfer (dense MLA, the reference deployment's path)"
)


class EngineLimitError(ConfigError):
    """The launch would start an engine that cannot run on these GPUs (exit 78)."""


@dataclass(frozen=True)
class Setup:
    """What the engine would start with: its flags (the last value of each), GPUs, model."""

    flags: dict[str, str | None]
    sglang_version: str
    gpus: GpuFacts
    model: ModelFacts

    def value(self, *names: str) -> tuple[str, str | None] | None:
        for name in names:
            if name in self.flags:
                return name, self.flags[name]
        return None

    @property
    def version(self) -> Version:
        return Version(self.sglang_version)

    @property
    def applies(self) -> bool:
        """A DSA model on SM120-family GPUs."""
        return self.model.sparse_attention and self.gpus.is_sm120_family

    @property
    def dsa_attention(self) -> bool:
        """The DSA attention backend serves the model (set, or sglang's pick when unset)."""
        chosen = self.flags.get("--attention-backend")
        return chosen is None or chosen in DSA_ATTENTION

    @property
    def fp8_kv(self) -> bool:
        """sglang's DSA KV cache is FP8 (e4m3) unless set otherwise: auto means FP8 on
        compute capability 10 and up (overrides.py, the DSA KV cache dtype)."""
        chosen = self.flags.get("--kv-cache-dtype") or "auto"
        return chosen in ("auto", "fp8_e4m3")

    @property
    def glm(self) -> bool:
        return self.model.architecture in GLM_DSA_ARCHITECTURES

    @property
    def card(self) -> str:
        name = self.gpus.names[0] if self.gpus.names else "GPU"
        return f"{self.gpus.count}x {name} ({self.gpus.sm})"


def sglang_backend(setup: Setup, phase: str) -> str | None:
    """The DSA backend sglang picks for `phase` (decode, prefill) when the flag is unset."""
    if not setup.fp8_kv:
        return "trtllm" if phase == "decode" and setup.version >= TRTLLM_DEFAULT_SINCE else None
    if setup.glm and setup.version >= SPARSE_MLA_SINCE:
        return SPARSE_MLA
    return "trtllm" if setup.version >= TRTLLM_DEFAULT_SINCE else None


def problems(setup: Setup) -> list[str]:
    """Why an engine with this setup cannot run on these GPUs: each says the flag, the card
    and the fix. Empty when nothing known stops it."""
    if not setup.applies:
        return []
    found = []
    if setup.dsa_attention:
        found += _sparse_backend_problems(setup)
    found += _graph_ceiling_problems(setup)
    return found


def _sparse_backend_problems(setup: Setup) -> list[str]:
    version, card = setup.sglang_version, setup.card
    if setup.fp8_kv and (setup.version < SPARSE_MLA_SINCE or not setup.glm):
        why = (
            f"sglang {version} has no DSA backend for SM120 (up to 0.5.16 every one reaches "
            "DeepGEMM's paged MQA indexer, which has no SM120 kernel: 'Unsupported "
            "architecture')"
            if setup.version < SPARSE_MLA_SINCE
            else f"sglang's SM120 sparse MLA path ({SPARSE_MLA}) takes only "
            f"{', '.join(GLM_DSA_ARCHITECTURES)}, not {setup.model.architecture}"
        )
        fix = (
            f"server.profile: {CURRENT_PROFILE} (sglang 0.5.23 runs GLM's DSA on SM120 "
            f"through {SPARSE_MLA}), or {FLASHINFER_ATTENTION_FIX}"
            if setup.glm
            else FLASHINFER_ATTENTION_FIX
        )
        return [f"DSA attention with an FP8 KV cache on {card}: {why}. Fix: {fix}"]
    found = []
    for phase, names in (("decode", DECODE_FLAGS), ("prefill", PREFILL_FLAGS)):
        given = setup.value(*names)
        backend = given[1] if given else sglang_backend(setup, phase)
        flag = given[0] if given else names[0] if setup.version >= DSA_NAMES_SINCE else names[1]
        how = f"{flag} {backend}" if given else f"{flag} unset (sglang picks {backend})"
        allowed = _allowed(setup, phase)
        if backend == "trtllm":
            if allowed:
                fix = f"set {flag} {SPARSE_MLA} (tuning.nsa_{phase}_backend)"
            elif setup.glm and setup.version >= SPARSE_MLA_SINCE:
                fix = f"an FP8 KV cache (leave --kv-cache-dtype out) with {flag} {SPARSE_MLA}"
            elif setup.glm:
                fix = f"server.profile: {CURRENT_PROFILE} ({SPARSE_MLA})"
            else:
                fix = "no other DSA backend is known to run there"
            fix += f", or {FLASHINFER_ATTENTION_FIX}"
            found.append(
                f"{how} on {card}: the TRT-LLM-gen sparse MLA kernels are not built for "
                f"SM120 ('TllmGenFmhaRunner: Unsupported architecture'). Fix: {fix}"
            )
        elif backend == SPARSE_MLA and not allowed:
            found.append(
                f"{how} on {card}: sglang's {SPARSE_MLA} runs only GLM's DSA "
                f"({', '.join(GLM_DSA_ARCHITECTURES)}) with an FP8 KV cache on SM120, from "
                f"sglang {SPARSE_MLA_SINCE}; this is {setup.model.architecture}, "
                f"{'FP8' if setup.fp8_kv else 'a ' + str(setup.flags.get('--kv-cache-dtype'))} "
                f"KV, sglang {setup.sglang_version}. Fix: an FP8 KV cache (leave "
                "--kv-cache-dtype out), or " + FLASHINFER_ATTENTION_FIX
            )
        elif allowed and backend is not None and backend not in allowed:
            found.append(
                f"{how} on {card}: sglang {setup.sglang_version} runs GLM's DSA with an FP8 KV "
                f"cache on SM120 only through {' or '.join(allowed)} and refuses {backend}. "
                f"Fix: set {flag} {SPARSE_MLA} (tuning.nsa_{phase}_backend), or leave it unset"
            )
    return found


def _allowed(setup: Setup, phase: str) -> tuple[str, ...]:
    """The DSA backends sglang accepts for GLM with FP8 KV on SM120 (empty: not that case)."""
    if not (setup.fp8_kv and setup.glm and setup.version >= SPARSE_MLA_SINCE):
        return ()
    if phase == "prefill" and setup.version >= TRITON_PREFILL_SINCE:
        return (SPARSE_MLA, TRITON_PREFILL)
    return (SPARSE_MLA,)


def graphs_on(setup: Setup) -> bool:
    if any(name in setup.flags for name in GRAPHS_OFF_FLAGS):
        return False
    return setup.flags.get("--cuda-graph-backend-decode") != "disabled"


def small_cards(gpus: GpuFacts) -> bool:
    """96 GB cards or smaller; unknown memory counts as the sm120 target's 96 GB cards."""
    return gpus.memory_mib is None or gpus.memory_mib <= SMALL_CARD_MIB


def graph_ceiling(setup: Setup) -> tuple[str, int] | None:
    """The decode graph ceiling given by a flag (or --cuda-graph-config's decode.max_bs)."""
    given = setup.value(*GRAPH_CEILING_FLAGS)
    if given and given[1] is not None:
        try:
            return given[0], int(given[1])
        except ValueError:
            return None
    text = setup.flags.get("--cuda-graph-config")
    try:
        decode = json.loads(text).get("decode") if text else None
        ceiling = decode.get("max_bs") if isinstance(decode, dict) else None
    except (ValueError, AttributeError):
        return None
    return ("--cuda-graph-config", int(ceiling)) if isinstance(ceiling, int) else None


def needs_graph_cap(setup: Setup) -> bool:
    """Graphs on for a DSA model on 96 GB SM120 cards, with no ceiling given: sglang's own
    default there is 512 at tensor parallel 4 and up."""
    return (
        setup.applies and graphs_on(setup) and small_cards(setup.gpus)
        and graph_ceiling(setup) is None
    )  # fmt: skip


def _graph_ceiling_problems(setup: Setup) -> list[str]:
    given = graph_ceiling(setup)
    if not (given and graphs_on(setup) and small_cards(setup.gpus)):
        return []
    flag, ceiling = given
    if ceiling < GRAPH_CEILING_OOM:
        return []
    memory = (
        f"{setup.gpus.memory_mib} MiB each"
        if setup.gpus.memory_mib
        else "memory unknown, taken as the sm120 target's 96 GB"
    )
    return [
        f"{flag} {ceiling} on {setup.card}, {memory}: capturing decode CUDA graphs up to "
        f"{GRAPH_CEILING_OOM} for GLM's DSA ran out of memory on 96 GB RTX PRO 6000 cards "
        f"({GRAPH_CEILING_SAFE} fitted). Fix: a ceiling of {GRAPH_CEILING_SAFE} or less, or "
        "leave it out (the plan sets 256), or tuning.cuda_graph: false"
    ]
