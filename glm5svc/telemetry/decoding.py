"""Pure decoding of NVML readings: clock-event reason bits, PCIe counter wrap correction and
the period at which the PCIe counters must be read so that no wrap goes unseen."""

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

# Bytes/s per lane and direction for each PCIe generation after line encoding: the most
# the link carries. The counters count what crosses the link, packet headers and framing
# included (1.08-1.09x the payload on an H200, docs/performance-telemetry.md), so they
# cannot advance faster than this; the top rate measured there was 0.95x of it.
_LANE_BYTES_PER_S = {1: 250e6, 2: 500e6, 3: 984.6e6, 4: 1969.2e6, 5: 3938.5e6, 6: 7877e6}

# The PCIe read period, as a share of the time the counter takes to wrap. Quiet: a share of
# the shortest wrap (the rate can jump to the link's top at any moment), the rest is slack
# for a read that comes late. Busy: a share of the wrap time at the rate just observed,
# which leaves more slack when a late read would really lose a wrap.
PCIE_QUIET_SHARE = 0.8
PCIE_BUSY_SHARE = 0.6


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
    return lane * (width or 16)


def pcie_wrap_period_s(max_rate: float) -> float:
    """Shortest time in which a 32-bit counter can wrap at the link's top rate."""
    return PCIE_COUNTER_MODULUS / max_rate


def pcie_read_period_s(max_rate: float, observed_rate: float, shortest_s: float) -> float:
    """Seconds until the next read of a counter last seen advancing at `observed_rate`.

    Never longer than PCIE_QUIET_SHARE of the shortest wrap, so a jump to the link's top
    rate just after a read is still caught; shorter, down to `shortest_s`, only when the
    traffic seen is high enough that PCIE_BUSY_SHARE of its own wrap time is less.
    """
    period = PCIE_QUIET_SHARE * pcie_wrap_period_s(max_rate)
    if observed_rate > 0:
        period = min(period, PCIE_BUSY_SHARE * PCIE_COUNTER_MODULUS / observed_rate)
    return max(shortest_s, period)


@dataclass
class PcieCounter:
    """Accumulates one 32-bit PCIe byte counter read at intervals into a 64-bit total.

    A single wrap between reads is corrected by modular arithmetic. Two or more wraps look
    exactly like one, so an interval long enough for the counter to wrap once at the link's
    top rate is counted in `gaps`: its bytes are a lower bound (a wrap may be lost).
    Where GPM gives the average rate since the last reading instead, `add_rate` folds it in:
    no wrap, so no interval is too long.
    """

    max_rate: float
    total: int = 0
    gaps: int = 0
    reads: int = 0
    max_interval_s: float = 0.0
    last_raw: int | None = None
    last_t: float | None = None
    rate: float = 0.0  # bytes/s over the last interval

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
        if interval > 0:
            self.rate = delta / interval
        self.last_raw, self.last_t = raw, t
        return delta

    def add_rate(self, rate: float, t: float) -> int:
        """Feed the average rate (bytes/s) since the last reading, taken at time t."""
        self.reads += 1
        if self.last_t is None:
            self.last_t = t
            return 0
        interval = t - self.last_t
        self.max_interval_s = max(self.max_interval_s, interval)
        self.last_t = t
        added = round(rate * max(0.0, interval))
        self.total += added
        self.rate = rate
        return added

    @property
    def wrap_period_s(self) -> float:
        return pcie_wrap_period_s(self.max_rate)
