#!/usr/bin/python
# Copyright: glm5svc contributors. Apache-2.0.
"""Read what decides GPU peer-to-peer speed on a PCIe-only host, and judge it."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: glm5_p2p_facts
short_description: Report IOMMU, ACS and NVIDIA P2P state that slows or hangs NCCL
description:
  - Reads the IOMMU state the kernel reports (C(/sys/class/iommu), the C(type) of each
    C(/sys/kernel/iommu_groups/*)), the kernel command line, the ACS control of PCIe bridges
    (C(lspci -vvv)) and, when
    present, C(nvidia-smi topo -m) and C(nvidia-smi topo -p2p r); returns findings with fixes.
  - Changes nothing.
options:
  cmdline_path:
    description: Kernel command line file.
    type: path
    default: /proc/cmdline
  sysfs_root:
    description: Where sysfs is mounted (tests point it at a made-up tree).
    type: path
    default: /sys
author: glm5svc contributors (@glm5svc)
attributes:
  check_mode:
    description: Runs in check mode and reports what it would change.
    support: full
"""

EXAMPLES = r"""
- name: Read the P2P-relevant state of the host
  glm5_p2p_facts:
  register: p2p

- name: Show the findings
  ansible.builtin.debug:
    msg: "{{ p2p.findings | map(attribute='problem') | list }}"
"""

RETURN = r"""
findings:
  description: Problems found, each with C(topic), C(problem) and C(fix).
  returned: always
  type: list
iommu_units:
  description: The IOMMU units in /sys/class/iommu (C(dmar0), C(ivhd0), ...); empty when it is off.
  returned: always
  type: list
iommu_group_types:
  description: How many IOMMU groups have each default domain type (C(DMA-FQ), C(identity), ...).
  returned: always
  type: dict
cmdline:
  description: The kernel command line.
  returned: always
  type: str
acs_bridges:
  description: PCI addresses of bridges with ACS source validation on.
  returned: always
  type: list
topology:
  description: Output of nvidia-smi topo -m ('' when not available).
  returned: always
  type: str
p2p_read:
  description: Output of nvidia-smi topo -p2p r ('' when not available).
  returned: always
  type: str
cross_socket_pairs:
  description: GPU pairs linked across CPU sockets (SYS, or SOC on old drivers), e.g. C(GPU0-GPU4).
  returned: always
  type: list
p2p_not_ok_pairs:
  description: GPU pairs whose P2P read is not OK, with the status (e.g. C(GPU0-GPU4) with C(NS)).
  returned: always
  type: dict
"""

import os
import re
import shutil

from ansible.module_utils.basic import AnsibleModule

# glm5svc/hostfacts/nvidia_topo.py: the parser glm5svc's preflight uses in the container.
from ansible.module_utils.nvidia_topo import TopologyError, parse_gpu_matrix

IOMMU_ON = re.compile(r"\b(intel_iommu|amd_iommu)=on\b")
DEVICE_HEADER = re.compile(r"^([0-9a-f]{4}:)?[0-9a-f]{2}:[0-9a-f]{2}\.[0-7] ")


# Default domain types that translate DMA (the kernel's iommu_groups/*/type): "identity" is
# passthrough (iommu=pt), "blocked"/"unmanaged" belong to VFIO and other owners.
TRANSLATED = ("DMA", "DMA-FQ")


def read_iommu(sysfs_root: str) -> tuple[list[str], dict[str, int]]:
    """The IOMMU units and the count of groups per default domain type, as the kernel says."""
    units_dir = os.path.join(sysfs_root, "class", "iommu")
    units = sorted(os.listdir(units_dir)) if os.path.isdir(units_dir) else []
    types: dict[str, int] = {}
    groups_dir = os.path.join(sysfs_root, "kernel", "iommu_groups")
    for group in sorted(os.listdir(groups_dir)) if os.path.isdir(groups_dir) else []:
        try:
            with open(os.path.join(groups_dir, group, "type"), encoding="utf-8") as handle:
                kind = handle.read().strip()
        except OSError:
            continue
        types[kind] = types.get(kind, 0) + 1
    return units, types


def iommu_findings(cmdline: str, units: list[str] | None = None, types: dict | None = None):
    """Translation seen in sysfs (kernels 6.8+ turn the IOMMU on without a parameter), else
    judged from the command line where sysfs says nothing (no groups readable)."""
    params = cmdline.split()
    named = " ".join(p for p in params if "iommu" in p) or "no iommu parameter"
    if types:
        translated = sum(n for kind, n in types.items() if kind in TRANSLATED)
        if not units or not translated:
            return []
        state = (
            f"{translated} IOMMU group(s) of type "
            + "/".join(k for k in TRANSLATED if k in types)
            + f" on {', '.join(units)}; kernel command line: {named}"
        )
    elif "iommu=pt" in params or "intel_iommu=off" in params or "amd_iommu=off" in params:
        return []
    elif IOMMU_ON.search(cmdline):
        state = named
    else:
        return []
    return [
        {
            "topic": "iommu",
            "problem": "IOMMU translation is on ("
            + state
            + "): GPU peer-to-peer DMA is translated or redirected, "
            "which is slow or hangs NCCL",
            "fix": "add iommu=pt to the kernel command line (LXC needs no VFIO): set "
            "glm5_host_p2p_report_cmdline_add: [iommu=pt] and "
            "glm5_host_p2p_report_apply_cmdline: true",
        }
    ]


