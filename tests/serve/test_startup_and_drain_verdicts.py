"""What the supervision loop applies: a start-up log line's change, a stop's drain length."""

from __future__ import annotations

import signal

from glm5svc.config import ServiceSection
from glm5svc.serve.drain import DRAIN_FIRST_READ_S, WATCHDOG_ABORT_DRAIN_S, Drain
from glm5svc.serve.phases import Phase, parse_line
from glm5svc.serve.startup import LineChange, StartupClock
from glm5svc.serve.state import SupervisorState


class _Notifier:
    def extend_timeout(self, seconds: float, text: str) -> None:
        pass


def _clock() -> StartupClock:
    return StartupClock(ServiceSection(), _Notifier(), last_progress=0.0)


def test_a_loading_bar_opens_loading_and_sets_the_percentage():
    state = SupervisorState(60.0)
    line = parse_line("Loading safetensors checkpoint shards:  45% Completed | 36/80 [01:02<01:16]")
    change = _clock().line_change(line, state)
    text = "loading weights 45%"
    assert change == LineChange(Phase.LOADING, 45, text, text)
    assert state.phase is Phase.STARTING  # the loop applies it, not the clock


def test_the_same_bar_percentage_twice_is_progress_once():
    state, clock = SupervisorState(60.0), _clock()
    state.set_phase(Phase.WARMUP)
    line = parse_line("Capturing batches (bs=8 avail_mem=20.1 GB):  50%|#####     | 4/8")
    first, second = clock.line_change(line, state), clock.line_change(line, state)
    assert (
        first.status_text
        == first.progress
        == "warm-up: Capturing batches (bs=8 avail_mem=20.1 GB) 50%"
    )
    assert second == LineChange()


def test_a_batch_after_our_ready_line_is_not_progress():
    state, clock = SupervisorState(60.0), _clock()
    state.set_phase(Phase.WARMUP)
    batch = parse_line("[2026-12-01 03:00:00 TP0] Prefill batch, #new-seq: 1, #new-token: 8")
    assert clock.line_change(batch, state).progress == "warm-up"
    state.engine_ready_line = True
    assert clock.line_change(batch, state).progress is None


def test_a_stop_reads_sglangs_count_only_when_it_drains():
    reads: list[float] = []

    def read_counters(timeout: float) -> dict[str, float]:
        reads.append(timeout)
        return {"sglang:num_running_reqs": 3.0, "sglang:num_queue_reqs": 2.0}

    term = Drain.begin(signal.SIGTERM, 100.0, 60.0, hopeless=False, read_counters=read_counters)
    assert (term.deadline_s, term.in_flight_at_start, reads) == (60.0, 5, [DRAIN_FIRST_READ_S])
    quit_now = Drain.begin(signal.SIGQUIT, 100.0, 60.0, hopeless=False, read_counters=read_counters)
    assert (quit_now.deadline_s, quit_now.in_flight_at_start, len(reads)) == (0.0, None, 1)
    wedged = Drain.begin(signal.SIGTERM, 100.0, 60.0, hopeless=True)
    assert wedged.deadline_s == WATCHDOG_ABORT_DRAIN_S and wedged.in_flight_at_start is None
