"""Preflight rows about the GPUs and their driver: NVML's driver, the GPU count, the compute
capability against the target, processes holding GPU memory, nvidia_uvm's HMM and device.

Every check returns rows (ok / warn / fail / unknown); none raises. It must say the right
thing on a machine with no GPU.
"""

from __future__ import annotations

from pathlib import Path

from glm5svc.gpus import parse_compute_capability
from glm5svc.nvml import NvmlUnavailable, PynvmlSource
from glm5svc.port_owners import command_of
from glm5svc.preflight.rows import FAIL, OK, UNKNOWN, WARN, CheckRow, PreflightContext
from glm5svc.targets import get_target, known_targets, load_targets

UVM_HMM_PARAM = Path("/sys/module/nvidia_uvm/parameters/uvm_disable_hmm")


def check_driver(ctx: PreflightContext) -> list[CheckRow]:
    if ctx.gpus is None:
        return [
            CheckRow(
                "nvidia driver",
                FAIL,
                ctx.nvml_error or "NVML unavailable",
                "install the open NVIDIA driver on the host and the matching user-space "
                "driver in the container (ansible-playbook site.yml)",
                no_gpu=True,
            )
        ]
    return [CheckRow("nvidia driver", OK, f"driver {ctx.gpus.driver_version} (NVML)")]


def check_gpu_count(ctx: PreflightContext) -> list[CheckRow]:
    gpus = ctx.config.gpus
    wanted = len(gpus.visible_devices) if gpus.visible_devices is not None else gpus.expected_count
    if ctx.gpus is None:
        return [CheckRow("gpu count", UNKNOWN, f"config expects {wanted}; no NVML to count them")]
    seen = ctx.gpus.count
    if gpus.visible_devices is not None and max(gpus.visible_devices) >= seen:
        return [
            CheckRow(
                "gpu count",
                FAIL,
                f"gpus.visible_devices {gpus.visible_devices} but only GPUs 0..{seen - 1} exist",
                "fix gpus.visible_devices, or pass all GPUs into the container",
            )
        ]
    if seen < wanted:
        return [
            CheckRow(
                "gpu count",
                FAIL,
                f"{seen} GPU(s) visible, config expects {wanted}",
                "pass every GPU into the container (lxc passthrough role) or lower "
                "gpus.expected_count",
            )
        ]
    status = OK if seen == wanted else WARN
    fix = "" if seen == wanted else "set gpus.expected_count or visible_devices to use them all"
    return [CheckRow("gpu count", status, f"{seen} visible, config expects {wanted}", fix)]


def check_compute_capability(ctx: PreflightContext) -> list[CheckRow]:
    expected = parse_compute_capability(ctx.config.gpus.compute_capability)
    if ctx.gpus is None:
        return [CheckRow("compute capability", UNKNOWN, f"config expects {_sm(expected)}")]
    seen = ctx.gpus.compute_capability
    names = ", ".join(sorted(set(ctx.gpus.names))) or "unknown"
    target = get_target(ctx.config.gpus.target)
    if seen == expected:
        return [CheckRow("compute capability", OK, f"{_sm(seen)} ({names}), target {target.name}")]
    fitting = [
        t.name
        for t in load_targets().values()
        if parse_compute_capability(t.compute_capability) == seen
    ]
    fix = (
        f"run on the intended GPUs, or set gpus.target: {fitting[0]}"
        if fitting
        else f"run on the intended GPUs, or add a target for {_sm(seen)} to "
        f"glm5svc/data/targets.yaml (known: {', '.join(known_targets())})"
    )
    return [
        CheckRow(
            "compute capability",
            FAIL,
            f"{_sm(seen)} ({names}) is not the configured {_sm(expected)} (target "
            f"{target.name}: {target.description}); the plan's backends, patches and rules "
            "are chosen for that architecture",
            fix,
        )
    ]


def _sm(capability: tuple[int, int]) -> str:
    return "SM{}{} ({}.{})".format(*capability, *capability)


