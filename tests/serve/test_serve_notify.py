"""`glm5svc serve` against the test engine and a real notify socket: the systemd conversation."""

from __future__ import annotations

import re
import time

from testkit.timing import scaled


def test_notify_sequence_from_start_to_stop(serve, notify_socket):
    # /health answers only after 60 s here (sglang 0.5.11 waits 1 s): READY must not wait
    # for it once the engine printed its own ready line; the generation check follows.
    process = serve("load=1.5,health-wait=60", watchdog_usec=400_000)
    status = process.wait_ready()
    assert status["phase"] == "serving"
    assert status["startup_seconds"] > 1.0
    ready_line = next(
        line for line in process.output.splitlines() if "glm5svc: ready after" in line
    )
    assert "sglang's ready line" in ready_line and "generation check" in ready_line
    time.sleep(0.6)  # some watchdog pings while serving
    process.terminate()
    assert process.wait_exit(10) == 0

    sent = notify_socket.assignments()
    statuses = [a.removeprefix("STATUS=") for a in sent if a.startswith("STATUS=")]
    # Phases in the order the log reveals them, then the checks, then stopping.
    expected = [
        "starting",
        "loading weights",
        "autotune",
        "warm-up",
        "checking one real generation",
        "serving",
        "draining",
    ]
    positions = [next(i for i, s in enumerate(statuses) if s.startswith(p)) for p in expected]
    assert positions == sorted(positions), statuses
    assert any(re.fullmatch(r"loading weights [1-9]\d?%", s) for s in statuses), statuses

    ready = sent.index("READY=1")
    checking = sent.index("STATUS=checking one real generation")
    assert checking < ready
    assert sent.count("READY=1") == 1
    extends = [i for i, a in enumerate(sent) if a.startswith("EXTEND_TIMEOUT_USEC=")]
    assert len(extends) >= 3 and max(extends) < ready  # only while starting up
    stall_limit_s = process.config["service"]["load_stall_timeout_s"]
    assert int(sent[extends[0]].split("=")[1]) == (stall_limit_s + 30) * 1_000_000
    pings = [i for i, a in enumerate(sent) if a == "WATCHDOG=1"]
    assert len([i for i in pings if i > ready]) >= 2
    stopping = sent.index("STOPPING=1")
    assert stopping > ready and sent[stopping + 1].startswith("STATUS=draining")


def test_ready_needs_a_generation_with_text(serve, notify_socket):
    # /health_generate passes, but /generate returns no text: never READY, and start-up
    # gives up at the stall limit saying why.
    process = serve("load=0.2,empty-text", load_stall_timeout_s=scaled(2.5))
    code = process.wait_exit(15)
    assert code != 0
    assert "READY=1" not in notify_socket.assignments()
    assert "STATUS=checking one real generation" in notify_socket.assignments()
    assert "generation check: no text in reply" in process.output
    assert "start-up made no progress for" in process.output


def test_slow_load_that_progresses_is_not_timed_out(serve):
    # Loading takes twice the stall limit, but shows progress all the way.
    # Generous stall limit: the engine's own start-up (imports) shows no progress either,
    # and a loaded 2-core CI machine can take seconds for it (scaled, testkit/timing.py).
    stall_limit_s = scaled(3.0)
    process = serve(f"load={2 * stall_limit_s:g}", load_stall_timeout_s=stall_limit_s)
    status = process.wait_ready(30)
    assert status["startup_seconds"] > 2 * stall_limit_s
    assert status["load_percent"] == 100


def test_stalled_load_gives_up_with_a_clear_message(serve, notify_socket):
    # The limit leaves room for the test engine's own imports (seconds on a loaded machine:
    # a real sglang prints nothing for ~35 s), which count as start-up without progress.
    stall_limit_s = int(scaled(4))
    process = serve("load=1,stall-at=40", load_stall_timeout_s=stall_limit_s)
    started = time.monotonic()
    code = process.wait_exit(20)
    elapsed = time.monotonic() - started
    assert code == 1
    # The stall limit plus start-up and teardown margin.
    assert elapsed < stall_limit_s + scaled(8)
    assert re.search(
        r"giving up: start-up made no progress for \d+ s "
        rf"\(service.load_stall_timeout_s = {stall_limit_s}\) in phase 'loading weights'",
        process.output,
    )
    assert "READY=1" not in notify_socket.assignments()
    assert any(a.startswith("STATUS=failed: giving up") for a in notify_socket.assignments())
