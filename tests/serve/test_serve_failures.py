"""Crashes, an engine that ignores SIGTERM, and a wedged engine, with real processes."""

from __future__ import annotations

import time

import pytest

from glm5svc.child_group import live_group_members

# test engine crash mode -> (diagnosis id, exit status: 78 where restarting cannot help)
CRASHES = {
    "cuda-init": ("cuda-init-uvm-hmm", 78),
    "nvml-mismatch": ("nvml-version-mismatch", 78),
    "shared-experts": ("shared-experts-fusion", 78),
    "oom": ("cuda-oom", 1),
    "allreduce-fusion": ("allreduce-fusion-sm120", 78),
    "nccl-timeout": ("nccl-timeout", 1),
    "nccl-error": ("nccl-error", 1),
    "prefill-metadata": ("nsa-prefill-metadata", 1),
    "nan": ("nan-in-decode", 1),
}


@pytest.mark.parametrize("crash", sorted(CRASHES))
def test_crash_exits_promptly_with_the_diagnosis(serve, notify_socket, crash):
    signature, expected_status = CRASHES[crash]
    process = serve(f"load=0.2,crash={crash}")
    code = process.wait_exit(20)
    assert code == expected_status
    assert f"[{signature}]" in process.output
    assert "fix: " in process.output
    assert "READY=1" not in notify_socket.assignments()
    failed = [a for a in notify_socket.assignments() if a.startswith("STATUS=failed")]
    assert failed, notify_socket.assignments()


def test_engine_ignoring_sigterm_is_killed_after_the_drain_time(serve):
    drain = 1.5
    process = serve("load=0.2,ignore-sigterm", drain_timeout_s=drain)
    status = process.wait_ready()
    pgid = status["engine_pid"]
    assert len(live_group_members(pgid)) >= 2  # the engine and its rank process
    started = time.monotonic()
    process.terminate()
    assert process.wait_exit(drain + 10) == 0
    assert time.monotonic() - started < drain + 3
    assert live_group_members(pgid) == []
    assert "server stopped: killed" in process.output


def test_wedged_engine_turns_not_ready_and_watchdog_pings_stop(serve, notify_socket):
    process = serve(
        "load=0.2,wedge-after=1",
        watchdog_usec=400_000,
        wedge_window_s=1.5,
        probe_interval_s=0.3,
        probe_timeout_s=0.5,
    )
    process.wait_ready()
    assert process.get("/readyz")[0] == 200
    code, body = process.wait_for(
        lambda: (r := process.get("/readyz"))[0] == 503 and r, 15, "readyz 503"
    )
    # Out of rotation after a few failed probes; wedged (no watchdog) after wedge_window_s.
    assert "unresponsive" in body or "wedged" in body
    process.wait_for(lambda: process.status()["wedged"], 15, "wedged")
    assert "wedged" in process.get("/readyz")[1]
    wedged_at = time.monotonic()
    time.sleep(1.0)  # more than two watchdog intervals
    pings = [t for t, m in notify_socket.messages if "WATCHDOG=1" in m.split("\n")]
    assert pings and max(pings) < wedged_at
    assert any("engine wedged" in a for a in notify_socket.assignments())
    status = process.status()
    assert status["wedged"] is True and status["ready"] is False
    assert status["probes"]["failures_total"] >= 1
    assert process.proc.poll() is None  # ending the service is the watchdog's job
