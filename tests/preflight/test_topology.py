"""GPU topology parsing and NCCL conclusions, on recorded `nvidia-smi topo` outputs."""

from __future__ import annotations

import subprocess

import pytest

from glm5svc.config import Config, config_from_mapping
from glm5svc.facts import HostFacts
from glm5svc.preflight.rows import OK, UNKNOWN, WARN, PreflightContext
from glm5svc.preflight.run import default_checks
from glm5svc.preflight.topology import (
    TopologyError,
    assess,
    check_gpu_topology,
    parse_gpu_matrix,
    read_topology,
)

LEGEND_M = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""  # noqa: E501

LEGEND_P2P = """
Legend:

  X    = Self
  OK   = Status Ok
  CNS  = Chipset not supported
  GNS  = GPU not supported
  TNS  = Topology not supported
  NS   = Not supported
  U    = Unknown
"""

# Recorded on nvidia-h200-x2 (2x H200 SXM, driver 580.159.04), 2026-11-29, ANSI codes included.
H200X2_TOPO = (
    "\t\x1b[4mGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
    "GPU0\t X \tNV18\t0-31\t0\t\tN/A\n"
    "GPU1\tNV18\t X \t0-31\t0\t\tN/A\n" + LEGEND_M
)
H200X2_P2P = " \t\x1b[4mGPU0\tGPU1\t\x1b[0m\n GPU0\tX\tOK\t\n GPU1\tOK\tX\t\n" + LEGEND_P2P

# 8 PCIe-only GPUs on two sockets (the reference host's shape): pairs behind one switch are
# PXB, across host bridges of a socket NODE, across sockets SYS.
PCIE8_TOPO = (
    "\t\x1b[4mGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\tGPU6\tGPU7\tNIC0\tCPU Affinity\t"
    "NUMA Affinity\tGPU NUMA ID\x1b[0m\n"
    "GPU0\t X \tPXB\tNODE\tNODE\tSYS\tSYS\tSYS\tSYS\tNODE\t0-31,64-95\t0\t\tN/A\n"
    "GPU1\tPXB\t X \tNODE\tNODE\tSYS\tSYS\tSYS\tSYS\tNODE\t0-31,64-95\t0\t\tN/A\n"
    "GPU2\tNODE\tNODE\t X \tPXB\tSYS\tSYS\tSYS\tSYS\tPXB\t0-31,64-95\t0\t\tN/A\n"
    "GPU3\tNODE\tNODE\tPXB\t X \tSYS\tSYS\tSYS\tSYS\tPXB\t0-31,64-95\t0\t\tN/A\n"
    "GPU4\tSYS\tSYS\tSYS\tSYS\t X \tPXB\tNODE\tNODE\tSYS\t32-63,96-127\t1\t\tN/A\n"
    "GPU5\tSYS\tSYS\tSYS\tSYS\tPXB\t X \tNODE\tNODE\tSYS\t32-63,96-127\t1\t\tN/A\n"
    "GPU6\tSYS\tSYS\tSYS\tSYS\tNODE\tNODE\t X \tPXB\tSYS\t32-63,96-127\t1\t\tN/A\n"
    "GPU7\tSYS\tSYS\tSYS\tSYS\tNODE\tNODE\tPXB\t X \tSYS\t32-63,96-127\t1\t\tN/A\n"
    "NIC0\tNODE\tNODE\tPXB\tPXB\tSYS\tSYS\tSYS\tSYS\t X \t\t\t\t\n"
    + LEGEND_M
    + "\nNIC Legend:\n\n  NIC0: mlx5_0\n"
)


def p2p_matrix(n: int, status) -> str:
    """A `topo -p2p r` matrix; status(a, b) gives each off-diagonal cell."""
    header = " \t\x1b[4m" + "\t".join(f"GPU{i}" for i in range(n)) + "\t\x1b[0m\n"
    rows = [
        f" GPU{a}\t" + "\t".join("X" if a == b else status(a, b) for b in range(n)) + "\t"
        for a in range(n)
    ]
    return header + "\n".join(rows) + "\n" + LEGEND_P2P


