"""What the container actually got: CPUs, memory limit, rlimits, CPUs on the GPUs' NUMA nodes.

Read from inside (cgroup v2 or v1, /proc/self/limits, sysfs); the roots are parameters so
the tests use made-up trees. The host role (glm5_host_lxc_resources) sets what this reads.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from glm5svc.hostfacts.gpu_numa import parse_cpulist, read_placement
from glm5svc.hostfacts.limits import MEMLOCK, MIN_NOFILE, NOFILE
from glm5svc.preflight.rows import OK, UNKNOWN, WARN, CheckRow, PreflightContext
from glm5svc.proc_limits import read_proc_limits

MIN_CPUS_PER_GPU = 2  # a busy-polling TP rank each, plus tokenizer/detokenizer/JIT
MIN_MEMORY_BYTES = 64 * 2**30  # 8 ranks' CUDA contexts and host buffers; reference had 256 GiB
HOST_FIX = "set it in the host inventory (glm5_host_lxc_resources_{}) and restart the container"


@dataclass(frozen=True)
class CgroupLimits:
    version: int | None  # 2, 1 or None (unreadable)
    cpu_quota: float | None  # CPUs' worth of time (quota/period), None = no limit
    cpuset: list[int] | None
    memory_max: int | None  # bytes, None = no limit


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None


def _own_cgroup(proc_root: Path) -> str:
    for line in (_read(proc_root / "self" / "cgroup") or "").splitlines():
        if line.startswith("0::"):
            return line[3:]
    return "/"


def _upwards(root: Path, relative: str) -> list[Path]:
    """The cgroup directory of this process and its parents up to the (namespaced) root."""
    path = root / relative.strip("/")
    chain = []
    while True:
        if path.is_dir():
            chain.append(path)
        if path == root or root not in path.parents:
            break
        path = path.parent
    return chain or [root]


def read_cgroup_limits(sys_root: Path = Path("/sys"), proc_root: Path = Path("/proc")):
    cgroup = sys_root / "fs" / "cgroup"
    if (cgroup / "cgroup.controllers").is_file():
        return _read_v2(_upwards(cgroup, _own_cgroup(proc_root)))
    if (cgroup / "memory").is_dir() or (cgroup / "cpu").is_dir():
        return _read_v1(cgroup)
    return CgroupLimits(None, None, None, None)


def _read_v2(chain: list[Path]) -> CgroupLimits:
    quotas, memories, cpuset = [], [], None
    for path in chain:  # the tightest limit on the way up counts
        cpu_max = (_read(path / "cpu.max") or "max").split()
        if cpu_max[0] != "max" and len(cpu_max) == 2:
            quotas.append(int(cpu_max[0]) / int(cpu_max[1]))
        memory = _read(path / "memory.max")
        if memory and memory != "max":
            memories.append(int(memory))
        effective = _read(path / "cpuset.cpus.effective")
        if cpuset is None and effective:
            cpuset = parse_cpulist(effective)
    return CgroupLimits(2, min(quotas, default=None), cpuset, min(memories, default=None))


def _read_v1(cgroup: Path) -> CgroupLimits:
    quota = _read(cgroup / "cpu" / "cpu.cfs_quota_us")
    period = _read(cgroup / "cpu" / "cpu.cfs_period_us")
    cpu_quota = int(quota) / int(period) if quota and period and int(quota) > 0 else None
    cpus = _read(cgroup / "cpuset" / "cpuset.effective_cpus") or _read(
        cgroup / "cpuset" / "cpuset.cpus"
    )
    memory = _read(cgroup / "memory" / "memory.limit_in_bytes")
    # v1 writes "no limit" as a huge page-aligned number.
    memory_max = int(memory) if memory and int(memory) < 2**62 else None
    return CgroupLimits(1, cpu_quota, parse_cpulist(cpus) if cpus else None, memory_max)


def gpu_numa_nodes(sys_root: Path = Path("/sys")) -> dict[int, list[int]]:
    """{NUMA node: CPUs of that node} for the nodes NVIDIA GPUs sit on; {} when unknown."""
    return read_placement(str(sys_root))["node_cpus"]


def check_container_resources(
    ctx: PreflightContext,
    sys_root: Path = Path("/sys"),
    proc_root: Path = Path("/proc"),
    affinity: set[int] | None = None,
) -> list[CheckRow]:
    gpus = ctx.config.gpus
    wanted_gpus = len(gpus.visible_devices) if gpus.visible_devices else gpus.expected_count
    limits = read_cgroup_limits(sys_root, proc_root)
    usable = sorted(affinity if affinity is not None else os.sched_getaffinity(0))
    return [
        _cpu_row(limits, usable, wanted_gpus),
        _memory_row(limits),
        _rlimit_row(read_proc_limits(proc_root)),
        _numa_row(gpu_numa_nodes(sys_root), usable),
    ]


def _cpu_row(limits: CgroupLimits, usable: list[int], wanted_gpus: int) -> CheckRow:
    count = len(usable)
    effective = min(count, limits.cpu_quota) if limits.cpu_quota is not None else count
    quota = f", quota {limits.cpu_quota:g} CPUs" if limits.cpu_quota is not None else ""
    source = f"cgroup v{limits.version}" if limits.version else "no cgroup readable"
    detail = f"{count} usable CPUs{quota} ({source}); {wanted_gpus} GPU ranks"
    need = MIN_CPUS_PER_GPU * wanted_gpus
    if effective < need:
        detail += f"; want >= {need}"
        return CheckRow("container cpus", WARN, detail, HOST_FIX.format("cores"))
    return CheckRow("container cpus", OK, detail)


def _memory_row(limits: CgroupLimits) -> CheckRow:
    if limits.version is None:
        return CheckRow("container memory", UNKNOWN, "no cgroup memory limit readable")
    if limits.memory_max is None:
        return CheckRow("container memory", OK, f"no limit (cgroup v{limits.version})")
    gib = limits.memory_max / 2**30
    detail = f"limit {gib:.0f} GiB (cgroup v{limits.version})"
    if limits.memory_max < MIN_MEMORY_BYTES:
        detail += f"; want >= {MIN_MEMORY_BYTES // 2**30} GiB"
        return CheckRow("container memory", WARN, detail, HOST_FIX.format("memory_mb"))
    return CheckRow("container memory", OK, detail)


def _rlimit_row(limits: dict[str, tuple[str, str]]) -> CheckRow:
    if set(limits) != {"memlock", "nofile"}:
        return CheckRow("container rlimits", UNKNOWN, "/proc/self/limits unreadable")
    memlock, nofile = limits["memlock"], limits["nofile"]
    detail = f"memlock {'/'.join(memlock)}, nofile {'/'.join(nofile)} (soft/hard, this process)"
    nofile_hard = float("inf") if nofile[1] == "unlimited" else int(nofile[1])
    if memlock[1] != MEMLOCK or nofile_hard < MIN_NOFILE:
        fix = (
            f"lxc.prlimit.memlock: {MEMLOCK} and lxc.prlimit.nofile: {NOFILE} in "
            "the container config (glm5_host_lxc_resources_memlock/_nofile), then restart the "
            "container"
        )
        return CheckRow(
            "container rlimits",
            WARN,
            detail + ": the container's hard limits cap what glm5.service's LimitMEMLOCK and "
            f"LimitNOFILE can raise (the server needs memlock {MEMLOCK}, nofile >= {MIN_NOFILE})",
            fix,
        )
    if memlock[0] != MEMLOCK:
        fix = f"run under glm5.service (LimitMEMLOCK=infinity, LimitNOFILE={NOFILE})"
        return CheckRow("container rlimits", WARN, detail + ": soft memlock is limited", fix)
    return CheckRow("container rlimits", OK, detail)


def _numa_row(placement: dict[int, list[int]], usable: list[int]) -> CheckRow:
    if not placement:
        return CheckRow("gpu numa placement", UNKNOWN, "GPUs' NUMA nodes not readable")
    own = set(usable)
    on_nodes = {node: len(own & set(cpus)) for node, cpus in placement.items()}
    outside = own - {cpu for cpus in placement.values() for cpu in cpus}
    shown = ", ".join(f"node {node}: {count}" for node, count in on_nodes.items())
    detail = f"usable CPUs on the GPUs' NUMA nodes: {shown}"
    fix = "glm5_host_lxc_resources_cpuset: auto on the host, then restart the container"
    if any(count == 0 for count in on_nodes.values()):
        return CheckRow("gpu numa placement", WARN, detail + " (a GPU node has no CPU)", fix)
    if outside:
        return CheckRow(
            "gpu numa placement", WARN, detail + f"; {len(outside)} CPUs on other nodes", fix
        )
    return CheckRow("gpu numa placement", OK, detail)
