"""glm5svc/child_group.py on real processes: each stop outcome, the group, the death signal."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from glm5svc.child_group import ChildGroup, StopOutcome, live_group_members, spawn

# A leader that starts a child in its own group and then waits on a signal it may ignore.
LEADER = """
import signal, subprocess, sys, time
if sys.argv[1] == "ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
print(child.pid, flush=True)
time.sleep(120)
"""


def started(*args: str) -> tuple[ChildGroup, int]:
    group = spawn([sys.executable, "-c", LEADER, *args], stdout=subprocess.PIPE, text=True)
    child_pid = int(group.popen.stdout.readline())
    return group, child_pid


def test_spawn_puts_the_child_and_its_children_in_a_group_of_their_own():
    group, child_pid = started("plain")
    try:
        assert set(group.members()) == {group.pid, child_pid}
        assert group.poll() is None
    finally:
        group.kill()


def test_a_group_already_gone_is_exited():
    group = spawn([sys.executable, "-c", "raise SystemExit(3)"])
    group.wait(30)
    outcome = group.stop(5)
    assert outcome == StopOutcome("exited", 3, outcome.waited_s)


def test_sigterm_to_the_whole_group_within_grace_is_terminated():
    group, child_pid = started("plain")
    outcome = group.stop(30, first_signal_to="group")
    assert outcome.kind == "terminated" and not outcome.needed_kill
    assert outcome.returncode == -signal.SIGTERM
    assert live_group_members(group.pid) == []


def test_a_leader_that_ignores_sigterm_is_killed_after_the_grace():
    group, child_pid = started("ignore-term")
    outcome = group.stop(0.5)
    assert outcome.kind == "killed" and outcome.needed_kill
    assert outcome.returncode == -signal.SIGKILL
    assert outcome.waited_s >= 0.5
    assert group.members() == []


def test_a_stopped_group_is_continued_before_sigkill():
    group, _ = started("plain")
    group.signal(signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while len(group.stopped_members()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(group.stopped_members()) == 2
    outcome = group.stop(0.2)  # SIGTERM waits in a stopped process: only SIGKILL ends it
    assert outcome.kind == "killed"
    assert group.members() == []


def test_survivors_are_named(monkeypatch):
    group, child_pid = started("plain")
    monkeypatch.setattr(ChildGroup, "send_kill", lambda self: None)  # SIGKILL "fails"
    try:
        outcome = group.kill(wait_s=0.2)
        assert outcome.kind == "survivors"
        assert set(outcome.survivor_pids) == {group.pid, child_pid}
        assert outcome.describe() == f"survivors: {list(outcome.survivor_pids)}"
    finally:
        monkeypatch.undo()
        assert group.kill().kind == "killed"


def test_the_child_dies_with_its_parent():
    # The parent spawns a grandchild with the death signal, prints its pid and is killed.
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from glm5svc.child_group import spawn;"
            "g = spawn([sys.executable, '-c', 'import time; time.sleep(120)']);"
            "print(g.pid, flush=True); time.sleep(120)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    grandchild = int(parent.stdout.readline())
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while live_group_members(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert live_group_members(grandchild) == []


@pytest.mark.parametrize("taken", ["start_new_session", "process_group", "preexec_fn"])
def test_spawn_refuses_what_it_sets_itself(taken):
    with pytest.raises(TypeError, match=taken):
        spawn(["true"], **{taken: None})
