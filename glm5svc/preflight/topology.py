"""GPU topology from `nvidia-smi topo -m` and `nvidia-smi topo -p2p r`, and what NCCL makes of it.

The matrices are parsed by glm5svc.hostfacts.nvidia_topo, the parser the host's P2P report
(Ansible) uses too; reading is separate so that tests feed recorded outputs. `assess()` turns the
two matrices into the check rows that preflight shows (`check_gpu_topology`).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from itertools import combinations

from glm5svc.hostfacts.nvidia_topo import GpuMatrix, TopologyError, parse_gpu_matrix
from glm5svc.preflight.rows import OK, UNKNOWN, WARN, CheckRow, PreflightContext

NVLINK = re.compile(r"^NV(\d+)$")

# nvidia-smi's PCIe link names, best first, and the NCCL_P2P_LEVEL each needs for P2P.
# NCCL has no NODE level: a path between host bridges of one socket is PHB to NCCL.
PCIE_LINK_TO_NCCL_LEVEL = {"PIX": "PIX", "PXB": "PXB", "PHB": "PHB", "NODE": "PHB", "SYS": "SYS"}
NCCL_LEVEL_ORDER = ("LOC", "NVL", "PIX", "PXB", "PHB", "SYS")
LINK_ORDER = ("NV", "PIX", "PXB", "PHB", "NODE", "SYS")

P2P_STATUS_MEANING = {
    "OK": "supported",
    "CNS": "chipset not supported",
    "GNS": "GPU not supported",
    "TNS": "topology not supported",
    "NS": "not supported",
    "U": "unknown",
}

HOST_P2P_FIX = (
    "check ACS/IOMMU on the host (host role glm5_host_p2p_report: ACSCtl SrcValid+, "
    "iommu=pt); run in an LXC container rather than a VM"
)


@dataclass(frozen=True)
class PairReport:
    a: int
    b: int
    link: str  # NV18, PIX, PXB, PHB, NODE, SYS (or '?')
    p2p: str  # OK, NS, CNS, GNS, TNS, U (or '?' when not read)
    transport: str  # what NCCL will use: "P2P over NVLink", "P2P over PCIe", "host memory"
    reason: str = ""

    @property
    def pair(self) -> str:
        return f"GPU{self.a}-GPU{self.b}"


def nccl_level_for(link: str) -> str | None:
    """The lowest NCCL_P2P_LEVEL at which NCCL uses P2P over this link; None if unknown."""
    if NVLINK.match(link):
        return "NVL"
    return PCIE_LINK_TO_NCCL_LEVEL.get(link)


def pair_report(link: str, p2p: str, a: int, b: int, nccl_p2p_level: str) -> PairReport:
    if p2p not in ("OK", "?"):
        meaning = P2P_STATUS_MEANING.get(p2p, "not OK")
        reason = f"P2P read {meaning} between GPU{a} and GPU{b} ({p2p}, link {link})"
        return PairReport(a, b, link, p2p, "host memory", reason)
    needed = nccl_level_for(link)
    if needed is None:
        reason = f"unrecognised link {link!r} between GPU{a} and GPU{b}"
        return PairReport(a, b, link, p2p, "unknown", reason)
    if NCCL_LEVEL_ORDER.index(needed) > NCCL_LEVEL_ORDER.index(nccl_p2p_level):
        return PairReport(
            a,
            b,
            link,
            p2p,
            "host memory",
            f"{link} link between GPU{a} and GPU{b} needs NCCL_P2P_LEVEL {needed}, "
            f"configured {nccl_p2p_level}",
        )
    over = "NVLink" if needed == "NVL" else "PCIe"
    return PairReport(a, b, link, p2p, f"P2P over {over}")


def assess(
    topo_text: str,
    p2p_text: str | None,
    nccl_p2p_level: str = "SYS",
    devices: list[int] | None = None,
) -> list[CheckRow]:
    """Rows for the GPU pairs among `devices` (all GPUs when None). Raises TopologyError."""
    links = parse_gpu_matrix(topo_text, "nvidia-smi topo -m")
    p2p = parse_gpu_matrix(p2p_text, "nvidia-smi topo -p2p r") if p2p_text else None
    gpus = links.gpus if devices is None else [g for g in devices if g in links.gpus]
    if devices is not None and len(gpus) != len(devices):
        missing = sorted(set(devices) - set(links.gpus))
        raise TopologyError(f"GPUs {missing} are not in nvidia-smi topo -m (GPUs {links.gpus})")
    if len(gpus) < 2:
        return [
            CheckRow(
                "gpu topology",
                WARN,
                f"{len(gpus)} GPU: nothing to check (no GPU pairs)",
                "expected with one GPU; the target has 8",
            )
        ]
    pairs = [
        pair_report(links.cell(a, b), p2p.cell(a, b) if p2p else "?", a, b, nccl_p2p_level)
        for a, b in combinations(gpus, 2)
    ]
    rows = [CheckRow("gpu topology", OK, _link_summary(pairs, links, gpus))]
    rows.append(_p2p_row(pairs, p2p is not None))
    rows.append(_nccl_row(pairs, nccl_p2p_level))
    return rows


def _link_summary(pairs: list[PairReport], links: GpuMatrix, gpus: list[int]) -> str:
    groups = _group(pairs, lambda p: p.link)
    order = sorted(groups, key=_link_rank)
    parts = [f"{link} x{len(groups[link])} ({_pairs_text(groups[link])})" for link in order]
    affinity = "; ".join(
        f"GPU{g} CPUs {links.extra[g]['CPU Affinity']} NUMA {links.extra[g]['NUMA Affinity']}"
        for g in gpus
        if {"CPU Affinity", "NUMA Affinity"} <= links.extra.get(g, {}).keys()
    )
    count = f"{len(gpus)} GPUs"
    if len(gpus) < len(links.gpus):
        count = f"{len(gpus)} of {len(links.gpus)} GPUs (those the service uses)"
    text = f"{count}, {len(pairs)} pairs: " + ", ".join(parts)
    return text + (f"; {affinity}" if affinity else "")


def _p2p_row(pairs: list[PairReport], read: bool) -> CheckRow:
    if not read:
        return CheckRow(
            "gpu p2p read",
            UNKNOWN,
            "nvidia-smi topo -p2p r gave no matrix: P2P support not known",
            "run `nvidia-smi topo -p2p r` by hand",
        )
    bad = [p for p in pairs if p.p2p != "OK"]
    if not bad:
        return CheckRow("gpu p2p read", OK, f"all {len(pairs)} pairs OK (topo -p2p r)")
    groups = _group(bad, lambda p: p.p2p)
    parts = [
        f"{status} ({P2P_STATUS_MEANING.get(status, '?')}): {_pairs_text(ps)}"
        for status, ps in groups.items()
    ]
    return CheckRow(
        "gpu p2p read",
        WARN,
        f"{len(bad)} of {len(pairs)} pairs without P2P read: " + "; ".join(parts),
        HOST_P2P_FIX,
    )


def _nccl_row(pairs: list[PairReport], level: str) -> CheckRow:
    slow = [p for p in pairs if p.transport in ("host memory", "unknown")]
    transports = _group(pairs, lambda p: p.transport)
    summary = ", ".join(f"{t} x{len(ps)}" for t, ps in transports.items())
    if not slow:
        return CheckRow("nccl transport", OK, f"NCCL_P2P_LEVEL {level}: {summary}")
    first = slow[0]
    lines = [f"{first.reason}: NCCL falls back to host memory (SHM)"]
    if len(slow) > 1:
        lines.append(f"{len(slow)} pairs in all: {_pairs_text(slow)}")
    if any(p.p2p not in ("OK", "?") for p in slow):
        fix = HOST_P2P_FIX
    else:
        needed = max((nccl_level_for(p.link) or "SYS" for p in slow), key=NCCL_LEVEL_ORDER.index)
        fix = f"set gpus.nccl_p2p_level: {needed} (NCCL_P2P_LEVEL) if topo -p2p r says OK"
    return CheckRow("nccl transport", WARN, "; ".join(lines) + f" ({summary})", fix)


def _group(pairs: list[PairReport], key: Callable[[PairReport], str]) -> dict[str, list]:
    groups: dict[str, list[PairReport]] = {}
    for pair in pairs:
        groups.setdefault(key(pair), []).append(pair)
    return groups


def _link_rank(link: str) -> tuple[int, int]:
    match = NVLINK.match(link)
    if match:
        return (0, -int(match.group(1)))
    return (LINK_ORDER.index(link), 0) if link in LINK_ORDER else (len(LINK_ORDER), 0)


def _pairs_text(pairs: list[PairReport], limit: int = 12) -> str:
    shown = " ".join(f"{p.a}-{p.b}" for p in pairs[:limit])
    return shown + (f" +{len(pairs) - limit} more" if len(pairs) > limit else "")


Runner = Callable[[list[str]], subprocess.CompletedProcess]


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30)


def read_topology(run: Runner = _run, which=None) -> tuple[str, str | None]:
    """(topo -m text, topo -p2p r text or None). Raises TopologyError saying why not."""
    smi = (which or shutil.which)("nvidia-smi")
    if smi is None:
        raise TopologyError(
            "nvidia-smi not found on PATH: cannot read the GPU topology "
            "(install the NVIDIA user-space driver utilities)"
        )
    topo = _call(run, [smi, "topo", "-m"])
    try:
        p2p: str | None = _call(run, [smi, "topo", "-p2p", "r"])
    except TopologyError:
        p2p = None
    return topo, p2p


def _call(run: Runner, argv: list[str]) -> str:
    try:
        result = run(argv)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TopologyError(f"`{' '.join(argv[1:])}` did not run: {exc}") from None
    if result.returncode != 0:
        said = (result.stderr or result.stdout or "").strip().splitlines()
        raise TopologyError(
            f"`nvidia-smi {' '.join(argv[1:])}` exited {result.returncode}: "
            + (said[-1] if said else "no output")
        )
    return result.stdout


def check_gpu_topology(ctx: PreflightContext) -> list[CheckRow]:
    """Link types (topo -m) and P2P reads (topo -p2p r) per pair of the GPUs the service
    uses (gpus.visible_devices, else the first gpus.expected_count), and NCCL's transport."""
    gpus = ctx.config.gpus
    used = gpus.visible_devices
    if used is None:
        used = list(range(gpus.expected_count))
    try:
        topo, p2p = read_topology()
        return assess(topo, p2p, gpus.nccl_p2p_level, used)
    except TopologyError as exc:
        return [CheckRow("gpu topology", UNKNOWN, str(exc))]
