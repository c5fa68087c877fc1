"""The launch plan: exactly how `python -m sglang.launch_server` is started, and why.

Every flag and environment variable is an entry with a reason the user can read
(`glm5svc command --explain`). Rules learnt on the reference deployment are enforced
here, not left to memory. What depends on the GPUs comes from the target
(glm5svc/data/targets.yaml), what depends on the model from its config.json
(glm5svc.model_info), how a flag is spelt from the installed sglang's version
(glm5svc.sglang_flags). Entries that hold only for one target or sglang version say so.

Longer than 400 lines: every flag's rule and reason in one place, in argv order, so that
one file shows the whole launch.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from glm5svc.config import (
    READ_KEY_FILE,
    Config,
    exposure_problem,
    exposure_warning,
    read_api_key,
    secrets_file_text,
)
from glm5svc.config_yaml import parse_yaml, read_config_bytes
from glm5svc.engine_limits import (
    GRAPH_CEILING_SAFE,
    EngineLimitError,
    Setup,
    needs_graph_cap,
    problems,
)
from glm5svc.errors import ConfigError
from glm5svc.facts import HostFacts
from glm5svc.gpus import GpuFacts, detect_gpus, parse_compute_capability
from glm5svc.model_info import ModelFacts, read_model_facts
from glm5svc.multinode import multinode_notes, multinode_rows, tensor_parallel_size
from glm5svc.profiles import SglangVersion, StackProfile, load_profile, sglang_version
from glm5svc.records import PlanSummary, SglangInstall
from glm5svc.sglang_flags import (
    FORBIDDEN_FLAGS,
    GUARDED_ENV,
    abbreviation_of,
    deprecation_note,
    flag_name,
    guarded_flag,
    parse_extra_args,
    port_problem,
    version_problem,
)
from glm5svc.targets import Choice, Target, chosen_value, get_target

SECRET_PLACEHOLDER = "<secret>"
# Written by `glm5svc serve` (mode 0600) and read by sglang's own --config option,
# so the API key never appears in argv (ps, /proc/PID/cmdline) or in logs.
DEFAULT_SECRETS_FILE = Path("/run/glm5/sglang-secrets.yaml")
# systemd sets $RUNTIME_DIRECTORY for RuntimeDirectory=glm5 (/run/glm5); tests point it elsewhere.
RUNTIME_DIRECTORY_ENV = "RUNTIME_DIRECTORY"
# Read by the patch flashinfer-autotune-cache (glm5svc/data/patches) inside sglang.
AUTOTUNE_DIR_ENV = "GLM5SVC_FLASHINFER_AUTOTUNE_DIR"


def secrets_file_path() -> Path:
    runtime = os.environ.get(RUNTIME_DIRECTORY_ENV, "").split(":")[0]
    return Path(runtime) / DEFAULT_SECRETS_FILE.name if runtime else DEFAULT_SECRETS_FILE


@dataclass(frozen=True)
class PlanEntry:
    kind: str  # "flag" or "env"
    name: str  # "--tp-size" or "NCCL_P2P_LEVEL"
    value: str | None  # None: a flag without a value
    reason: str
    source: str = "plan"  # "plan", "extra_args", "server.env"
    more_values: tuple[str, ...] = ()  # for flags that take several values
    scope: str = ""  # "" (always), or what it is specific to: "target sm120", "sglang 0.5.11"

    def tokens(self) -> list[str]:
        values = [] if self.value is None else [self.value, *self.more_values]
        return [self.name, *values]


@dataclass
class LaunchPlan:
    program: list[str]
    entries: list[PlanEntry]
    gpus: GpuFacts
    sglang: SglangVersion
    profile: StackProfile
    target: Target
    model: ModelFacts
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # path -> content; `glm5svc serve` writes these (0600) before starting the server.
    secret_files: dict[Path, str] = field(default_factory=dict)

    @property
    def flags(self) -> list[PlanEntry]:
        return [e for e in self.entries if e.kind == "flag"]

    @property
    def argv(self) -> list[str]:
        return self.program + [token for entry in self.flags for token in entry.tokens()]

    @property
    def env(self) -> dict[str, str]:
        return {e.name: e.value or "" for e in self.entries if e.kind == "env"}

    def flag_values(self, name: str) -> list[str]:
        return [e.value or "" for e in self.flags if e.name == name]

    def flag_value(self, name: str) -> str | None:
        for entry in self.flags:
            if entry.name == name:
                return entry.value if entry.value is not None else ""
        return None

    def shell_command(self) -> str:
        """Copy-pasteable: `env K=V ... program --flag value`, one flag per line."""
        env = [f"{k}={shlex.quote(v)}" for k, v in self.env.items()]
        head = " ".join(["env", *env, *map(shlex.quote, self.program)])
        lines = [head] + ["  " + shlex.join(e.tokens()) for e in self.flags]
        return " \\\n".join(lines)

    @property
    def sglang_version(self) -> str:
        return self.sglang.version

    def summary(self) -> PlanSummary:
        return PlanSummary(
            argv=tuple(self.argv),
            # Values from server.env may be secrets: /status and result files show names only.
            env={
                e.name: e.value or "" if e.source == "plan" else SECRET_PLACEHOLDER
                for e in self.entries
                if e.kind == "env"
            },
            sglang_version=self.sglang.label,
            sglang=SglangInstall(self.sglang.version, self.sglang.installed, self.sglang.detail),
            profile=self.profile.name,
            target=self.target.name,
            model_architecture=self.model.architecture,
            tp_size=int(self.flag_value("--tp-size") or 0),
            gpus=self.gpus.to_dict(),
            warnings=tuple(self.warnings),
            notes=tuple(self.notes),
        )

    def explain(self) -> str:
        profile, target = self.profile, self.target
        lines = [
            f"# sglang {self.sglang.label} on {self.gpus.count}x {self.gpus.sm}",
            f"# sglang: {self.sglang.detail}",
            f"# stack profile {profile.name}: sglang {profile.sglang_version}, torch "
            f"{profile.torch_version}, CUDA {profile.cuda_version}",
            f"# target {target.name}: {target.description}; expects "
            f"{target.gpu_count}x {target.sm} by default",
            f"# GPUs: {self.gpus.count}x {self.gpus.sm} (from {self.gpus.source})",
            f"# model: {self.model.summary} "
            + (f"(from {self.model.source})" if self.model.from_config else "(assumed, see note)"),
        ]
        lines += [f"# note: {note}" for note in self.notes]
        lines += [f"# WARNING: {warning}" for warning in self.warnings]
        lines.append("")
        lines.append("environment:")
        lines += _explain_rows([e for e in self.entries if e.kind == "env"])
        lines.append("")
        lines.append(f"server: {shlex.join(self.program)}")
        lines += _explain_rows(self.flags)
        lines.append("")
        lines.append("command:")
        lines.append(self.shell_command())
        return "\n".join(lines)


def _explain_rows(entries: list[PlanEntry]) -> list[str]:
    rows = []
    for entry in entries:
        shown = shlex.join(entry.tokens())
        origin = "" if entry.source == "plan" else f" [from {entry.source}]"
        scope = f" [{entry.scope}]" if entry.scope else ""
        rows.append(f"  {shown}\n      {entry.reason}{origin}{scope}")
    return rows


def build_launch_plan(
    config: Config,
    gpus: GpuFacts | None = None,
    nsa_fix_in_place: bool | None = None,
    sglang: SglangVersion | None = None,
    model: ModelFacts | None = None,
    api_key: str | None | object = READ_KEY_FILE,
) -> LaunchPlan:
    """Build the plan from the facts given (plan_for_service gives the host's, read once).
    `nsa_fix_in_place`: is the NSA FP8 prefill fix in the venv's sglang (patched or fixed
    upstream)? None means unknown, which keeps the radix cache off. `sglang`: the installed
    version; None plans for the profile's pin, labelled so. `model`: None reads
    model.path/config.json. `api_key`: the key already read (None: no key)."""
    gpus = gpus or detect_gpus(config)
    profile = load_profile(config.server.profile)
    plan = LaunchPlan(
        program=_program(config),
        entries=[],
        gpus=gpus,
        sglang=sglang or sglang_version(profile, None, "not read from a venv"),
        profile=profile,
        target=get_target(config.gpus.target),
        model=model or read_model_facts(config.model.path),
    )
    check_model_path(config, plan.model)
    if gpus.note:
        plan.notes.append(gpus.note)
    _target_notes(config, plan)
    plan.entries += _environment(config, gpus, profile)
    plan.entries += _server_flags(config, gpus, plan)
    plan.entries += _tuning_flags(config, plan, nsa_fix_in_place)
    plan.entries += [PlanEntry(*row) for row in multinode_rows(config)]
    plan.notes += multinode_notes(config)
    key = read_api_key(config.server.api_key_file) if api_key is READ_KEY_FILE else api_key
    _add_api_key(key, plan)
    if problem := exposure_problem(config):
        raise ConfigError(problem)
    if warning := exposure_warning(config):
        plan.warnings.append(f"{warning} (server.allow_unauthenticated: true)")
    _merge_extra_args(config, gpus, plan)
    _merge_env_overrides(config, plan)
    _engine_limits(plan)
    _deprecations(plan)
    return plan


def _engine_limits(plan: LaunchPlan) -> None:
    """Refuse what cannot run on these GPUs (glm5svc.engine_limits), with the flags as they
    reach sglang (extra_args included); cap the decode graphs where sglang's own ceiling
    runs out of memory."""
    setup = Setup({e.name: e.value for e in plan.flags}, plan.sglang.version, plan.gpus, plan.model)
    if found := problems(setup):
        raise EngineLimitError(
            f"this launch cannot run on {setup.card} with sglang {plan.sglang.version}; "
            "nothing was started",
            problems=found,
        )
    if needs_graph_cap(setup):
        running = plan.flag_value("--max-running-requests")
        ceiling = min(GRAPH_CEILING_SAFE, int(running)) if running else GRAPH_CEILING_SAFE
        plan.entries.append(
            _flag(
                flag_name("decode_graph_ceiling", plan.sglang.version),
                ceiling,
                f"decode CUDA graphs up to {ceiling} requests (at most 256, at most the "
                "running-request cap): sglang's own ceiling on 96 GB cards at tensor parallel "
                "4 and up is 512, which ran out of memory at capture for GLM's DSA on 8x RTX "
                "PRO 6000 (256 fitted); larger batches run without a graph",
                scope=f"SM120 DSA models, sglang {plan.sglang.version}",
            )
        )


def check_model_path(config: Config, model: ModelFacts | None = None) -> None:
    """ConfigError when model.path holds something sglang cannot start on."""
    model = model or read_model_facts(config.model.path)
    stand_in = config.server.command is not None  # reads no checkpoint
    if model.problem:  # "model.path: <path>: <what is there>; <the fix>"
        raise ConfigError(model.problem)
    if model.missing_config and not stand_in:
        raise ConfigError(f"model.path: {model.missing_config}")


def _target_notes(config: Config, plan: LaunchPlan) -> None:
    target, gpus = plan.target, plan.gpus
    if gpus.compute_capability != parse_compute_capability(target.compute_capability):
        plan.notes.append(
            f"these GPUs are {gpus.sm}, not {target.sm} of target {target.name}: the backends "
            f"below are {target.name}'s; set gpus.target for these GPUs"
        )
    if not plan.model.from_config:
        plan.notes.append(f"model: {plan.model.source}; fix model.path to plan for the model")
    if not plan.sglang.installed:
        plan.notes.append(
            f"sglang {plan.sglang.version} is the profile's pin, not read from "
            f"{config.server.python}: flag spellings may differ from the installed sglang"
        )


def _program(config: Config) -> list[str]:
    if config.server.command:
        return list(config.server.command)
    return [str(config.server.python), "-m", "sglang.launch_server"]


def _env(name: str, value: str, reason: str, scope: str = "") -> PlanEntry:
    return PlanEntry("env", name, value, reason, scope=scope)


def _flag(name: str, value: object | None, reason: str, scope: str = "") -> PlanEntry:
    return PlanEntry("flag", name, None if value is None else str(value), reason, scope=scope)


def _environment(config: Config, gpus: GpuFacts, profile: StackProfile) -> list[PlanEntry]:
    cuda_home = str(config.server.cuda_home or profile.cuda_home)
    entries = [
        _env("PYTHONUNBUFFERED", "1", "log lines reach the supervisor as they are written"),
        _env("NCCL_IB_DISABLE", "1", "one host: no InfiniBand; NCCL must not probe for it"),
        _env(
            "NCCL_P2P_LEVEL",
            config.gpus.nccl_p2p_level,
            "PCIe-only box without NVLink: allow GPU peer-to-peer across the whole PCIe "
            "fabric (reference used legacy 5, which NCCL maps to SYS); harmless with NVLink",
            scope="tuned on the sm120 reference (PCIe)",
        ),
        _env(
            "NCCL_MIN_NCHANNELS",
            "8",
            "more NCCL channels for all-reduce over PCIe (reference)",
            scope="tuned on the sm120 reference (PCIe)",
        ),
        _env(
            "OMP_NUM_THREADS",
            str(config.tuning.omp_num_threads),
            "bounds CPU threads per tensor-parallel rank (reference: 8)",
        ),
        _env("SAFETENSORS_FAST_GPU", "1", "load safetensors shards straight to the GPU"),
        _env(
            "CUDA_HOME",
            cuda_home,
            f"the CUDA {profile.cuda_version} toolkit the {profile.name} stack (sglang "
            f"{profile.sglang_version}, torch {profile.torch_version}) was built for; "
            "FlashInfer JIT compiles with it, not with the system CUDA"
            + (" (server.cuda_home)" if config.server.cuda_home else ""),
            scope=f"profile {profile.name}",
        ),
    ]
    if config.gpus.visible_devices is not None:
        devices = ",".join(map(str, config.gpus.visible_devices))
        entries.append(_env("CUDA_VISIBLE_DEVICES", devices, "gpus.visible_devices"))
    return entries + _cache_environment(config)


def cache_dir(config: Config) -> Path:
    """Where the engine's home and compile caches live (server.cache_dir)."""
    return config.server.cache_dir or Path.home() / ".cache" / "glm5"


