"""The process's GPU sampler: background NVML reads, a snapshot for scrapes, and windows.

Two threads: the slow loop reads every GPU once per `period_s`; the fast loop reads only
the 32-bit PCIe byte counters, each GPU's when its read falls due: at a period chosen from
the rate it last saw and the counter's wrap time (decoding.pcie_read_period_s), short only
when the traffic is high, never so long that a jump to the link's top rate wraps unseen.
`pcie_period_s` is the shortest period. Any read of the counters (the slow sample's field
batch, a window's edge) counts, so the fast loop does not repeat it. A GPU with GPM has no
wrap to race: its PCIe rates are read once per slow sample and at window edges, and the
fast loop leaves it alone (it does not run at all when every GPU has GPM).
Nothing that reads the snapshot (a metrics scrape, the terminal view) calls NVML.
The snapshot types are in telemetry/snapshot.py, the windows' accumulators in
telemetry/windows.py, their figures in telemetry/window_stats.py.

Locks, always taken in this order (a thread holding one never waits for an earlier one):
  1. _sample_lock  one slow sample at a time (sample_now)
  2. _lock         the GPU states list and the open windows (an RLock)
  3. _energy_lock  energy counter reads folded in the order taken
  4. _pcie_lock    one PCIe counter read-and-fold at a time, in read order
The snapshot is replaced whole (one reference assignment), so readers take no lock.

Longer than 400 lines: the two loops, the snapshot fold and the window edges share the
locks above; split, the lock order would span modules.
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from glm5svc.nvml import GpuIdentity, NvmlSource, NvmlUnavailable, PynvmlSource, RawSample
from glm5svc.telemetry.decoding import (
    PcieCounter,
    decode_clock_event_reasons,
    pcie_max_counter_rate,
    pcie_read_period_s,
)
from glm5svc.telemetry.snapshot import GpuSnapshot, Snapshot
from glm5svc.telemetry.window_stats import WindowStats
from glm5svc.telemetry.windows import GpuAccumulator, Marks, Window

log = logging.getLogger(__name__)

DEFAULT_PERIOD_S = 1.0
DEFAULT_PCIE_PERIOD_S = 0.02
DEFAULT_RETRY_S = 30.0
# GPUs falling due this close together are read in one wake-up.
PCIE_COALESCE_S = 0.002


@dataclass
class _GpuState:
    identity: GpuIdentity
    tx: PcieCounter
    rx: PcieCounter
    energy_total_mj: int = 0
    energy_last_mj: int | None = None
    last_sample_t: float | None = None
    rate_base: tuple[float, int, int] | None = None  # (t, tx total, rx total) at last sample
    pcie_errors: int = 0
    gpm: bool = False  # PCIe rates from GPM, not the 32-bit counters
    pcie_read_t: float | None = None  # the last attempt to read the counters
    pcie_periods: tuple[float, float] | None = None  # (shortest, longest) period chosen

    def pcie_period(self, shortest_s: float) -> float:
        rate = max(self.tx.rate, self.rx.rate)
        period = pcie_read_period_s(self.tx.max_rate, rate, shortest_s)
        low, high = self.pcie_periods or (period, period)
        self.pcie_periods = (min(low, period), max(high, period))
        return period

    def update_energy(self, raw_mj: int | None) -> float | None:
        """Accumulate the energy counter; a counter that goes back (driver reload) rebases."""
        if raw_mj is None:
            return self.energy_joules()
        if self.energy_last_mj is not None and raw_mj >= self.energy_last_mj:
            self.energy_total_mj += raw_mj - self.energy_last_mj
        self.energy_last_mj = raw_mj
        return self.energy_joules()

    def energy_joules(self) -> float | None:
        return self.energy_total_mj / 1000 if self.energy_last_mj is not None else None


class Sampler:
    """Reads NVML in the background; serves snapshots and measurement windows.

    Create one per process (the service and the benchmark each own one); `start()` it, read
    `snapshot()` as often as you like, and `stop()` it at exit.
    """

    def __init__(
        self,
        source: NvmlSource | None = None,
        period_s: float = DEFAULT_PERIOD_S,
        pcie_period_s: float = DEFAULT_PCIE_PERIOD_S,
        retry_s: float = DEFAULT_RETRY_S,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ):
        self._source = source if source is not None else PynvmlSource()
        self.period_s = period_s
        self.pcie_period_s = pcie_period_s
        self.retry_s = retry_s
        self._clock = clock
        self._wall = wall_clock
        self._states: list[_GpuState] = []
        self._windows: list[Window] = []
        self._window_ids = itertools.count(1)
        self._lock = threading.RLock()  # states, windows
        self._pcie_lock = threading.Lock()  # one PCIe read-and-update at a time, in order
        self._sample_lock = threading.Lock()
        self._energy_lock = threading.Lock()  # energy reads folded in the order taken
        self._stop = threading.Event()
        self._sampled = threading.Event()
        self._threads: list[threading.Thread] = []
        self._fast_thread: threading.Thread | None = None
        self._driver: str | None = None
        self._started_at: float | None = None
        self._snapshot = Snapshot(available=False, reason="the sampler has not started")

    @classmethod
    def from_config(cls, section, source: NvmlSource | None = None) -> Sampler:
        """From the config's `telemetry` section (period_s, pcie_period_s)."""
        return cls(source, period_s=section.period_s, pcie_period_s=section.pcie_period_s)

    # -- lifecycle -------------------------------------------------------------------------

    def open(self) -> bool:
        """Open NVML now (start() does this); False, with the snapshot saying why, if not."""
        with self._lock:
            if self._states:
                return True
            try:
                gpus = self._source.open()
            except NvmlUnavailable as exc:
                self._snapshot = Snapshot(available=False, reason=str(exc))
                return False
            self._driver = self._source.driver_version()
            self._started_at = self._wall()
            self._states = [
                _new_state(gpu, self._source.has_gpm_pcie(i)) for i, gpu in enumerate(gpus)
            ]
        self.poll_pcie_now()
        return True

    def start(self) -> Sampler:
        """Open NVML and start the threads. Without NVML the snapshot says why; no crash."""
        if self._threads:
            return self
        self._stop.clear()
        opened = self.open()
        slow = threading.Thread(target=self._slow_loop, name="glm5-telemetry", daemon=True)
        self._threads = [slow]
        slow.start()
        if opened:
            self._start_fast_loop()
        return self

    @property
    def _needs_fast_loop(self) -> bool:
        return any(not state.gpm for state in self._states)

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout)
        self._threads = []
        self._fast_thread = None
        with self._lock:
            if self._states:
                self._source.close()
                self._states = []

    def __enter__(self) -> Sampler:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def available(self) -> bool:
        return bool(self._states)

    @property
    def threads(self) -> tuple[threading.Thread, ...]:
        """The running loops (for measuring their CPU time)."""
        return tuple(self._threads)

    @property
    def gpus(self) -> list[GpuIdentity]:
        return [state.identity for state in self._states]

    def pcie_counter_stats(self) -> list[dict]:
        """Per GPU: counter reads, longest interval between reads, wrap period, gaps."""
        with self._pcie_lock:
            return [
                {
                    "gpu": state.identity.index,
                    "reads": state.tx.reads,
                    "max_read_interval_s": max(state.tx.max_interval_s, state.rx.max_interval_s),
                    "wrap_period_s": state.tx.wrap_period_s,
                    "source": "gpm" if state.gpm else "counters",
                    "tx_gaps": state.tx.gaps,
                    "rx_gaps": state.rx.gaps,
                    "read_errors": state.pcie_errors,
                    "shortest_period_s": state.pcie_periods[0] if state.pcie_periods else None,
                    "longest_period_s": state.pcie_periods[1] if state.pcie_periods else None,
                }
                for state in self._states
            ]

    def snapshot(self) -> Snapshot:
        """The latest snapshot; never calls NVML."""
        return self._snapshot

    def wait_for_sample(self, timeout: float) -> bool:
        """Wait until a slow sample completes after this call; False on timeout or no NVML."""
        self._sampled.clear()
        return self._sampled.wait(timeout) and self.available

    def _start_fast_loop(self) -> None:
        if self._fast_thread is not None or not self._needs_fast_loop:
            return
        fast = threading.Thread(target=self._fast_loop, name="glm5-telemetry-pcie", daemon=True)
        self._fast_thread = fast
        self._threads.append(fast)
        fast.start()

    def _slow_loop(self) -> None:
        next_at = self._clock()
        while not self._stop.is_set():
            if not self._states:
                # No NVML: sleep, then try once more (the driver may load later); no spin.
                if self._stop.wait(self.retry_s):
                    return
                if self.open():
                    self._start_fast_loop()
                next_at = self._clock()
                continue
            try:
                self.sample_now()
            except Exception:  # keep sampling: one bad read must not end telemetry
                log.exception("GPU telemetry sample failed")
            next_at += self.period_s
            now = self._clock()
            if next_at < now:  # fell behind (suspend, slow read): don't burst to catch up
                next_at = now + self.period_s
            self._stop.wait(next_at - now)

    def _fast_loop(self) -> None:
        while not self._stop.is_set():
            try:
                wait = self.poll_pcie_if_due()
            except Exception:
                log.exception("PCIe counter read failed")
                wait = self.pcie_period_s
            self._stop.wait(wait)

    # -- reading ---------------------------------------------------------------------------

    def poll_pcie_if_due(self) -> float:
        """Read the PCIe counters of the GPUs whose read is due; seconds until the next is."""
        with self._pcie_lock:
            now = self._clock()
            due = [
                index
                for index, state in enumerate(self._states)
                if self._pcie_due_at(state) <= now + PCIE_COALESCE_S
            ]
            if due:
                self._poll_pcie(due)
            next_at = min((self._pcie_due_at(state) for state in self._states), default=math.inf)
            if next_at == math.inf:  # no GPU needs the fast loop (yet): look again later
                return self.period_s
            return max(0.0, next_at - self._clock())

    def poll_pcie_now(self) -> None:
        """Read every GPU's PCIe byte counters once and fold them into the totals."""
        with self._pcie_lock:
            self._poll_pcie(range(len(self._states)))

    def _pcie_due_at(self, state: _GpuState) -> float:
        if state.gpm:
            return math.inf
        if state.pcie_read_t is None:
            return self._clock()
        return state.pcie_read_t + state.pcie_period(self.pcie_period_s)

    def _poll_pcie(self, indexes) -> None:
        for index in indexes:
            state = self._states[index]
            if state.gpm:
                self._read_gpm(index, state)
                continue
            try:
                tx, rx = self._source.read_pcie_bytes(index)
            except Exception as exc:  # noqa: BLE001 - a failing GPU must not stop the rest
                tx = rx = None
                state.pcie_errors += 1
                if state.pcie_errors == 1:
                    log.warning("GPU %d: PCIe counters unreadable: %s", index, exc)
            # A failed or unsupported read counts as tried: not again before its period.
            self._fold_pcie(state, tx, rx, tried=True)

    def _read_gpm(self, index: int, state: _GpuState) -> None:
        try:
            rates = self._source.read_gpm_pcie(index)
        except Exception as exc:  # noqa: BLE001 - the next reading spans this interval too
            state.pcie_errors += 1
            if state.pcie_errors == 1:
                log.warning("GPU %d: GPM PCIe rates unreadable: %s", index, exc)
            return
        t = self._clock()
        tx, rx = rates if rates is not None else (0.0, 0.0)
        state.tx.add_rate(tx, t)
        state.rx.add_rate(rx, t)
        state.pcie_read_t = t

    def _fold_pcie(
        self, state: _GpuState, tx: int | None, rx: int | None, tried: bool = False
    ) -> None:
        t = self._clock()
        if tx is not None:
            state.tx.update(tx, t)
        if rx is not None:
            state.rx.update(rx, t)
        if tried or tx is not None or rx is not None:
            state.pcie_read_t = t

    def sample_now(self) -> Snapshot:
        """Take one slow sample of every GPU, update open windows, publish the snapshot."""
        with self._sample_lock:
            raws = []
            for index in range(len(self._states)):
                # Under the PCIe lock: counters read here must be folded in read order.
                with self._pcie_lock:
                    try:
                        raw = self._source.read_sample(index)
                    except Exception as exc:  # noqa: BLE001
                        raw = RawSample(errors={"sample": str(exc)})
                    state = self._states[index]
                    if state.gpm:
                        self._read_gpm(index, state)
                    else:
                        self._fold_pcie(state, raw.pcie_tx_raw, raw.pcie_rx_raw)
                raws.append((raw, self._energy_now(index, raw)))
            t = self._clock()
            with self._lock:
                pairs = zip(self._states, raws, strict=False)
                gpus = tuple(self._fold(state, raw, energy, t) for state, (raw, energy) in pairs)
                snapshot = Snapshot(
                    available=True,
                    driver_version=self._driver,
                    started_at=self._started_at,
                    taken_at=self._wall(),
                    taken_monotonic=t,
                    gpus=gpus,
                )
                if self._states:
                    self._snapshot = snapshot
        self._sampled.set()
        return snapshot

    def _energy_now(self, index: int, raw: RawSample | None = None) -> float | None:
        """Read the energy counter and fold it in; in order, so no reading is taken twice."""
        errors = raw.errors if raw is not None else {}
        with self._energy_lock:
            value = raw.energy_mj if raw is not None else None
            if value is None:
                try:
                    value = self._source.read_energy_mj(index)
                except Exception as exc:  # noqa: BLE001
                    errors["energy"] = str(exc)
            if raw is not None:
                raw.energy_mj = value
            return self._states[index].update_energy(value)

    def _fold(
        self, state: _GpuState, raw: RawSample, energy_j: float | None, t: float
    ) -> GpuSnapshot:
        with self._pcie_lock:
            tx_total, rx_total = state.tx.total, state.rx.total
            gaps = state.tx.gaps + state.rx.gaps
            have_tx, have_rx = state.tx.reads > 0, state.rx.reads > 0
        tx_rate = rx_rate = None
        if state.rate_base is not None and t > state.rate_base[0]:
            base_t, base_tx, base_rx = state.rate_base
            tx_rate = (tx_total - base_tx) / (t - base_t)
            rx_rate = (rx_total - base_rx) / (t - base_t)
        state.rate_base = (t, tx_total, rx_total)
        previous_t = state.last_sample_t
        state.last_sample_t = t
        for window in self._windows:
            # The interval since the previous sample is credited to the state read now.
            start = window.opened_monotonic if previous_t is None else previous_t
            start = max(start, window.opened_monotonic)
            window.gpus[state.identity.index].add(raw, max(0.0, t - start))
        mask = raw.clock_event_reasons
        identity = state.identity
        return GpuSnapshot(
            index=identity.index,
            name=identity.name,
            uuid=identity.uuid,
            pci_bus_id=identity.pci_bus_id,
            power_w=raw.power_w,
            power_instant_w=raw.power_instant_w,
            power_limit_w=raw.power_limit_w,
            energy_joules_total=energy_j,
            gpu_utilization_pct=raw.gpu_utilization_pct,
            memory_utilization_pct=raw.memory_utilization_pct,
            memory_used_bytes=raw.memory_used_bytes,
            memory_total_bytes=raw.memory_total_bytes or identity.memory_total_bytes,
            temperature_c=raw.temperature_c,
            sm_clock_mhz=raw.sm_clock_mhz,
            memory_clock_mhz=raw.memory_clock_mhz,
            clock_event_reasons_mask=mask,
            clock_event_reasons=tuple(decode_clock_event_reasons(mask)) if mask is not None else (),
            performance_state=raw.performance_state,
            pcie_generation=raw.pcie_generation,
            pcie_width=raw.pcie_width,
            pcie_tx_bytes_total=tx_total if have_tx else None,
            pcie_rx_bytes_total=rx_total if have_rx else None,
            pcie_tx_bytes_per_s=tx_rate if have_tx else None,
            pcie_rx_bytes_per_s=rx_rate if have_rx else None,
            pcie_gaps=gaps,
            pcie_replay_count=raw.pcie_replay_count,
            processes=tuple(raw.processes),
            errors=dict(raw.errors),
        )

    # -- windows ---------------------------------------------------------------------------

    def open_window(self, label: str = "") -> Window:
        """Start measuring: reads energy and PCIe counters now, so the edges are exact."""
        marks = self._read_marks()
        with self._lock:
            window = Window(
                id=next(self._window_ids),
                label=label,
                opened_monotonic=self._clock(),
                opened_at=self._wall(),
                gpus=[GpuAccumulator.opened_at(mark) for mark in marks],
            )
            self._windows.append(window)
        return window

    def close_window(self, window: Window) -> WindowStats:
        """Stop measuring; per-GPU energy, PCIe bytes, power and limit figures for the window."""
        marks = self._read_marks()
        with self._lock:
            if window.closed:
                raise ValueError(f"window {window.id} ({window.label!r}) is already closed")
            window.closed = True
            self._windows = [w for w in self._windows if w is not window]
            duration = max(0.0, self._clock() - window.opened_monotonic)
            states = list(self._states)
        if not states or len(marks) != len(window.gpus):
            return WindowStats(
                label=window.label,
                available=False,
                reason=self._snapshot.reason or "NVML was not available for the whole window",
                started_at=window.opened_at,
                duration_s=duration,
                gpus=(),
            )
        gpus = tuple(
            acc.stats(state.identity, mark, duration)
            for state, acc, mark in zip(states, window.gpus, marks, strict=True)
        )
        return WindowStats(window.label, True, None, window.opened_at, duration, gpus)

    def _read_marks(self) -> list[Marks]:
        """(energy J, tx total, rx total, gaps) per GPU, read now."""
        self.poll_pcie_now()
        marks = []
        with self._lock:
            for index, state in enumerate(self._states):
                energy = self._energy_now(index)
                with self._pcie_lock:
                    marks.append(
                        (
                            energy,
                            state.tx.total if state.tx.reads else None,
                            state.rx.total if state.rx.reads else None,
                            state.tx.gaps + state.rx.gaps,
                        )
                    )
        return marks


def _new_state(gpu: GpuIdentity, gpm: bool) -> _GpuState:
    rate = pcie_max_counter_rate(gpu.max_pcie_generation, gpu.max_pcie_width)
    return _GpuState(identity=gpu, tx=PcieCounter(rate), rx=PcieCounter(rate), gpm=gpm)
