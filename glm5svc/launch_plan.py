"""The launch plan: exactly how `python -m sglang.launch_server` is started, and why.

Every flag and environment variable is an entry with a reason the user can read
(`glm5svc command --explain`). Rules learnt on the reference deployment
(shared/reference/deployment-facts.md) are enforced here, not left to memory.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

from glm5svc.config import Config, read_api_key
from glm5svc.errors import ConfigError
from glm5svc.gpus import GpuFacts, detect_gpus
from glm5svc.profiles import StackProfile, load_profile
from glm5svc.sglang_flags import FORBIDDEN_FLAGS, parse_extra_args

SECRET_PLACEHOLDER = "<secret>"
# Written by `glm5svc serve` (mode 0600) and read by sglang's own --config option,
# so the API key never appears in argv (ps, /proc/PID/cmdline) or in logs.
DEFAULT_SECRETS_FILE = Path("/run/glm5/sglang-secrets.yaml")


@dataclass(frozen=True)
class PlanEntry:
    kind: str  # "flag" or "env"
    name: str  # "--tp-size" or "NCCL_P2P_LEVEL"
    value: str | None  # None: a flag without a value
    reason: str
    source: str = "plan"  # "plan", "extra_args", "server.env"
    more_values: tuple[str, ...] = ()  # for flags that take several values

    def tokens(self) -> list[str]:
        values = [] if self.value is None else [self.value, *self.more_values]
        return [self.name, *values]


@dataclass
class LaunchPlan:
    program: list[str]
    entries: list[PlanEntry]
    gpus: GpuFacts
    sglang_version: str
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

    def summary(self) -> dict:
        return {
            "argv": self.argv,
            "env": self.env,
            "sglang_version": self.sglang_version,
            "tp_size": int(self.flag_value("--tp-size") or 0),
            "gpus": self.gpus.to_dict(),
            "warnings": list(self.warnings),
            "notes": list(self.notes),
        }

    def explain(self) -> str:
        lines = [f"# sglang {self.sglang_version} on {self.gpus.count}x {self.gpus.sm}"]
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
        rows.append(f"  {shown}\n      {entry.reason}{origin}")
    return rows


def build_launch_plan(
    config: Config,
    gpus: GpuFacts | None = None,
    nsa_fix_in_place: bool | None = None,
) -> LaunchPlan:
    """Build the plan. `nsa_fix_in_place`: is the NSA FP8 prefill fix in the venv's sglang
    (patched or fixed upstream)? None means unknown, which keeps the radix cache off."""
    gpus = gpus or detect_gpus(config)
    profile = load_profile(config.server.profile)
    plan = LaunchPlan(
        program=_program(config), entries=[], gpus=gpus, sglang_version=profile.sglang_version
    )
    if gpus.note:
        plan.notes.append(gpus.note)
    if not gpus.is_sm120_family:
        plan.notes.append(
            f"these GPUs are {gpus.sm}, not the SM120 target this plan is tuned for; "
            "backends and rules below are the SM120 ones"
        )
    plan.entries += _environment(config, gpus, profile)
    plan.entries += _server_flags(config, gpus, plan)
    plan.entries += _tuning_flags(config, profile, plan, nsa_fix_in_place)
    _add_api_key(config, plan)
    _merge_extra_args(config, gpus, plan)
    _merge_env_overrides(config, plan)
    return plan


def _program(config: Config) -> list[str]:
    if config.server.command:
        return list(config.server.command)
    return [str(config.server.python), "-m", "sglang.launch_server"]


def _env(name: str, value: str, reason: str) -> PlanEntry:
    return PlanEntry("env", name, value, reason)


def _flag(name: str, value: object | None, reason: str, source: str = "plan") -> PlanEntry:
    return PlanEntry("flag", name, None if value is None else str(value), reason, source)


def _environment(config: Config, gpus: GpuFacts, profile: StackProfile) -> list[PlanEntry]:
    cuda_home = str(config.server.cuda_home or profile.cuda_home)
    entries = [
        _env("PYTHONUNBUFFERED", "1", "log lines reach the supervisor as they are written"),
        _env("NCCL_IB_DISABLE", "1", "one host: no InfiniBand; NCCL must not probe for it"),
        _env(
            "NCCL_P2P_LEVEL",
            config.gpus.nccl_p2p_level,
            "PCIe-only box without NVLink: allow GPU peer-to-peer across the whole PCIe "
            "fabric (reference used legacy 5, which NCCL maps to SYS)",
        ),
        _env("NCCL_MIN_NCHANNELS", "8", "more NCCL channels for all-reduce over PCIe (reference)"),
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
            f"{profile.sglang_version}) was built for; FlashInfer JIT compiles with it, "
            "not with the system CUDA",
        ),
    ]
    if config.gpus.visible_devices is not None:
        devices = ",".join(map(str, config.gpus.visible_devices))
        entries.append(_env("CUDA_VISIBLE_DEVICES", devices, "gpus.visible_devices"))
    return entries


def _server_flags(config: Config, gpus: GpuFacts, plan: LaunchPlan) -> list[PlanEntry]:
    tp_size = len(config.gpus.visible_devices or []) or config.gpus.expected_count
    if gpus.source == "nvml" and gpus.count < tp_size:
        plan.warnings.append(
            f"tensor parallel size {tp_size} needs {tp_size} GPUs but NVML sees {gpus.count}; "
            "fix gpus.expected_count / gpus.visible_devices or the GPU passthrough"
        )
    entries = [
        _flag("--model-path", config.model.path, "model.path: the GLM-5-NVFP4 checkpoint"),
        _flag("--served-model-name", config.model.served_name, "model.served_name"),
    ]
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
            "tensor parallel size = GPUs used (the full name: --tp is only an argparse "
            "abbreviation and breaks when a new flag starts with --tp)",
        ),
        _flag("--log-level", config.server.log_level, "server.log_level"),
    ]
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


def _tuning_flags(
    config: Config, profile: StackProfile, plan: LaunchPlan, nsa_fix: bool | None
) -> list[PlanEntry]:
    tuning = config.tuning
    entries = [
        _flag("--quantization", tuning.quantization, "GLM-5-NVFP4 is a ModelOpt FP4 checkpoint"),
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
        _flag(
            "--attention-backend",
            tuning.attention_backend,
            "GLM-5's DSA/NSA attention stays on flashinfer on SM120 (other choices gave NaN "
            "in decode on the reference)",
        ),
        _flag(
            profile.sparse_attention_flag("decode"),
            tuning.nsa_decode_backend,
            "sparse-attention (DSA) decode kernels that work on SM120",
        ),
        _flag(
            profile.sparse_attention_flag("prefill"),
            tuning.nsa_prefill_backend,
            "sparse-attention (DSA) prefill kernels that work on SM120",
        ),
        _flag(
            "--moe-runner-backend",
            tuning.moe_runner_backend,
            "FlashInfer CUTLASS MoE with autotune (patch flashinfer-cutlass-autotune) was part "
            "of the reference's 4x gain",
        ),
    ]
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
    entries += _radix_cache(tuning.radix_cache, nsa_fix, plan)
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


def _add_api_key(config: Config, plan: LaunchPlan) -> None:
    key = read_api_key(config.server.api_key_file)
    if key is None:
        return
    plan.secret_files[DEFAULT_SECRETS_FILE] = f"api-key: {key}\n"
    plan.entries.append(
        _flag(
            "--config",
            DEFAULT_SECRETS_FILE,
            "sglang reads --api-key from this 0600 file, so the key never shows in ps or logs",
        )
    )


def _merge_extra_args(config: Config, gpus: GpuFacts, plan: LaunchPlan) -> None:
    for name, values in parse_extra_args(config.server.extra_args):
        forbidden = FORBIDDEN_FLAGS.get(name)
        if forbidden and forbidden.applies(gpus):
            raise ConfigError(
                f"server.extra_args: {name} is not allowed: {forbidden.reason}. "
                f"Fix: {forbidden.fix}"
            )
        if name == "--tp-size":
            raise ConfigError(
                "server.extra_args: --tp-size is derived from the GPUs used; set "
                "gpus.expected_count or gpus.visible_devices instead"
            )
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


def _merge_env_overrides(config: Config, plan: LaunchPlan) -> None:
    for name, value in config.server.env.items():
        for old in [e for e in plan.entries if e.kind == "env" and e.name == name]:
            plan.entries.remove(old)
            plan.warnings.append(f"server.env overrides {name}={old.value} ({old.reason})")
        plan.entries.append(PlanEntry("env", name, value, "server.env", "server.env"))


def plan_for_service(config: Config) -> LaunchPlan:
    """The plan as `glm5svc serve` builds it: GPUs detected, patch state read from the venv."""
    from glm5svc.patches import nsa_fix_in_place

    return build_launch_plan(config, nsa_fix_in_place=nsa_fix_in_place(config))