def _cache_environment(config: Config) -> list[PlanEntry]:
    """One home and one set of cache folders for every start, glm5.service's and tune's
    trials' alike: what one start compiles or profiles, the next one loads."""
    root = cache_dir(config)
    source = "server.cache_dir" if config.server.cache_dir else "server.cache_dir unset"
    shared = f"in {root} ({source}), shared by glm5.service and tune's trials"
    rows = [
        ("HOME", root / "home", "caches that follow the home folder (sglang's ~/.cache/sglang, "
         "Triton's ~/.triton)"),
        ("XDG_CACHE_HOME", root, "caches that follow XDG's cache folder"),
        ("FLASHINFER_WORKSPACE_BASE", root / "flashinfer",
         "FlashInfer's JIT-compiled kernels (under .cache/flashinfer)"),
        ("SGLANG_CACHE_DIR", root / "sglang",
         "sglang's torch compile cache (piecewise CUDA graphs; 0.5.12+: its autotune file)"),
        ("SGLANG_DG_CACHE_DIR", root / "deep_gemm", "DeepGEMM's JIT-compiled kernels"),
        ("TRITON_CACHE_DIR", root / "triton", "Triton's compiled kernels"),
        (AUTOTUNE_DIR_ENV, root / "flashinfer-autotune",
         "FlashInfer's MoE autotune results, one file per GPU, FlashInfer version, MoE backend, "
         "start cap and rank (patch flashinfer-autotune-cache reads it)"),
    ]  # fmt: skip
    return [_env(name, str(path), f"{why}, {shared}") for name, path, why in rows]


