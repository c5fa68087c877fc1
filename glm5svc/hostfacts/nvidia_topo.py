"""Parse the GPU matrices of `nvidia-smi topo -m` and `nvidia-smi topo -p2p r`.

Shared by the host module glm5_p2p_facts (the host's P2P report) and glm5svc's topology
preflight in the container, so both read the same links from the same text. Standard
library only: Ansible ships this file as module_utils.

nvidia-smi underlines the header row with ANSI escape codes even when not writing to a
terminal, and drivers before about R400 printed SOC where newer ones print SYS; both are
normalised here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")
GPU_LABEL = re.compile(r"^GPU(\d+)$")
LEGACY_LINK_NAMES = {"SOC": "SYS"}


class TopologyError(Exception):
    """The topology cannot be read or parsed; the message says why."""


@dataclass(frozen=True)
class GpuMatrix:
    """A GPU-by-GPU matrix from nvidia-smi topo; cells[(i, j)] as printed ('X' on the diagonal)."""

    gpus: list[int]
    cells: dict[tuple[int, int], str]
    extra: dict[int, dict[str, str]] = field(default_factory=dict)  # NIC, affinity columns

    def cell(self, a: int, b: int) -> str:
        return self.cells.get((a, b), "?")

    def pairs(self) -> dict[tuple[int, int], str]:
        """{(a, b): cell} for every GPU pair a < b."""
        return {(a, b): self.cell(a, b) for a in self.gpus for b in self.gpus if a < b}


def strip_ansi(text: str) -> str:
    return ANSI_ESCAPE.sub("", text)


def parse_gpu_matrix(text: str, what: str = "nvidia-smi topo output") -> GpuMatrix:
    """Parse the GPU rows and columns of `topo -m` or `topo -p2p r` (NIC rows are skipped)."""
    lines = [strip_ansi(line).rstrip() for line in text.splitlines()]
    header_at = next(
        (i for i, line in enumerate(lines) if re.search(r"(^|\s)GPU0(\s|$)", line)), None
    )
    if header_at is None:
        raise TopologyError(f"{what}: no header row naming GPU0")
    line = lines[header_at]
    header = [t.strip() for t in line.split("\t") if t.strip()] if "\t" in line else line.split()
    columns = [int(m.group(1)) for m in (GPU_LABEL.match(t) for t in header) if m]
    # The GPU columns come first and in order; later columns (NIC, affinity) are kept raw.
    if columns != list(range(len(columns))):
        raise TopologyError(f"{what}: GPU columns out of order: {columns}")
    cells: dict[tuple[int, int], str] = {}
    extra: dict[int, dict[str, str]] = {}
    rows: list[int] = []
    for line in lines[header_at + 1 :]:
        tokens = line.split()
        if not tokens or tokens[0].startswith("Legend"):
            if rows:
                break
            continue
        match = GPU_LABEL.match(tokens[0])
        if not match:
            continue  # NIC rows
        row = int(match.group(1))
        values = tokens[1:]
        if len(values) < len(columns):
            raise TopologyError(
                f"{what}: row GPU{row} has {len(values)} cells for {len(columns)} GPU columns"
            )
        for col, value in zip(columns, values, strict=False):
            cells[(row, col)] = LEGACY_LINK_NAMES.get(value, value)
        others = [name for name in header if not GPU_LABEL.match(name)]
        extra[row] = dict(zip(others, values[len(columns) :], strict=False))
        rows.append(row)
    if sorted(rows) != columns:
        raise TopologyError(f"{what}: GPU rows {sorted(rows)} do not match columns {columns}")
    return GpuMatrix(gpus=columns, cells=cells, extra=extra)
