"""Measurement windows: what one open window accumulates per GPU, and its figures at close.

The sampler owns the windows and feeds them (under its own lock); this module only adds
samples up and reduces them to glm5svc.telemetry.window_stats.GpuWindowStats.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from glm5svc.nvml import GpuIdentity, RawSample
from glm5svc.telemetry.decoding import (
    decode_clock_event_reasons,
    is_power_limited,
    is_thermally_limited,
)
from glm5svc.telemetry.window_stats import (
    GpuWindowStats,
    difference,
    max_known,
    min_known,
    ratio,
)

# Counters read at a window's edge, per GPU: (energy J, PCIe tx total, rx total, gaps).
Marks = tuple[float | None, int | None, int | None, int]


@dataclass
class GpuAccumulator:
    """One GPU in one open window: the edge marks at opening, and the samples since."""

    energy_j: float | None
    tx: int | None
    rx: int | None
    gaps: int
    samples: int = 0
    # Running sums and counts, not lists: a window may stay open for hours.
    power_sum: float = 0.0
    power_n: int = 0
    peak_power: float | None = None
    limit: float | None = None
    util_sum: float = 0.0
    util_n: int = 0
    mem_util_sum: float = 0.0
    mem_util_n: int = 0
    max_temp: float | None = None
    min_sm: float | None = None
    max_sm: float | None = None
    power_limited_s: float = 0.0
    thermal_limited_s: float = 0.0
    reasons: set[str] = field(default_factory=set)

    @classmethod
    def opened_at(cls, marks: Marks) -> GpuAccumulator:
        energy, tx, rx, gaps = marks
        return cls(energy_j=energy, tx=tx, rx=rx, gaps=gaps)

    def add(self, raw: RawSample, interval_s: float) -> None:
        """One slow sample; `interval_s` is the part of the time since the previous sample
        that lies in the window (credited to the state read now)."""
        self.samples += 1
        if raw.power_w is not None:
            self.power_sum += raw.power_w
            self.power_n += 1
        self.peak_power = max_known([self.peak_power, raw.power_w, raw.power_instant_w])
        if raw.power_limit_w is not None:
            self.limit = raw.power_limit_w
        if raw.gpu_utilization_pct is not None:
            self.util_sum += raw.gpu_utilization_pct
            self.util_n += 1
        if raw.memory_utilization_pct is not None:
            self.mem_util_sum += raw.memory_utilization_pct
            self.mem_util_n += 1
        self.max_temp = max_known([self.max_temp, raw.temperature_c])
        self.min_sm = min_known([self.min_sm, raw.sm_clock_mhz])
        self.max_sm = max_known([self.max_sm, raw.sm_clock_mhz])
        mask = raw.clock_event_reasons
        if mask is not None:
            self.reasons.update(decode_clock_event_reasons(mask))
            if is_power_limited(mask):
                self.power_limited_s += interval_s
            if is_thermally_limited(mask):
                self.thermal_limited_s += interval_s

    def stats(self, identity: GpuIdentity, end: Marks, duration: float) -> GpuWindowStats:
        end_energy, end_tx, end_rx, end_gaps = end
        energy = difference(end_energy, self.energy_j)
        average = energy / duration if energy is not None and duration > 0 else None
        mean_sampled = self.power_sum / self.power_n if self.power_n else None
        shown_average = average if average is not None else mean_sampled
        return GpuWindowStats(
            gpu=identity.index,
            uuid=identity.uuid,
            name=identity.name,
            duration_s=duration,
            samples=self.samples,
            energy_joules=energy,
            average_power_w=shown_average,
            mean_sampled_power_w=mean_sampled,
            peak_power_w=self.peak_power,
            power_limit_w=self.limit,
            power_share_of_limit=ratio(shown_average, self.limit),
            peak_power_share_of_limit=ratio(self.peak_power, self.limit),
            mean_gpu_utilization=self.util_sum / self.util_n / 100 if self.util_n else None,
            mean_memory_utilization=(
                self.mem_util_sum / self.mem_util_n / 100 if self.mem_util_n else None
            ),
            max_temperature_c=self.max_temp,
            min_sm_clock_mhz=self.min_sm,
            max_sm_clock_mhz=self.max_sm,
            pcie_tx_bytes=difference(end_tx, self.tx),
            pcie_rx_bytes=difference(end_rx, self.rx),
            pcie_gaps=end_gaps - self.gaps,
            power_limited_s=self.power_limited_s,
            thermal_limited_s=self.thermal_limited_s,
            clock_event_reasons_seen=tuple(sorted(self.reasons)),
        )


@dataclass(eq=False)
class Window:
    """An interval being measured; get one from Sampler.open_window()."""

    id: int
    label: str
    opened_monotonic: float
    opened_at: float
    gpus: list[GpuAccumulator]
    closed: bool = False
