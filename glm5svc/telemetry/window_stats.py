"""A measurement window's figures, per GPU and for all GPUs, and the reductions they use.

The reductions are shared with the benchmark's per-level figures (glm5svc.bench.power): a
total over GPUs is all or nothing (a sum over some GPUs only would understate the whole);
means and maxima are over the values known.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

from glm5svc.json_output import iso_utc


def total_or_none(values: Iterable[float | int | None]):
    """The sum when every value is known, else None (also for no values)."""
    values = list(values)
    return sum(values) if values and None not in values else None


def mean_known(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def max_known(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def min_known(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return min(known) if known else None


def ratio(value: float | None, limit: float | None) -> float | None:
    return value / limit if value is not None and limit else None


def difference(end, start):
    return end - start if end is not None and start is not None else None


@dataclass(frozen=True)
class GpuWindowStats:
    """One GPU over one window. Means come from the slow samples taken inside the window."""

    gpu: int
    uuid: str
    name: str
    duration_s: float
    samples: int
    energy_joules: float | None
    average_power_w: float | None  # energy / duration where energy is known
    mean_sampled_power_w: float | None
    peak_power_w: float | None
    power_limit_w: float | None
    power_share_of_limit: float | None
    peak_power_share_of_limit: float | None
    mean_gpu_utilization: float | None  # ratio 0-1
    mean_memory_utilization: float | None
    max_temperature_c: float | None
    min_sm_clock_mhz: float | None
    max_sm_clock_mhz: float | None
    pcie_tx_bytes: int | None
    pcie_rx_bytes: int | None
    pcie_gaps: int  # read intervals in which a counter wrap may have been missed
    power_limited_s: float
    thermal_limited_s: float
    clock_event_reasons_seen: tuple[str, ...]

    def to_dict(self) -> dict:
        data = asdict(self)
        data["clock_event_reasons_seen"] = list(self.clock_event_reasons_seen)
        return data


@dataclass(frozen=True)
class WindowStats:
    label: str
    available: bool
    reason: str | None
    started_at: float
    duration_s: float
    gpus: tuple[GpuWindowStats, ...]

    @property
    def energy_joules(self) -> float | None:
        return total_or_none(g.energy_joules for g in self.gpus)

    @property
    def pcie_tx_bytes(self) -> int | None:
        return total_or_none(g.pcie_tx_bytes for g in self.gpus)

    @property
    def pcie_rx_bytes(self) -> int | None:
        return total_or_none(g.pcie_rx_bytes for g in self.gpus)

    def to_dict(self) -> dict:
        return {
            "label": self.label,
            "available": self.available,
            "reason": self.reason,
            "started_at": iso_utc(self.started_at),
            "duration_s": self.duration_s,
            "energy_joules": self.energy_joules,
            "pcie_tx_bytes": self.pcie_tx_bytes,
            "pcie_rx_bytes": self.pcie_rx_bytes,
            "gpus": [gpu.to_dict() for gpu in self.gpus],
        }
