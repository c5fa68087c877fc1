"""The supervisor's state: written only by the supervision loop, read by /status and /metrics
(through `snapshot()`, a glm5svc.records StatusDocument).

Probe, output-reader and hook threads never write it: they report on the loop's
queue and the loop decides (the TGI launcher's discipline). The lock is for readers
that need a consistent snapshot while the loop updates several fields at once.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

from glm5svc import __version__
from glm5svc.json_output import iso_utc
from glm5svc.records import (
    BenchmarkStatus,
    Diagnosis,
    DrainReport,
    LastRun,
    PlanSummary,
    ProbeStatus,
    StatusDocument,
)
from glm5svc.serve.phases import Phase


@dataclass
class EngineHealth:
    """Probes and progress counters together: a slow probe alone never means unhealthy.

    The engine counts as wedged only when probes fail *and* its counters show no
    progress (no new prompt or generated tokens) for the whole wedge window.
    """

    wedge_window_s: float
    last_progress_at: float = field(default_factory=time.monotonic)
    last_probe_ok_at: float | None = None
    last_probe_error: str | None = None
    consecutive_failures: int = 0
    failing_since: float | None = None
    probe_failures_total: int = 0
    probes_total: int = 0
    counters: dict[str, float] = field(default_factory=dict)

    def record_probe(self, ok: bool, detail: str, now: float) -> None:
        self.probes_total += 1
        if ok:
            self.last_probe_ok_at = now
            self.last_progress_at = now
            self.consecutive_failures = 0
            self.failing_since = None
            self.last_probe_error = None
        else:
            if self.consecutive_failures == 0:
                self.failing_since = now
            self.consecutive_failures += 1
            self.probe_failures_total += 1
            self.last_probe_error = detail

    def record_counters(self, counters: dict[str, float] | None, now: float) -> None:
        if not counters:
            return
        for name in ("sglang:generation_tokens_total", "sglang:prompt_tokens_total"):
            if name in counters and counters[name] > self.counters.get(name, -1.0):
                if name in self.counters:  # the first reading is a baseline, not progress
                    self.last_progress_at = now
        self.counters = dict(counters)

    def wedged(self, now: float) -> bool:
        """Long enough without progress that only a restart helps (the watchdog's decision)."""
        return self.consecutive_failures > 0 and now - self.last_progress_at > self.wedge_window_s

    def unresponsive(self, after_failures: int) -> bool:
        """Not fit to route traffic to: probes failing in a row and no progress meanwhile."""
        return (
            self.consecutive_failures >= after_failures
            and self.failing_since is not None
            and self.last_progress_at <= self.failing_since
        )


@dataclass(frozen=True)
class HealthChange:
    """What a fresh reading of the probes changed, for the loop to announce."""

    unresponsive: bool = False  # just went out of rotation
    wedged: bool = False  # just counted as wedged
    progressing: bool = False  # was wedged, is not any more


class SupervisorState:
    def __init__(self, wedge_window_s: float):
        self.lock = threading.RLock()
        self.started_at = time.time()
        self.started_mono = time.monotonic()
        self.phase = Phase.STARTING
        self.status_text = "starting"
        self.engine_pid: int | None = None
        self.engine_started_mono: float | None = None
        self.engine_exit_status: int | None = None
        self.load_percent: int | None = None
        self.kv_pool_tokens: int | None = None  # the smallest rank's pool, once allocated
        self.startup_seconds: float | None = None
        self.ready = False
        self.draining = False
        self.health = EngineHealth(wedge_window_s)
        self.wedged = False
        # Failing probes with no progress: out of rotation now, restart only once wedged.
        self.unresponsive = False
        self.stopped_pids: list[int] = []  # engine processes frozen by SIGSTOP
        self.engine_ready_line = False  # our own child printed "fired up"
        self.drain: DrainReport | None = None
        self.diagnosis: list[Diagnosis] = []
        self.previous_run: LastRun | None = None
        self.engine_starts = 0
        self.launch_plan: PlanSummary | None = None
        self.plan_warnings: list[str] = []
        self.benchmark: BenchmarkStatus | None = None
        self.benchmark_running = False
        self.last_error: str | None = None
        # Each turn of the supervision loop; /livez reports the loop, not the listener.
        self.loop_heartbeat = time.monotonic()

    def beat(self) -> None:
        """The supervision loop took another turn."""
        self.loop_heartbeat = time.monotonic()

    def loop_age(self) -> float:
        return time.monotonic() - self.loop_heartbeat

    def set_phase(self, phase: Phase, text: str | None = None) -> None:
        with self.lock:
            self.phase = phase
            self.status_text = text or phase.value

    def update_health(self, now: float, unresponsive_after: int) -> HealthChange:
        """The wedged and unresponsive flags read again from the probes."""
        wedged, unresponsive = self.health.wedged(now), self.health.unresponsive(unresponsive_after)
        with self.lock:
            was_unresponsive, self.unresponsive = self.unresponsive, unresponsive
            was_wedged, self.wedged = self.wedged, wedged
        return HealthChange(
            unresponsive=unresponsive and not was_unresponsive,
            wedged=wedged and not was_wedged,
            progressing=was_wedged and not wedged,
        )

    def record_health_probe(
        self, ok: bool, detail: str, at: float, counters_around: tuple, unresponsive_after: int
    ) -> bool:
        """A serving probe's result between the counters read before and after it; True when
        it brings an unresponsive engine back into rotation."""
        before, after = counters_around
        with self.lock:
            self.health.record_counters(before, at)
            self.health.record_probe(ok, detail, at)
            self.health.record_counters(after, at)
            recovered = self.unresponsive and not self.health.unresponsive(unresponsive_after)
            if recovered:
                self.unresponsive = False
        return recovered

    def record_kv_pool(self, tokens: int) -> None:
        """Each rank prints its pool; requests fit only in the smallest."""
        with self.lock:
            known = self.kv_pool_tokens
            self.kv_pool_tokens = tokens if known is None else min(known, tokens)

    @property
    def degraded(self) -> bool:
        """Below the benchmark baseline, when configured to say so: still ready."""
        return self.benchmark is not None and self.benchmark.degraded

    def degraded_reason(self) -> str:
        return "degraded: post-start benchmark below its baseline" if self.degraded else ""

    def readiness(self) -> tuple[bool, str]:
        """(ready, reason) for /readyz: engine ready, not draining, not wedged."""
        with self.lock:
            if self.draining:
                return False, "draining: the service is stopping"
            if self.engine_pid is None or self.engine_exit_status is not None:
                return False, f"engine not running ({self.status_text})"
            if self.stopped_pids:
                return False, f"engine frozen: process(es) {self.stopped_pids} are stopped"
            if self.wedged:
                return False, (
                    "engine wedged: no progress and failing probes for "
                    f"{self.health.wedge_window_s:g} s ({self.health.last_probe_error})"
                )
            if self.unresponsive:
                return False, (
                    f"engine unresponsive: {self.health.consecutive_failures} probes failed in "
                    f"a row with no progress ({self.health.last_probe_error})"
                )
            if not self.ready:
                return False, f"not ready yet: {self.status_text}"
            return True, f"ready: {self.status_text}"

    def snapshot(self) -> StatusDocument:
        """The /status document."""
        now = time.monotonic()
        with self.lock:
            ready, reason = self.readiness()
            health = self.health
            return StatusDocument(
                service="glm5svc",
                version=__version__,
                phase=self.phase.value,
                status=self.status_text,
                ready=ready,
                ready_reason=reason,
                draining=self.draining,
                wedged=self.wedged,
                unresponsive=self.unresponsive,
                stopped_pids=tuple(self.stopped_pids),
                drain=self.drain,
                degraded=self.degraded,
                pid=os.getpid(),
                engine_pid=self.engine_pid,
                engine_exit_status=self.engine_exit_status,
                started_at=iso_utc(self.started_at),
                uptime_s=round(now - self.started_mono, 3),
                engine_uptime_s=(
                    round(now - self.engine_started_mono, 3) if self.engine_started_mono else None
                ),
                startup_seconds=self.startup_seconds,
                load_percent=self.load_percent,
                kv_pool_tokens=self.kv_pool_tokens,
                engine_starts=self.engine_starts,
                restarts_seen=max(self.engine_starts - 1, 0),
                previous_run=self.previous_run,
                probes=ProbeStatus(
                    total=health.probes_total,
                    failures_total=health.probe_failures_total,
                    consecutive_failures=health.consecutive_failures,
                    last_ok_age_s=(
                        round(now - health.last_probe_ok_at, 3) if health.last_probe_ok_at else None
                    ),
                    last_error=health.last_probe_error,
                    last_progress_age_s=round(now - health.last_progress_at, 3),
                    engine_counters=dict(health.counters),
                ),
                diagnosis=tuple(self.diagnosis),
                last_error=self.last_error,
                launch_plan=self.launch_plan,
                plan_warnings=tuple(self.plan_warnings),
                benchmark=self.benchmark,
                benchmark_running=self.benchmark_running,
            )
