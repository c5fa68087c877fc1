#!/usr/bin/python
# Copyright: glm5svc contributors. Apache-2.0.
"""The NUMA nodes of the host's NVIDIA GPUs and the CPUs of those nodes (read from sysfs)."""

from __future__ import annotations

import os

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
---
module: glm5_gpu_numa_facts
short_description: NUMA placement of the host's NVIDIA GPUs, as an LXC cpuset
description:
  - Reads C(/sys/bus/pci/devices/<bdf>/numa_node) of every NVIDIA display or 3D controller
    (vendor C(0x10de), class C(0x0300xx) or C(0x0302xx)) and
    C(/sys/devices/system/node/node*/cpulist), and returns the CPUs and memory nodes of the
    GPUs' NUMA nodes, ready for
    C(lxc.cgroup2.cpuset.cpus) and C(lxc.cgroup2.cpuset.mems).
  - Reads only; never changes anything.
options:
  sysfs_root:
    description: Where sysfs is mounted (tests point it at a made-up tree).
    type: path
    default: /sys
  gpu_bdfs:
    description: Only these PCI addresses (e.g. C(0000:41:00.0)); empty means every NVIDIA GPU.
    type: list
    elements: str
    default: []
supports_check_mode: true
"""

RETURN = r"""
gpus:
  description: Each GPU's PCI address and NUMA node (-1 when the platform reports none).
  returned: always
  type: list
numa_nodes:
  description: The NUMA nodes the GPUs sit on, sorted.
  returned: always
  type: list
cpuset_cpus:
  description: The CPUs of those nodes as a cpulist (e.g. C(0-31,64-95)); empty when unknown.
  returned: always
  type: str
cpuset_mems:
  description: Those nodes as a list for cpuset.mems (e.g. C(0,1)); empty when unknown.
  returned: always
  type: str
cpu_count:
  description: How many CPUs C(cpuset_cpus) holds.
  returned: always
  type: int
reason:
  description: Why no cpuset could be computed (empty when one was).
  returned: always
  type: str
"""

NVIDIA_VENDOR = "0x10de"
GPU_CLASSES = ("0x0300", "0x0302")  # VGA-compatible and 3D controllers


def parse_cpulist(text: str) -> list[int]:
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return sorted(cpus)


def format_cpulist(cpus: list[int]) -> str:
    ranges, start, prev = [], None, None
    for cpu in sorted(set(cpus)):
        if start is None:
            start = prev = cpu
        elif cpu == prev + 1:
            prev = cpu
        else:
            ranges.append((start, prev))
            start = prev = cpu
    if start is not None:
        ranges.append((start, prev))
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in ranges)


def _read(path: str) -> str:
    with open(path, encoding="ascii") as handle:
        return handle.read().strip()


def nvidia_gpus(sysfs_root: str) -> list[tuple[str, int]]:
    """(PCI address, NUMA node) of each NVIDIA GPU, sorted by address."""
    devices = os.path.join(sysfs_root, "bus", "pci", "devices")
    found = []
    for bdf in sorted(os.listdir(devices)) if os.path.isdir(devices) else []:
        base = os.path.join(devices, bdf)
        try:
            if _read(os.path.join(base, "vendor")) != NVIDIA_VENDOR:
                continue
            if not _read(os.path.join(base, "class")).startswith(GPU_CLASSES):
                continue
            node = int(_read(os.path.join(base, "numa_node")))
        except (OSError, ValueError):
            continue
        found.append((bdf, node))
    return found


def node_cpus(sysfs_root: str) -> dict[int, list[int]]:
    nodes_dir = os.path.join(sysfs_root, "devices", "system", "node")
    nodes = {}
    for name in os.listdir(nodes_dir) if os.path.isdir(nodes_dir) else []:
        if name.startswith("node") and name[4:].isdigit():
            try:
                nodes[int(name[4:])] = parse_cpulist(
                    _read(os.path.join(nodes_dir, name, "cpulist"))
                )
            except (OSError, ValueError):
                continue
    return nodes


def placement(gpus: list[tuple[str, int]], nodes: dict[int, list[int]]) -> dict:
    """The cpuset for the GPUs' NUMA nodes, or a reason why there is none."""
    result = {
        "gpus": [{"bdf": bdf, "numa_node": node} for bdf, node in gpus],
        "numa_nodes": sorted({node for _, node in gpus if node >= 0}),
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
        cpuset_cpus=format_cpulist(cpus),
        cpuset_mems=",".join(str(node) for node in result["numa_nodes"]),
        cpu_count=len(cpus),
    )
    return result


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "sysfs_root": {"type": "path", "default": "/sys"},
            "gpu_bdfs": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    root = module.params["sysfs_root"]
    wanted = {bdf.lower() for bdf in module.params["gpu_bdfs"]}
    gpus = [gpu for gpu in nvidia_gpus(root) if not wanted or gpu[0].lower() in wanted]
    module.exit_json(changed=False, **placement(gpus, node_cpus(root)))


if __name__ == "__main__":
    main()
