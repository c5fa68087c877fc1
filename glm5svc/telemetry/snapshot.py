"""What the sampler publishes: the latest reading of every GPU (read by scrapes and views)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from glm5svc.json_output import iso_utc


@dataclass(frozen=True)
class GpuSnapshot:
    index: int
    name: str
    uuid: str
    pci_bus_id: str
    power_w: float | None = None
    power_instant_w: float | None = None
    power_limit_w: float | None = None
    energy_joules_total: float | None = None
    gpu_utilization_pct: float | None = None
    memory_utilization_pct: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    temperature_c: float | None = None
    sm_clock_mhz: float | None = None
    memory_clock_mhz: float | None = None
    clock_event_reasons_mask: int | None = None
    clock_event_reasons: tuple[str, ...] = ()
    performance_state: int | None = None
    pcie_generation: int | None = None
    pcie_width: int | None = None
    pcie_tx_bytes_total: int | None = None
    pcie_rx_bytes_total: int | None = None
    pcie_tx_bytes_per_s: float | None = None
    pcie_rx_bytes_per_s: float | None = None
    pcie_gaps: int = 0
    pcie_replay_count: int | None = None
    processes: tuple[tuple[int, int | None], ...] = ()
    errors: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["clock_event_reasons"] = list(self.clock_event_reasons)
        data["processes"] = [{"pid": pid, "used_bytes": used} for pid, used in self.processes]
        return data


@dataclass(frozen=True)
class Snapshot:
    """What the sampler last saw. `available` False means no NVML; `reason` says why."""

    available: bool
    reason: str | None = None
    driver_version: str | None = None
    started_at: float | None = None  # unix time the sampler opened NVML
    taken_at: float | None = None  # unix time of the last slow sample
    taken_monotonic: float | None = None
    gpus: tuple[GpuSnapshot, ...] = ()

    def age_s(self, now_monotonic: float | None = None) -> float | None:
        if self.taken_monotonic is None:
            return None
        return (now_monotonic if now_monotonic is not None else time.monotonic()) - (
            self.taken_monotonic
        )

    def to_dict(self) -> dict:
        return {
            "available": self.available,
            "reason": self.reason,
            "driver_version": self.driver_version,
            "started_at": iso_utc(self.started_at),
            "taken_at": iso_utc(self.taken_at),
            "gpus": [gpu.to_dict() for gpu in self.gpus],
        }
