"""Start-up's clocks: bounded by stalls, not by total time (Ollama's rule).

Each sign of progress (a new phase, a loading percentage, a progress bar that moved)
resets the stall clock and, at most once a second, tells systemd to wait longer
(EXTEND_TIMEOUT_USEC), with a margin so that glm5svc's own clear message comes first.
The supervision loop asks `overdue` each turn and decides, and applies what `line_change`
says a log line changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from glm5svc.config import ServiceSection
from glm5svc.serve.notify import Notifier
from glm5svc.serve.phases import LineInfo, Phase, later_startup_phase
from glm5svc.serve.state import SupervisorState

EXTEND_MARGIN_S = 30.0
EXTEND_MIN_INTERVAL_S = 1.0


@dataclass(frozen=True)
class LineChange:
    """What one log line changes during start-up; the supervision loop applies it."""

    phase: Phase | None = None  # the later start-up phase it opens
    load_percent: int | None = None  # the new loading percentage
    status_text: str | None = None  # the new status text
    progress: str | None = None  # start-up moved: the text for EXTEND_TIMEOUT_USEC


NO_CHANGE = LineChange()


@dataclass
class StartupClock:
    service: ServiceSection
    notifier: Notifier
    last_progress: float
    last_extend: float = 0.0
    progress_percents: dict[str, int] = field(default_factory=dict)

    def progress(self, now: float, text: str, force: bool = False) -> None:
        """Start-up moved: reset the stall clock, tell systemd (EXTEND_TIMEOUT_USEC)."""
        self.last_progress = now
        if force or now - self.last_extend >= EXTEND_MIN_INTERVAL_S:
            self.last_extend = now
            self.notifier.extend_timeout(self.service.load_stall_timeout_s + EXTEND_MARGIN_S, text)

    def bar_moved(self, info: LineInfo) -> bool:
        previous = self.progress_percents.get(info.progress_label)
        self.progress_percents[info.progress_label] = info.progress_percent
        return previous != info.progress_percent

    def line_change(self, info: LineInfo, state: SupervisorState) -> LineChange:
        """What `info` changes in start-up as `state` has it."""
        phase, load_percent, status_text = state.phase, state.load_percent, state.status_text
        opens = info.phase if info.phase and later_startup_phase(phase, info.phase) else None
        phase = opens or phase
        text = opens.value if opens else None
        if info.load_percent is not None and info.load_percent != load_percent:
            text = f"loading weights {info.load_percent}%"
            return LineChange(opens, info.load_percent, text, text)
        if info.progress_label and self.bar_moved(info):
            text = f"{phase.value}: {info.progress_label} {info.progress_percent}%"
            return LineChange(opens, None, text, text)
        # After our child's ready line a batch is a readiness check's, not progress.
        if (info.startup_step or info.fired_up) and not (info.batch and state.engine_ready_line):
            text = text or status_text
        return LineChange(opens, progress=text)

    def overdue(self, now: float, state: SupervisorState) -> str | None:
        """Why start-up has taken too long (a stall, or past the total limit); None if not."""
        started = state.engine_started_mono or now
        phase, status = state.phase.value, state.status_text
        stalled_for = now - self.last_progress
        if stalled_for > self.service.load_stall_timeout_s:
            return (
                f"start-up made no progress for {stalled_for:.0f} s "
                f"(service.load_stall_timeout_s = {self.service.load_stall_timeout_s:g}) in phase "
                f"'{phase}'; last status: {status}"
            )
        if now - started > self.service.startup_timeout_s:
            return (
                f"the server was not ready after {now - started:.0f} s "
                f"(service.startup_timeout_s = {self.service.startup_timeout_s:g})"
            )
        return None