PCIE8_P2P_OK = p2p_matrix(8, lambda a, b: "OK")
# P2P reads refused across the sockets: ACS or an IOMMU routing peer traffic to the CPU.
PCIE8_P2P_NS = p2p_matrix(8, lambda a, b: "OK" if (a < 4) == (b < 4) else "NS")

SINGLE_TOPO = (
    "\t\x1b[4mGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
    "GPU0\t X \t0-15\t0\t\tN/A\n" + LEGEND_M
)


def by_name(findings):
    return {f.name: f for f in findings}


def test_parses_the_recorded_h200_matrix_with_ansi_codes():
    matrix = parse_gpu_matrix(H200X2_TOPO)
    assert matrix.gpus == [0, 1]
    assert matrix.cell(0, 1) == "NV18" and matrix.cell(1, 0) == "NV18"
    assert matrix.cell(0, 0) == "X"
    assert matrix.extra[1] == {"CPU Affinity": "0-31", "NUMA Affinity": "0", "GPU NUMA ID": "N/A"}
    p2p = parse_gpu_matrix(H200X2_P2P)
    assert p2p.cell(0, 1) == "OK"


def test_h200_nvlink_pair_is_ok_and_uses_nvlink():
    found = by_name(assess(H200X2_TOPO, H200X2_P2P))
    assert [f.status for f in found.values()] == [OK, OK, OK]
    assert "NV18 x1 (0-1)" in found["gpu topology"].detail
    assert "all 1 pairs OK" in found["gpu p2p read"].detail
    assert "P2P over NVLink x1" in found["nccl transport"].detail


def test_nic_rows_and_columns_are_ignored():
    matrix = parse_gpu_matrix(PCIE8_TOPO)
    assert matrix.gpus == list(range(8))
    assert matrix.cell(0, 4) == "SYS"
    assert matrix.cell(2, 3) == "PXB"
    assert matrix.extra[0]["NIC0"] == "NODE"  # the NIC column, kept raw
    assert matrix.extra[4]["NUMA Affinity"] == "1"


def test_pcie_only_box_at_level_sys_uses_p2p_everywhere():
    found = by_name(assess(PCIE8_TOPO, PCIE8_P2P_OK, "SYS"))
    topology = found["gpu topology"].detail
    assert topology.startswith("8 GPUs, 28 pairs")
    # Best links first: PXB, then NODE, then SYS.
    assert topology.index("PXB x4") < topology.index("NODE x8") < topology.index("SYS x16")
    assert "GPU0 CPUs 0-31,64-95 NUMA 0" in topology and "GPU7 CPUs 32-63,96-127 NUMA 1" in topology
    assert found["gpu p2p read"].status == OK
    assert found["nccl transport"].status == OK
    assert "P2P over PCIe x28" in found["nccl transport"].detail


def test_nccl_default_level_pxb_sends_node_and_sys_pairs_through_host_memory():
    found = by_name(assess(PCIE8_TOPO, PCIE8_P2P_OK, "PXB"))
    nccl = found["nccl transport"]
    assert nccl.status == WARN
    assert "NCCL falls back to host memory" in nccl.detail
    assert "host memory x24" in nccl.detail and "P2P over PCIe x4" in nccl.detail
    assert "gpus.nccl_p2p_level: SYS" in nccl.fix


def test_ns_in_p2p_matrix_is_reported_with_the_host_fix():
    found = by_name(assess(PCIE8_TOPO, PCIE8_P2P_NS, "SYS"))
    p2p = found["gpu p2p read"]
    assert p2p.status == WARN
    assert "16 of 28 pairs without P2P read" in p2p.detail
    assert "NS (not supported): 0-4" in p2p.detail
    nccl = found["nccl transport"]
    assert nccl.status == WARN
    assert nccl.detail.startswith(
        "P2P read not supported between GPU0 and GPU4 (NS, link SYS): "
        "NCCL falls back to host memory"
    )
    assert "ACS/IOMMU" in nccl.fix and "p2p_report" in nccl.fix


