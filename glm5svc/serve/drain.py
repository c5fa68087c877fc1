"""sglang's own drain, as the supervision loop follows it: begin, step, counters, outcome.

A `Drain` holds what one stop has seen (the requests in flight when the stop came, the
most seen, the last reading, when the group was killed) and says what is due next; the
supervision loop decides and acts on it (signals, logs, systemd, the last-run record).

Stopping is SIGTERM to the launcher only (sglang 0.5.11's `SignalHandler.sigterm_handler`
sets `gracefully_exit`, answers /health 503, waits until no request is left, then kills
its own process tree). The group is SIGKILLed only after the drain's deadline.
"""

from __future__ import annotations

import enum
import signal
from dataclasses import dataclass

from glm5svc.records import DrainReport

DRAIN_POLL_S = 0.5
DRAIN_FIRST_READ_S = 1.0
WATCHDOG_ABORT_DRAIN_S = 2.0
KILL_WAIT_S = 10.0
# The group can look empty a moment before the launcher can be reaped: a process's main
# thread shows as a zombie while its other threads still tear down (sglang's launcher has
# many), and waitpid answers only once the last one is gone.
LAUNCHER_REAP_WAIT_S = 5.0  # after its group emptied; a live launcher would still be in it


class DrainStep(enum.Enum):
    """What is due at this turn of the loop."""

    WAIT = "wait"  # the group is still draining; nothing to do now
    POLL = "poll"  # read sglang's counters again
    KILL = "kill"  # the deadline passed: SIGKILL the group
    DONE = "done"  # the group is empty
    GIVE_UP = "give up"  # killed, and still not empty after KILL_WAIT_S


def drain_seconds(sig: int, timeout_s: float, *, hopeless: bool) -> float:
    """How long a stop by `sig` drains: none for SIGQUIT, a moment for systemd's watchdog
    (SIGABRT: the engine is wedged already) and for an engine nothing will finish in
    (wedged, unresponsive or frozen; sglang itself force-exits then), else the limit."""
    if sig == signal.SIGQUIT:
        return 0.0
    if sig == signal.SIGABRT:
        return WATCHDOG_ABORT_DRAIN_S
    if hopeless:
        return min(WATCHDOG_ABORT_DRAIN_S, timeout_s)
    return timeout_s


def in_flight(counters: dict | None) -> int | None:
    """Requests running plus queued, from sglang's gauges; None without them."""
    if not counters or "sglang:num_running_reqs" not in counters:
        return None
    running = counters.get("sglang:num_running_reqs", 0.0)
    return int(running + counters.get("sglang:num_queue_reqs", 0.0))


@dataclass
class Drain:
    signal_name: str
    started: float
    deadline: float
    in_flight_at_start: int | None = None  # sglang's count just before its SIGTERM
    last_in_flight: int | None = None
    most_in_flight: int | None = None  # requests sent straight to the engine port still count
    killed_at: float | None = None
    next_poll: float = 0.0

    @classmethod
    def begin(
        cls, sig: int, now: float, timeout_s: float, *, hopeless: bool, read_counters=None
    ) -> Drain:
        """A stop by `sig` at `now`, draining for `drain_seconds`; `read_counters(timeout)`
        (given while serving) reads sglang's count in flight first, when it drains at all."""
        drain_s = drain_seconds(sig, timeout_s, hopeless=hopeless)
        count = None
        if read_counters is not None and drain_s > 0:  # before sglang starts draining
            count = in_flight(read_counters(DRAIN_FIRST_READ_S))
        return cls(signal.Signals(sig).name, now, now + drain_s, count, count, count)

    @property
    def deadline_s(self) -> float:
        return self.deadline - self.started

    @property
    def killed(self) -> bool:
        return self.killed_at is not None

    @property
    def watchdog_abort(self) -> bool:
        return self.signal_name == "SIGABRT"

    def cut(self, now: float) -> None:
        """SIGQUIT during a drain: the deadline is now."""
        if not self.killed:
            self.deadline = now

    def step(self, now: float, group_empty: bool, polling: bool) -> DrainStep:
        """What is due now; `polling`: a counters read is still under way."""
        if group_empty:
            return DrainStep.DONE
        if not self.killed and now >= self.deadline:
            self.killed_at = now
            return DrainStep.KILL
        if self.killed and now - self.killed_at > KILL_WAIT_S:
            return DrainStep.GIVE_UP
        if not self.killed and now >= self.next_poll and not polling:
            self.next_poll = now + DRAIN_POLL_S
            return DrainStep.POLL
        return DrainStep.WAIT

    def counters(self, counters: dict, at: float) -> str | None:
        """A reading of sglang's gauges; the text to show when the count in flight moved."""
        count = in_flight(counters)
        if self.in_flight_at_start is None:
            self.in_flight_at_start = count
        if count is not None and (self.most_in_flight or 0) <= count:
            self.most_in_flight = count
        if count == self.last_in_flight:
            return None
        self.last_in_flight = count
        running = int(counters.get("sglang:num_running_reqs", 0))
        queued = int(counters.get("sglang:num_queue_reqs", 0))
        return (
            f"draining: {count} request(s) in flight ({running} running, {queued} "
            f"queued), {at - self.started:.1f} s"
        )

    def outcome(self, survivors: list[int] | None) -> str:
        if survivors:
            return f"survivors: {survivors}"
        return "killed" if self.killed else "drained"

    def report(self, now: float, outcome: str | None = None, left: int | None = None):
        return DrainReport(
            signal=self.signal_name,
            seconds=round(now - self.started, 3),
            deadline_s=round(self.deadline_s, 3),
            in_flight_at_start=self.in_flight_at_start,
            most_in_flight=self.most_in_flight,
            in_flight=self.last_in_flight,
            killed=self.killed,
            outcome=outcome,
            processes_left=left,
        )

    def begin_text(self, launcher_pid: int | None) -> str:
        if self.deadline_s > 0:
            return (
                f"received {self.signal_name}: draining; SIGTERM to the server's launcher (pid "
                f"{launcher_pid}) only, which finishes the requests in flight and ends its "
                f"own processes; SIGKILL to the group after {self.deadline_s:g} s"
            )
        return (
            f"received {self.signal_name}: stopping now, no drain (SIGKILL to the server's group)"
        )

    def kill_text(self, now: float, members: list[int]) -> str:
        return (
            f"drain time over after {now - self.started:.1f} s "
            f"(service.drain_timeout_s); {_count(self.last_in_flight)} request(s) "
            f"still in flight; SIGKILL to the server's process group {members}"
        )

    def summary(self, now: float, outcome: str, left: int, launcher_code: int | None) -> str:
        return (
            f"drain finished ({outcome}) in {now - self.started:.1f} s: requests in flight when "
            f"the stop came: {_count(self.in_flight_at_start)}, most seen while draining: "
            f"{_count(self.most_in_flight)}, at the last reading: "
            f"{_count(self.last_in_flight)}; {_launcher_exit(launcher_code)}; "
            f"processes left: {left}"
        )


def _count(value: int | None) -> str:
    return "unknown" if value is None else str(value)


def _launcher_exit(code: int | None) -> str:
    if code is None:
        return f"the launcher's exit status unknown (not reaped within {LAUNCHER_REAP_WAIT_S:g} s)"
    if code < 0:
        return f"the launcher ended by signal {-code}"
    return f"the launcher exited with status {code}"