def _server_flags(config: Config, gpus: GpuFacts, plan: LaunchPlan) -> list[PlanEntry]:
    gpus_here = len(config.gpus.visible_devices or []) or config.gpus.expected_count
    if gpus.source == "nvml" and gpus.count < gpus_here:
        plan.warnings.append(
            f"tensor parallel size {gpus_here} needs {gpus_here} GPUs but NVML sees "
            f"{gpus.count}; fix gpus.expected_count / gpus.visible_devices or the GPU passthrough"
        )
    tp_size, tp_reason = tensor_parallel_size(config, gpus_here)
    problem = port_problem(config.server.port, plan.sglang.version, config.server.env)
    if problem and config.server.command is None:  # a stand-in engine has no gRPC port
        raise ConfigError(problem)
    entries = [
        _flag("--model-path", config.model.path, f"model.path: {plan.model.architecture}"),
        _flag("--served-model-name", config.model.served_name, "model.served_name"),
    ]
    if config.model.load_format != "auto":
        entries.append(
            _flag(
                "--load-format",
                config.model.load_format,
                "model.load_format"
                + (
                    ": random weights, no checkpoint read (test models only)"
                    if config.model.load_format == "dummy"
                    else ""
                ),
            )
        )
    if config.model.tokenizer_path:
        entries.append(
            _flag("--tokenizer-path", config.model.tokenizer_path, "model.tokenizer_path")
        )
    entries += [
        _flag("--host", config.server.host, "server.host"),
        _flag("--port", config.server.port, "server.port"),
        _flag(
            "--tp-size",
            tp_size,
            f"{tp_reason} (the full name: --tp is only an argparse "
            "abbreviation and breaks when a new flag starts with --tp)",
        ),
        _flag("--log-level", config.server.log_level, "server.log_level"),
    ]
    entries.append(
        _flag(
            "--skip-server-warmup",
            None,
            "READY waits for glm5svc's own generation check, one real generation through the "
            "same path, so sglang's warm-up request only delays the start (20 s of a 106 s "
            "start on the H200)",
        )
    )
    if config.server.enable_metrics:
        entries.append(
            _flag(
                "--enable-metrics",
                None,
                "progress counters on /metrics let the supervisor tell a long prefill from "
                "a wedged engine",
            )
        )
    return entries