def acs_bridges(lspci: str) -> list[str]:
    bridges, current = [], None
    for line in lspci.splitlines():
        if DEVICE_HEADER.match(line):
            current = line.split(" ", 1)[0]
        elif current and "ACSCtl:" in line and "SrcValid+" in line:
            bridges.append(current)
    return bridges


def acs_findings(bridges: list[str]) -> list[dict]:
    if not bridges:
        return []
    return [
        {
            "topic": "acs",
            "problem": f"ACS source validation is on at {len(bridges)} PCIe bridge(s) "
            f"({', '.join(bridges[:8])}{' ...' if len(bridges) > 8 else ''}): peer-to-peer traffic "
            "is sent up to the root complex (slow, or NCCL hangs)",
            "fix": "disable ACS in the BIOS (PCIe ACS / ACS control), "
            "or clear it at each boot with setpci -s <bridge> ECAP_ACS+0x6.w=0000 on these bridges",
        }
    ]


def unreadable_finding(what: str, error: TopologyError) -> dict:
    return {
        "topic": "topology",
        "problem": f"cannot read {what}: {error}",
        "fix": "run it by hand; a driver older than R400 or a GPU without the driver loaded "
        "prints no GPU matrix",
    }


def p2p_findings(table: str) -> list[dict]:
    if not table.strip():
        return []
    try:
        matrix = parse_gpu_matrix(table, "nvidia-smi topo -p2p r")
    except TopologyError as error:
        return [unreadable_finding("nvidia-smi topo -p2p r", error)]
    bad = sorted(set(p2p_not_ok(matrix).values()))
    if not bad:
        return []
    return [
        {
            "topic": "p2p",
            "problem": "nvidia-smi topo -p2p r reports GPU pairs without peer-to-peer reads ("
            + ", ".join(bad)
            + "; NS = not supported, CNS = chipset not supported)",
            "fix": "fix IOMMU/ACS first; if P2P stays unsupported set NCCL_P2P_DISABLE=1 "
            "so NCCL uses shared memory instead of hanging",
        }
    ]


def p2p_not_ok(matrix) -> dict[str, str]:
    """{"GPU0-GPU4": "NS", ...}: the pairs of a parsed topo -p2p r matrix without P2P reads."""
    return {f"GPU{a}-GPU{b}": cell for (a, b), cell in matrix.pairs().items() if cell != "OK"}


def sys_pairs(matrix: str) -> list[str]:
    """The GPU pairs whose link crosses CPU sockets (SYS, or SOC on old drivers)."""
    links = parse_gpu_matrix(matrix, "nvidia-smi topo -m").pairs()
    return [f"GPU{a}-GPU{b}" for (a, b), link in links.items() if link == "SYS"]


def topology_findings(matrix: str) -> list[dict]:
    if not matrix.strip():
        return []
    try:
        pairs = sys_pairs(matrix)
    except TopologyError as error:
        return [unreadable_finding("nvidia-smi topo -m", error)]
    if not pairs:
        return []
    return [
        {
            "topic": "topology",
            "problem": f"{len(pairs)} GPU pairs connect across CPU sockets (SYS: "
            f"{', '.join(pairs[:8])}{' ...' if len(pairs) > 8 else ''}): NCCL's default "
            "NCCL_P2P_LEVEL=PXB does not use P2P for them",
            "fix": "keep tensor-parallel groups within one socket, or set NCCL_P2P_LEVEL=SYS "
            "if topo -p2p r reports OK for those pairs",
        }
    ]


def run(module: AnsibleModule, argv: list[str]) -> str:
    if not shutil.which(argv[0]):
        return ""
    rc, out, _err = module.run_command(argv)
    return out if rc == 0 else ""


def _or_empty(read, text: str, empty):
    """read(text), or empty when there is no text or it does not parse (a finding says so)."""
    try:
        return read(text) if text.strip() else empty
    except TopologyError:
        return empty


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "cmdline_path": {"type": "path", "default": "/proc/cmdline"},
            "sysfs_root": {"type": "path", "default": "/sys"},
        },
        supports_check_mode=True,
    )
    try:
        with open(module.params["cmdline_path"], encoding="utf-8") as handle:
            cmdline = handle.read().strip()
    except OSError as error:
        module.fail_json(msg=f"cannot read the kernel command line: {error}")
    units, types = read_iommu(module.params["sysfs_root"])
    bridges = acs_bridges(run(module, ["lspci", "-vvv"]))
    topology = run(module, ["nvidia-smi", "topo", "-m"])
    p2p = run(module, ["nvidia-smi", "topo", "-p2p", "r"])
    findings = (
        iommu_findings(cmdline, units, types)
        + acs_findings(bridges)
        + p2p_findings(p2p)
        + topology_findings(topology)
    )
    module.exit_json(
        changed=False,
        findings=findings,
        cmdline=cmdline,
        iommu_units=units,
        iommu_group_types=types,
        acs_bridges=bridges,
        topology=topology,
        p2p_read=p2p,
        cross_socket_pairs=_or_empty(sys_pairs, topology, []),
        p2p_not_ok_pairs=_or_empty(
            lambda text: p2p_not_ok(parse_gpu_matrix(text, "nvidia-smi topo -p2p r")), p2p, {}
        ),
        lspci_available=bool(shutil.which("lspci")),
    )


if __name__ == "__main__":
    main()
