"""Known failure signatures of SGLang serving GLM-5 on SM120: the table, and matching it.

Each signature names what the log shows, the cause and the fix. The table is data:
add a row to teach the supervisor, `glm5svc status` and the journal a new failure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from glm5svc.errors import EXIT_CONFIG
from glm5svc.records import Diagnosis as DiagnosisRecord

EXIT_ENGINE_FAILED = 1


@dataclass(frozen=True)
class Signature:
    id: str
    title: str
    patterns: tuple[str, ...]  # any one matching a log line identifies the failure
    cause: str
    fix: str
    # A restart cannot help (host or configuration must change): exit 78, no restart loop.
    needs_operator: bool = False


SIGNATURES: tuple[Signature, ...] = (
    Signature(
        id="grpc-port-out-of-range",
        title="sglang's derived gRPC port is past 65535",
        patterns=(r"SGLANG_GRPC_PORT \(\d+\) must be between 1 and 65535",),
        cause=(
            "sglang 0.5.11 and later put a gRPC port at server.port + 10000 and refuse to "
            "start when that is past 65535 (recorded on an H200: port 60011 -> 70011)"
        ),
        fix="set server.port to 55535 or lower, or SGLANG_GRPC_PORT in server.env",
        needs_operator=True,
    ),
    Signature(
        id="engine-port-in-use",
        title="The engine port is taken by another process",
        patterns=(r"[Aa]ddress already in use", r"\[Errno 98\]"),
        cause=(
            "another process (a stale engine, a hand-started sglang) already listens on "
            "server.port, so the new server cannot bind it"
        ),
        fix=(
            "find it with `ss -ltnp 'sport = :PORT'` (or `glm5svc preflight`), stop it, or "
            "set server.port to a free port; then restart glm5"
        ),
        needs_operator=True,
    ),
    Signature(
        id="cuda-init-uvm-hmm",
        title="CUDA failed to initialise",
        patterns=(
            r"request_free_mem_region\(\) err -34",
            r"CUDA driver initialization failed",
            r"CUDA_ERROR_NOT_INITIALIZED",
            r"cuInit\(0\) failed",
            r"CUDA initialization: .*(Error 3|initialization error)",
        ),
        cause=(
            "the nvidia_uvm module's HMM support fails to set up device memory "
            "(kernel message `request_free_mem_region() err -34`), so every CUDA call fails"
        ),
        fix=(
            "on the host: `options nvidia_uvm uvm_disable_hmm=1` in /etc/modprobe.d/, "
            "then reload nvidia_uvm (or reboot) and restart the container"
        ),
        needs_operator=True,
    ),
    Signature(
        id="nsa-prefill-metadata",
        title="NSA FP8 prefill crash (page_table_1_flattened)",
        patterns=(r"'PrefillMetadata' object has no attribute 'page_table_1_flattened'",),
        cause=(
            "a prefill batch with a shared cached prefix took the MHA one-shot path with FP8 KV "
            "cache; the FlashInfer MLA metadata has no page_table_1_flattened"
        ),
        fix=(
            "apply the NSA FP8 prefill patch to the venv's sglang, or set tuning.radix_cache: "
            "off (--disable-radix-cache); --disable-chunked-prefix-cache is a flag-only guard"
        ),
    ),
    Signature(
        id="allreduce-fusion-sm120",
        title="FlashInfer allreduce fusion is not supported on SM120",
        patterns=(
            r"No supported CUDA architectures found for major versions \[9, 10\]",
            r"(allreduce|all-reduce).{0,40}fusion.{0,80}(SM ?90|SM ?100|SM10X|sm_90|sm_100)",
            r"(SM ?90|SM ?100|SM10X).{0,80}(allreduce|all-reduce).{0,20}fusion",
        ),
        cause=(
            "--enable-flashinfer-allreduce-fusion (or its auto-enable) selects TRT-LLM allreduce "
            "fusion kernels that exist only for SM90 and SM100"
        ),
        fix=(
            "remove --enable-flashinfer-allreduce-fusion from server.extra_args; on SGLang "
            "versions that auto-enable it, pass --disable-flashinfer-allreduce-fusion"
        ),
        needs_operator=True,
    ),
    Signature(
        id="nan-in-decode",
        title="NaN during decode",
        patterns=(
            r"NaN in the logits",
            r"probability tensor contains either `inf`, `nan` or element < 0",
        ),
        cause=(
            "the model produced NaN logits: an attention or MoE backend that is wrong "
            "on SM120 for this model"
        ),
        fix=(
            "keep the reference backends (tuning.attention_backend: flashinfer, nsa_*_backend: "
            "trtllm, moe_runner_backend: flashinfer_cutlass) and remove backend overrides "
            "from server.extra_args"
        ),
    ),
    Signature(
        id="cuda-oom",
        title="CUDA out of memory",
        patterns=(
            r"CUDA out of memory",
            r"torch\.OutOfMemoryError",
            r"CUDA error: out of memory",
            r"Not enough memory\. Please try to increase --mem-fraction-static",
        ),
        cause=(
            "the GPUs ran out of memory: another process (often an orphan of an earlier "
            "start) still holds GPU memory, or mem_fraction_static / max_running_requests "
            "leave too little for activations"
        ),
        fix=(
            "check `nvidia-smi` for other processes and stop them; otherwise lower "
            "tuning.mem_fraction_static (e.g. 0.90) or tuning.max_running_requests"
        ),
    ),
    Signature(
        id="nvml-version-mismatch",
        title="NVML driver/library version mismatch",
        patterns=(r"Driver/library version mismatch", r"NVML library version: .*mismatch"),
        cause=(
            "the loaded NVIDIA kernel module and the user-space driver libraries differ "
            "(driver upgraded without reboot, or the container's libraries differ from the host)"
        ),
        fix=(
            "reboot the host (or reload the nvidia modules), and make the container's "
            "driver libraries the host driver's version"
        ),
        needs_operator=True,
    ),
    Signature(
        id="shared-experts-fusion",
        title='GLM-5 NVFP4 "3072 vs 6144" load error',
        patterns=(
            r"size of tensor a \(3072\) must match the size of tensor b \(6144\)",
            r"size of tensor a \(6144\) must match the size of tensor b \(3072\)",
        ),
        cause=(
            "shared-experts fusion builds fused expert weights that do not match the "
            "GLM-5 NVFP4 checkpoint's shapes"
        ),
        fix="set tuning.disable_shared_experts_fusion: true (--disable-shared-experts-fusion)",
        needs_operator=True,
    ),
    Signature(
        id="nccl-timeout",
        title="NCCL collective timed out",
        patterns=(
            r"Watchdog caught collective operation timeout",
            r"NCCL.{0,40}timed? ?out",
            r"ran for \d+ milliseconds before timing out",
        ),
        cause=(
            "a collective (all-reduce) between ranks did not finish: one rank hung or died, "
            "or peer-to-peer over PCIe stalls"
        ),
        fix=(
            "look for the first rank that failed above; check `nvidia-smi topo -m` and "
            "gpus.nccl_p2p_level (SYS for the reference host), and run with NCCL_DEBUG=INFO"
        ),
    ),
    Signature(
        id="nccl-error",
        title="NCCL error",
        patterns=(
            r"NCCL error",
            r"ncclUnhandledCudaError|ncclSystemError|ncclInternalError|ncclInvalidUsage",
            r"DistBackendError",
        ),
        cause="NCCL failed between the tensor-parallel ranks (transport, P2P or CUDA error)",
        fix=(
            "run with NCCL_DEBUG=INFO (server.env) to see the transport; check gpus.nccl_p2p_level "
            "and that no other process uses the GPUs; in LXC make all /dev/nvidia* visible"
        ),
    ),
    Signature(
        # sglang's launcher watches its children and logs this line before taking the whole
        # server down (recorded from sglang 0.5.11: tests/fixtures/real_engine/). The more
        # specific signatures above name the cause when the child printed one first.
        id="engine-child-killed",
        title="An engine process was killed",
        patterns=(r"Subprocess \w+ \(pid=\d+\) crashed with exit code -9\b",),
        cause=(
            "a process of the server (the scheduler or the detokenizer) received SIGKILL: "
            "most often the kernel's out-of-memory killer, else an operator's kill -9"
        ),
        fix=(
            "look for 'Out of memory: Killed process' in `journalctl -k` on the host; give the "
            "container more memory (glm5_host_lxc_resources) or lower tuning.max_running_requests; "
            "systemd restarts the service"
        ),
    ),
)

_COMPILED = [(sig, [re.compile(p, re.IGNORECASE) for p in sig.patterns]) for sig in SIGNATURES]


@dataclass(frozen=True)
class Diagnosis:
    signature: Signature
    evidence: str  # the first log line that matched

    def to_record(self) -> DiagnosisRecord:
        sig = self.signature
        return DiagnosisRecord(
            id=sig.id,
            title=sig.title,
            cause=sig.cause,
            fix=sig.fix,
            evidence=self.evidence,
            needs_operator=sig.needs_operator,
        )

    def render(self) -> str:
        sig = self.signature
        return (
            f"diagnosis: {sig.title} [{sig.id}]\n  evidence: {self.evidence.strip()}\n"
            f"  cause: {sig.cause}\n  fix: {sig.fix}"
        )


def diagnose(lines: Iterable[str]) -> list[Diagnosis]:
    """Every known signature found in the log, in order of first appearance."""
    found: dict[str, Diagnosis] = {}
    for line in lines:
        for sig, patterns in _COMPILED:
            if sig.id not in found and any(p.search(line) for p in patterns):
                found[sig.id] = Diagnosis(sig, line.strip()[:500])
    return list(found.values())


def cannot_start(program: str, exc: OSError) -> str:
    """No interpreter or program there: restarting cannot help."""
    return (
        f"cannot start the server {program}: {exc.strerror or exc}; "
        "check server.python (or server.command)"
    )


def exit_status_for(diagnoses: list[Diagnosis]) -> int:
    """78 when a restart cannot help (systemd's RestartPreventExitStatus), else 1."""
    if diagnoses and diagnoses[0].signature.needs_operator:
        return EXIT_CONFIG
    return EXIT_ENGINE_FAILED