def _settings_the_model_ignores(config: Config, plan: LaunchPlan) -> None:
    """Keys set in the file that this model's plan leaves out: said, not dropped unseen."""
    tuning, model = config.tuning, plan.model
    if not model.from_config:
        return
    unused = []
    if not model.moe:
        if tuning.moe_runner_backend is not None:
            unused.append("tuning.moe_runner_backend")
        if tuning.disable_shared_experts_fusion:
            unused.append("tuning.disable_shared_experts_fusion")
    if not model.sparse_attention:
        unused += [
            key
            for key, value in (
                ("tuning.nsa_decode_backend", tuning.nsa_decode_backend),
                ("tuning.nsa_prefill_backend", tuning.nsa_prefill_backend),
            )
            if value is not None
        ]
    for key in unused:
        what = "no DSA sparse attention" if "nsa" in key else "no MoE experts (a dense model)"
        plan.warnings.append(
            f"{key} is set but {model.architecture} has {what}: the setting does nothing "
            "for this model; remove it"
        )


def _tuning_flags(config: Config, plan: LaunchPlan, nsa_fix: bool | None) -> list[PlanEntry]:
    tuning, target, model = config.tuning, plan.target, plan.model
    _settings_the_model_ignores(config, plan)
    entries = []
    quantization = _choose(tuning.quantization, target.quantization, "tuning.quantization", target)
    if quantization.value == "none":
        plan.notes.append(f"quantization none, no --quantization flag: {quantization.reason}")
    else:
        entries.append(
            _flag("--quantization", quantization.value, quantization.reason, quantization.scope)
        )
    entries += [
        _flag(
            "--mem-fraction-static",
            tuning.mem_fraction_static,
            "share of GPU memory for weights + KV cache (reference best: 0.92)",
        ),
        _flag(
            "--max-running-requests",
            tuning.max_running_requests,
            "batch ceiling; raising it from 64 to 1024 took the reference from ~800 to 3,740 tok/s",
        ),
    ]
    version = plan.sglang.version
    family = (
        target.attention_backend.sparse
        if model.sparse_attention
        else target.attention_backend.dense
    ).at(version)
    entries += _chosen(
        "--attention-backend", tuning.attention_backend, family, "tuning.attention_backend", plan
    )
    if model.sparse_attention:
        for option, configured, choice, key in (
            (
                "sparse_decode_backend",
                tuning.nsa_decode_backend,
                target.sparse_decode_backend.at(version),
                "tuning.nsa_decode_backend",
            ),
            (
                "sparse_prefill_backend",
                tuning.nsa_prefill_backend,
                target.sparse_prefill_backend.at(version),
                "tuning.nsa_prefill_backend",
            ),
        ):
            name = flag_name(option, plan.sglang.version)
            for entry in _chosen(name, configured, choice, key, plan):
                entries.append(_spelt(entry, plan))
    else:
        plan.notes.append(
            f"no sparse-attention (--nsa-*/--dsa-*) flags: {model.architecture} has no DSA "
            "attention"
        )
    if model.moe:
        entries += _chosen(
            "--moe-runner-backend",
            tuning.moe_runner_backend,
            target.moe_runner_backend,
            "tuning.moe_runner_backend",
            plan,
        )
    if not tuning.cuda_graph:
        entries.append(
            _flag(
                "--disable-cuda-graph",
                None,
                "the reference's tuned runs (3,740 tok/s at concurrency 1024) had CUDA graphs "
                "off; it costs ~10% at concurrency 64 (689 vs 757 tok/s): "
                "tuning.cuda_graph: true trades the other way",
            )
        )
    if model.sparse_attention:
        entries += _radix_cache(tuning.radix_cache, nsa_fix, plan)
    elif tuning.radix_cache == "off":
        entries.append(_flag("--disable-radix-cache", None, "tuning.radix_cache: off"))
    else:
        plan.notes.append(
            f"radix cache on: the NSA FP8 prefill crash it guards against needs DSA attention, "
            f"which {model.architecture} does not have"
        )
    if tuning.chunked_prefill_size:
        entries.append(
            _flag(
                "--chunked-prefill-size", tuning.chunked_prefill_size, "tuning.chunked_prefill_size"
            )
        )
    if tuning.disable_shared_experts_fusion:
        entries.append(
            _flag(
                "--disable-shared-experts-fusion",
                None,
                "works around the GLM-5 NVFP4 '3072 vs 6144' shape error at load",
            )
        )
    return entries