def test_visible_devices_limit_the_pairs_checked():
    found = by_name(assess(PCIE8_TOPO, PCIE8_P2P_NS, "SYS", devices=[0, 1, 2, 3]))
    assert found["gpu topology"].detail.startswith("4 of 8 GPUs (those the service uses), 6 pairs")
    assert found["gpu p2p read"].status == OK
    assert found["nccl transport"].status == OK
    with pytest.raises(TopologyError, match=r"GPUs \[9\]"):
        assess(PCIE8_TOPO, PCIE8_P2P_OK, devices=[0, 9])


def test_single_gpu_warns_nothing_to_check():
    (finding,) = assess(SINGLE_TOPO, None)
    assert finding.status == WARN
    assert "nothing to check" in finding.detail


def test_missing_p2p_matrix_is_unknown_not_ok():
    found = by_name(assess(H200X2_TOPO, None))
    assert found["gpu p2p read"].status == UNKNOWN


def test_garbage_and_short_rows_are_clear_errors():
    with pytest.raises(TopologyError, match="no header row naming GPU0"):
        parse_gpu_matrix("No devices were found\n")
    short = "\tGPU0\tGPU1\nGPU0\t X \nGPU1\tNV18\t X \n"
    with pytest.raises(TopologyError, match="row GPU0 has 1 cells for 2 GPU columns"):
        parse_gpu_matrix(short)


def fake_runner(outputs: dict[str, tuple[int, str, str]]):
    def run(argv):
        rc, out, err = outputs[" ".join(argv[1:])]
        return subprocess.CompletedProcess(argv, rc, out, err)

    return run


def test_read_topology_without_nvidia_smi_says_so():
    with pytest.raises(TopologyError, match="nvidia-smi not found on PATH"):
        read_topology(which=lambda name: None)


def test_read_topology_reports_a_failing_nvidia_smi():
    failing = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    run = fake_runner({"topo -m": (9, failing, "")})
    with pytest.raises(TopologyError, match="exited 9: NVIDIA-SMI has failed"):
        read_topology(run=run, which=lambda name: "/usr/bin/nvidia-smi")


def test_read_topology_tolerates_a_failing_p2p_query():
    run = fake_runner({"topo -m": (0, H200X2_TOPO, ""), "topo -p2p r": (3, "", "not supported")})
    topo, p2p = read_topology(run=run, which=lambda name: "/usr/bin/nvidia-smi")
    assert topo == H200X2_TOPO and p2p is None


def test_preflight_check_is_registered_and_unknown_without_nvidia_smi(monkeypatch):
    assert check_gpu_topology in default_checks()
    monkeypatch.setattr("shutil.which", lambda name: None)
    (row,) = check_gpu_topology(
        PreflightContext(Config(), HostFacts.given(Config(), nvml_error="no driver"))
    )
    assert row.status == UNKNOWN
    assert "nvidia-smi not found" in row.detail


def test_preflight_check_uses_the_configured_level_and_devices(monkeypatch):
    monkeypatch.setattr("shutil.which", lambda name: "/usr/bin/nvidia-smi")
    outputs = {"topo -m": (0, PCIE8_TOPO, ""), "topo -p2p r": (0, PCIE8_P2P_OK, "")}
    monkeypatch.setattr(
        "subprocess.run",
        lambda argv, **kw: subprocess.CompletedProcess(argv, *outputs[" ".join(argv[1:])]),
    )
    config = config_from_mapping({"gpus": {"nccl_p2p_level": "PHB"}})
    rows = {
        r.name: r for r in check_gpu_topology(PreflightContext(config, HostFacts.given(config)))
    }
    assert rows["nccl transport"].status == WARN
    assert "needs NCCL_P2P_LEVEL SYS, configured PHB" in rows["nccl transport"].detail
    assert rows["nccl transport"].fix
