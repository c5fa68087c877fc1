"""Pure decoding of NVML readings: clock-event reason bits, PCIe counter wrap correction."""

from __future__ import annotations

from dataclasses import dataclass

# nvmlClocksEventReason* bits (nvml.h); names are the Prometheus label values.
CLOCK_EVENT_REASONS: dict[int, str] = {
    0x0001: "gpu_idle",
    0x0002: "applications_clocks_setting",
    0x0004: "sw_power_cap",
    0x0008: "hw_slowdown",
    0x0010: "sync_boost",
    0x0020: "sw_thermal_slowdown",
    0x0040: "hw_thermal_slowdown",
    0x0080: "hw_power_brake_slowdown",
    0x0100: "display_clock_setting",
}
POWER_REASON_BITS = 0x0004 | 0x0080
THERMAL_REASON_BITS = 0x0020 | 0x0040

# The PCIe byte counters (NVML fields 197/198) are 32-bit.
PCIE_COUNTER_MODULUS = 2**32

# Usable bytes/s per lane and direction for each PCIe generation (after line encoding).
_LANE_BYTES_PER_S = {1: 250e6, 2: 500e6, 3: 984.6e6, 4: 1969.2e6, 5: 3938.5e6, 6: 7877e6}
# The counters include protocol overhead (measured ~1.08-1.09x payload): allow for it.
_COUNTER_OVERHEAD = 1.15


def decode_clock_event_reasons(mask: int) -> list[str]:
    """Names of the set bits, lowest first; unknown bits as 'unknown_0x...'."""
    names = []
    bit = 1
    while bit <= mask:
        if mask & bit:
            names.append(CLOCK_EVENT_REASONS.get(bit, f"unknown_{bit:#x}"))
        bit <<= 1
    return names


def is_power_limited(mask: int) -> bool:
    return bool(mask & POWER_REASON_BITS)


def is_thermally_limited(mask: int) -> bool:
    return bool(mask & THERMAL_REASON_BITS)


def pcie_max_counter_rate(generation: int | None, width: int | None) -> float:
    """Highest rate (bytes/s, one direction) the counters can advance on this link.

    Unknown link: assume PCIe 6 x16, the fastest a GPU has, so wrap checks stay conservative.
    """
    lane = _LANE_BYTES_PER_S.get(generation or 0, _LANE_BYTES_PER_S[6])
    if generation and generation > 6:
        lane = _LANE_BYTES_PER_S[6] * 2 ** (generation - 6)
    return lane * (width or 16) * _COUNTER_OVERHEAD


def pcie_wrap_period_s(max_rate: float) -> float:
    """Shortest time in which a 32-bit counter can wrap at the link's top rate."""
    return PCIE_COUNTER_MODULUS / max_rate


@dataclass
class PcieCounter:
    """Accumulates one 32-bit PCIe byte counter read at intervals into a 64-bit total.

    A single wrap between reads is corrected by modular arithmetic. Two or more wraps look
    exactly like one, so an interval long enough for the counter to wrap once at the link's
    top rate is counted in `gaps`: its bytes are a lower bound (a wrap may be lost).
    """

    max_rate: float
    total: int = 0
    gaps: int = 0
    reads: int = 0
    max_interval_s: float = 0.0
    last_raw: int | None = None
    last_t: float | None = None

    def update(self, raw: int, t: float) -> int:
        """Feed one reading taken at monotonic time t; return the bytes added."""
        self.reads += 1
        if self.last_raw is None or self.last_t is None:
            self.last_raw, self.last_t = raw, t
            return 0
        interval = t - self.last_t
        delta = (raw - self.last_raw) % PCIE_COUNTER_MODULUS
        self.max_interval_s = max(self.max_interval_s, interval)
        if interval >= pcie_wrap_period_s(self.max_rate):
            self.gaps += 1
        self.total += delta
        self.last_raw, self.last_t = raw, t
        return delta

    @property
    def wrap_period_s(self) -> float:
        return pcie_wrap_period_s(self.max_rate)