@dataclass(frozen=True)
class _Chosen:
    value: str | None  # None: leave the flag out, sglang chooses
    reason: str
    scope: str  # "target <name>" for the target's choice, "" for the config's


def _choose(configured: str | None, choice: Choice, key: str, target: Target) -> _Chosen:
    """The config's value if set, else the target's choice (with its reason)."""
    if configured is not None:
        return _Chosen(chosen_value(configured, choice), f"{key} (config)", "")
    return _Chosen(chosen_value(configured, choice), choice.reason, f"target {target.name}")


def _chosen(name: str, configured, choice: Choice, key: str, plan: LaunchPlan) -> list[PlanEntry]:
    chosen = _choose(configured, choice, key, plan.target)
    if chosen.value is None:
        plan.notes.append(f"{name} left to sglang: {chosen.reason} [{chosen.scope}]")
        return []
    return [_flag(name, chosen.value, chosen.reason, chosen.scope)]


def _spelt(entry: PlanEntry, plan: LaunchPlan) -> PlanEntry:
    """Say that the flag's name is this sglang version's spelling."""
    spelling = f"--nsa-* is sglang {plan.sglang.version}'s spelling (--dsa-* from 0.5.13)"
    if entry.name.startswith("--dsa-"):
        spelling = (
            f"--dsa-* is sglang {plan.sglang.version}'s spelling (renamed from --nsa-* in 0.5.13)"
        )
    scope = ", ".join(filter(None, [entry.scope, f"sglang {plan.sglang.version}"]))
    return PlanEntry(
        entry.kind, entry.name, entry.value, f"{entry.reason}; {spelling}", scope=scope
    )