def check_uvm_hmm(ctx: PreflightContext, param: Path = UVM_HMM_PARAM) -> list[CheckRow]:
    """A failure only on targets that need it (sm120: CUDA in the reference's LXC container
    did not initialise until HMM was off); elsewhere the row informs."""
    target = get_target(ctx.config.gpus.target)
    needing = [t.name for t in load_targets().values() if t.requires("uvm_disable_hmm")]
    required = target.requires("uvm_disable_hmm")
    scope = f"target {target.name}" if required else f"target {', '.join(needing)}"
    bad = FAIL if required else WARN
    fix = (
        "on the Proxmox host: options nvidia_uvm uvm_disable_hmm=1 in "
        "/etc/modprobe.d/nvidia-uvm.conf, then reload nvidia_uvm or reboot (host role)"
    )
    if not required:
        fix = f"nothing for target {target.name} unless CUDA fails to initialise; then: {fix}"
    try:
        value = param.read_text().strip()
    except OSError:
        return [
            CheckRow(
                "uvm_disable_hmm",
                bad,
                f"{param} missing: nvidia_uvm not loaded",
                fix,
                scope,
                no_gpu=True,
            )
        ]
    if value in ("Y", "1"):
        return [CheckRow("uvm_disable_hmm", OK, "Y: HMM disabled in nvidia_uvm", scope=scope)]
    needed = "" if required else f"; only target {', '.join(needing)} requires it off"
    return [
        CheckRow(
            "uvm_disable_hmm",
            bad,
            f"{value}: HMM enabled; CUDA init can fail in an LXC container "
            f"(request_free_mem_region() err -34){needed}",
            fix,
            scope,
        )
    ]


def check_uvm_device(ctx: PreflightContext, path: Path = Path("/dev/nvidia-uvm")) -> list[CheckRow]:
    if path.exists():
        return [CheckRow("/dev/nvidia-uvm", OK, "present")]
    return [
        CheckRow(
            "/dev/nvidia-uvm",
            FAIL,
            "missing: CUDA cannot initialise",
            "on the host run `nvidia-modprobe -c0 -u` (the nvidia-devices unit does it at "
            "boot) and pass the node into the container",
            no_gpu=True,
        )
    ]


def check_gpu_processes(ctx: PreflightContext) -> list[CheckRow]:
    """A warning, not a failure: the engine still starts, but sizes its KV cache from the
    memory the others left."""
    if ctx.gpus is None:
        return [CheckRow("gpu processes", UNKNOWN, "no NVML to list processes")]
    try:
        holders = list_gpu_processes()
    except NvmlUnavailable as exc:
        return [CheckRow("gpu processes", UNKNOWN, str(exc))]
    if not holders:
        return [CheckRow("gpu processes", OK, "no process holds a GPU")]
    held: dict[int, int] = {}
    gpus_of: dict[int, list[int]] = {}
    for gpu, pid, mib in holders:
        held[gpu] = held.get(gpu, 0) + mib
        gpus_of.setdefault(pid, []).append(gpu)
    per_gpu = ", ".join(f"GPU {gpu} {mib} MiB" for gpu, mib in sorted(held.items()))
    pids = "; ".join(
        f"pid {pid} {_command_label(pid)} on GPU {', '.join(map(str, sorted(set(gpus))))}"
        for pid, gpus in list(gpus_of.items())[:6]
    ) + (f"; {len(gpus_of) - 6} more" if len(gpus_of) > 6 else "")
    return [
        CheckRow(
            "gpu processes",
            WARN,
            f"other processes hold GPU memory: {per_gpu} ({pids}); a second engine sizes its "
            "KV cache from the memory left: fewer KV tokens, lower throughput",
            "stop them before starting (an orphaned server from a failed restart keeps its "
            "memory: `systemctl stop glm5`, then kill the listed PIDs); `glm5svc status` shows "
            "the KV pool the engine got",
        )
    ]


def _command_label(pid: int) -> str:
    command = command_of(pid)
    # NVML gives host pids: inside a container most have no /proc entry here.
    return f"`{command}`" if command != "?" else "(command not visible here)"


def list_gpu_processes(source: PynvmlSource | None = None) -> list[tuple[int, int, int]]:
    """(gpu index, pid, MiB) for every compute process NVML reports."""
    source = source or PynvmlSource()
    gpus = source.open()
    try:
        return [
            (gpu.index, pid, (used or 0) // 2**20)
            for gpu in gpus
            for pid, used in source.compute_processes(gpu.index)
        ]
    finally:
        source.close()
