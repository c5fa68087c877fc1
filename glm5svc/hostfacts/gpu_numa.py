"""Which NUMA nodes the NVIDIA GPUs sit on and which CPUs those nodes have (Linux sysfs).

Shared by the host module glm5_gpu_numa_facts (the container's cpuset) and glm5svc's
preflight inside the container (are the usable CPUs on those nodes?). Standard library only:
Ansible ships this file as module_utils.
"""

from __future__ import annotations

import os

NVIDIA_VENDOR = "0x10de"
# PCI classes 0x0300xx (VGA-compatible controller) and 0x0302xx (3D controller); the
# GPU's audio function (0x0403xx) is not a GPU.
GPU_CLASSES = ("0x0300", "0x0302")
NO_NODE = -1  # what sysfs reports when the platform gives no NUMA node


def parse_cpulist(text: str) -> list[int]:
    """'0-3,8,10-11' -> [0, 1, 2, 3, 8, 10, 11] (the kernel's cpulist format)."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if part:
            first, _, last = part.partition("-")
            cpus.update(range(int(first), int(last or first) + 1))
    return sorted(cpus)


def format_cpulist(cpus) -> str:
    """[0, 1, 2, 3, 8] -> '0-3,8'; the inverse of parse_cpulist."""
    ranges: list[tuple[int, int]] = []
    for cpu in sorted(set(cpus)):
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1] = (ranges[-1][0], cpu)
        else:
            ranges.append((cpu, cpu))
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def nvidia_gpus(sysfs_root: str = "/sys") -> list[tuple[str, int]]:
    """(PCI address, NUMA node) of each NVIDIA GPU, sorted by address; NO_NODE when unknown."""
    devices = os.path.join(sysfs_root, "bus", "pci", "devices")
    found = []
    for bdf in sorted(os.listdir(devices)) if os.path.isdir(devices) else []:
        base = os.path.join(devices, bdf)
        if _read(os.path.join(base, "vendor")) != NVIDIA_VENDOR:
            continue
        if not (_read(os.path.join(base, "class")) or "").startswith(GPU_CLASSES):
            continue
        node = _read(os.path.join(base, "numa_node"))
        try:
            found.append((bdf, int(node) if node is not None else NO_NODE))
        except ValueError:
            found.append((bdf, NO_NODE))
    return found


def node_cpus(sysfs_root: str = "/sys") -> dict[int, list[int]]:
    """{NUMA node: its CPUs} for every node with a readable cpulist."""
    nodes_dir = os.path.join(sysfs_root, "devices", "system", "node")
    nodes = {}
    for name in os.listdir(nodes_dir) if os.path.isdir(nodes_dir) else []:
        if name.startswith("node") and name[4:].isdigit():
            cpulist = _read(os.path.join(nodes_dir, name, "cpulist"))
            if cpulist is None:
                continue
            try:
                nodes[int(name[4:])] = parse_cpulist(cpulist)
            except ValueError:
                continue
    return nodes


def placement(gpus: list[tuple[str, int]], nodes: dict[int, list[int]]) -> dict:
    """The GPUs' NUMA nodes and their CPUs as an LXC cpuset, or the reason there is none.

    Keys: gpus, numa_nodes, node_cpus ({node: CPUs}), cpuset_cpus, cpuset_mems, cpu_count,
    reason ('' when a cpuset was computed).
    """
    result = {
        "gpus": [{"bdf": bdf, "numa_node": node} for bdf, node in gpus],
        "numa_nodes": sorted({node for _, node in gpus if node >= 0}),
        "node_cpus": {},
        "cpuset_cpus": "",
        "cpuset_mems": "",
        "cpu_count": 0,
        "reason": "",
    }
    if not gpus:
        result["reason"] = "no NVIDIA GPU found under /sys/bus/pci/devices"
    elif any(node < 0 for _, node in gpus):
        result["reason"] = "the platform reports no NUMA node for the GPUs (numa_node -1)"
    elif not set(result["numa_nodes"]) <= set(nodes):
        result["reason"] = f"no cpulist for NUMA nodes {result['numa_nodes']}"
    if result["reason"]:
        result["numa_nodes"] = []
        return result
    cpus = sorted({cpu for node in result["numa_nodes"] for cpu in nodes[node]})
    result.update(
        node_cpus={node: nodes[node] for node in result["numa_nodes"]},
        cpuset_cpus=format_cpulist(cpus),
        cpuset_mems=",".join(str(node) for node in result["numa_nodes"]),
        cpu_count=len(cpus),
    )
    return result


def read_placement(sysfs_root: str = "/sys", only_bdfs=()) -> dict:
    """placement() for the GPUs in sysfs (only those PCI addresses when given)."""
    wanted = {bdf.lower() for bdf in only_bdfs}
    gpus = [gpu for gpu in nvidia_gpus(sysfs_root) if not wanted or gpu[0].lower() in wanted]
    return placement(gpus, node_cpus(sysfs_root))