def _radix_cache(mode: str, nsa_fix: bool | None, plan: LaunchPlan) -> list[PlanEntry]:
    off_reason = (
        "the NSA FP8 prefill path crashes with 'PrefillMetadata' object has no attribute "
        "'page_table_1_flattened' at high concurrency when prefixes are shared"
    )
    if mode == "off":
        return [_flag("--disable-radix-cache", None, f"tuning.radix_cache: off ({off_reason})")]
    if nsa_fix:
        plan.notes.append("radix cache on: the NSA FP8 prefill fix is in place")
        return []
    if mode == "on":
        plan.warnings.append(
            "tuning.radix_cache is 'on' but the NSA FP8 prefill fix is not known to be in "
            "place: the server may crash at high concurrency; run `glm5svc patch apply`"
        )
        return []
    state = "is not applied" if nsa_fix is False else "could not be checked"
    return [
        _flag(
            "--disable-radix-cache",
            None,
            f"{off_reason}; the fix (patch nsa-fp8-mha-prefix) {state}. "
            "`glm5svc patch apply` lets the radix cache (prefix caching) back on",
        )
    ]


def _add_api_key(key: str | None, plan: LaunchPlan) -> None:
    if key is None:
        return
    secrets_file = secrets_file_path()
    plan.secret_files[secrets_file] = secrets_file_text(key)
    plan.entries.append(
        _flag(
            "--config",
            secrets_file,
            "sglang reads --api-key from this 0600 file, so the key never shows in ps or logs",
        )
    )


def _merge_extra_args(config: Config, gpus: GpuFacts, plan: LaunchPlan) -> None:
    planned = [e.name for e in plan.flags]
    for name, values in parse_extra_args(config.server.extra_args):
        _refuse_unsafe_flag(name, "server.extra_args", gpus, plan, planned)
        if name == "--config":
            _check_sglang_config_file(values, gpus, plan, planned)
        replaced = [e for e in plan.flags if e.name == name]
        for old in replaced:
            plan.entries.remove(old)
            shown = shlex.join(old.tokens())
            plan.warnings.append(f"server.extra_args overrides the plan's {shown} ({old.reason})")
        plan.entries.append(
            PlanEntry(
                "flag",
                name,
                values[0] if values else None,
                "server.extra_args",
                "extra_args",
                tuple(values[1:]),
            )
        )


def _refuse_unsafe_flag(
    name: str, where: str, gpus: GpuFacts, plan: LaunchPlan, planned: list[str]
) -> None:
    """A flag that sglang would not take, or that would undo what the plan relies on."""
    problem = version_problem(name, plan.sglang.version)
    if problem:
        raise ConfigError(f"{where}: {problem}")
    forbidden = FORBIDDEN_FLAGS.get(name)
    if forbidden and forbidden.applies(gpus):
        raise ConfigError(
            f"{where}: {name} is not allowed: {forbidden.reason}. Fix: {forbidden.fix}"
        )
    if guarded := guarded_flag(name):
        also = [s for s in guarded.spellings if s != name]
        spelt = f" (sglang's {guarded.dest}, also spelt {', '.join(also)})" if also else ""
        derived = " is derived from the GPUs used" if guarded.dest == "tensor_parallel_size" else ""
        raise ConfigError(
            f"{where}: {name}{spelt}{derived}: the plan sets it from {guarded.key}, and a "
            f"second value would silently win over it. Fix: set {guarded.key} and remove "
            f"{name} from {where.split(' ')[0]}"
        )
    if meant := abbreviation_of(name, planned):
        raise ConfigError(
            f"{where}: {name} is an abbreviation of {' or '.join(meant)}, which sglang's parser "
            "would accept in its place and so override the plan unseen. Fix: write the full "
            "flag name"
        )


def _check_sglang_config_file(
    values: list[str], gpus: GpuFacts, plan: LaunchPlan, planned: list[str]
) -> None:
    """sglang reads one --config file (its keys are flag names without '--') before argv."""
    if any(path in plan.secret_files for path in map(Path, plan.flag_values("--config"))):
        raise ConfigError(
            "server.extra_args: --config: sglang reads one --config file, and the plan's "
            "carries the API key (server.api_key_file); another would drop the key. Fix: put "
            "those settings in server.extra_args itself"
        )
    if len(values) != 1 or not values[0]:
        raise ConfigError("server.extra_args: --config takes one file name. Fix: give its path")
    path = Path(values[0])
    try:
        document = parse_yaml(read_config_bytes(path), str(path))
    except OSError as exc:
        raise ConfigError(
            f"server.extra_args: --config {path}: cannot read: {exc.strerror or exc}. Fix: "
            "make it a readable file, or remove --config from server.extra_args"
        ) from None
    data = document.data if document.data is not None else {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"server.extra_args: --config {path}: sglang wants a mapping of flag names "
            "(e.g. 'chunked-prefill-size: 8192'). Fix: write it as one"
        )
    for key in data:
        name = "--" + str(key).replace("_", "-")
        line = document.line_of((key,))
        where = f"server.extra_args: --config {path}, line {line}, key {key}"
        _refuse_unsafe_flag(name, where, gpus, plan, planned)


def _merge_env_overrides(config: Config, plan: LaunchPlan) -> None:
    for name, value in config.server.env.items():
        if name in GUARDED_ENV:
            _check_guarded_env(config, name, value)
        for old in [e for e in plan.entries if e.kind == "env" and e.name == name]:
            plan.entries.remove(old)
            plan.warnings.append(f"server.env overrides {name}={old.value} ({old.reason})")
        plan.entries.append(PlanEntry("env", name, value, "server.env", "server.env"))


def _check_guarded_env(config: Config, name: str, value: str) -> None:
    """CUDA_VISIBLE_DEVICES in server.env is taken only where it agrees with the plan: no
    gpus.visible_devices beside it, and as many GPUs as the tensor parallel size per host."""
    key = GUARDED_ENV[name]
    if config.gpus.visible_devices is not None:
        raise ConfigError(
            f"server.env: {name} and {key} both choose the GPUs. Fix: keep {key} only"
        )
    devices = [part for part in value.split(",") if part.strip()]
    if len(devices) != config.gpus.expected_count:
        raise ConfigError(
            f"server.env: {name}={value!r} gives sglang {len(devices)} GPU(s), but the tensor "
            f"parallel size per host is {config.gpus.expected_count} (gpus.expected_count). "
            f"Fix: set {key} (it keeps both in step) and remove {name} from server.env"
        )


def _deprecations(plan: LaunchPlan) -> None:
    for entry in plan.flags:
        note = deprecation_note(entry.name, plan.sglang.version)
        if note:
            plan.notes.append(note)


def plan_for_service(config: Config, facts: HostFacts | None = None) -> LaunchPlan:
    """The plan as `glm5svc serve` launches it: from the host's facts (GPUs, the installed
    sglang and its NSA fix, config.json, the API key), read here unless given."""
    facts = facts or HostFacts.read(config)
    return build_launch_plan(
        config,
        gpus=facts.gpus,
        nsa_fix_in_place=facts.nsa_fix_in_place,
        sglang=facts.sglang_version(load_profile(config.server.profile)),
        model=facts.model,
        api_key=facts.api_key(),
    )
