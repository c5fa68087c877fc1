"""One way to run a child: started in its own process group, stopped with a grace period.

`spawn` starts the child as the leader of a new session (or only a new process group), so
its process group id is its pid and everything it starts stays in that group unless it
moves itself. By default the child also gets PR_SET_PDEATHSIG (`parent_death`), so it never
outlives this process; the signal fires when the *thread* that spawned it exits, so spawn
from a thread that lives at least as long as the child (the main thread for the engine).

`ChildGroup.stop(grace_s)` sends the first signal (SIGTERM unless told otherwise) to the
leader, or to the whole group, waits up to `grace_s` for the group to empty, then SIGCONTs
and SIGKILLs the group (a stopped process would hold its SIGTERM until continued) and waits
a little more. The outcome says which of these it took:

- "exited": nothing of the group was alive when the stop began;
- "terminated": the group emptied within the grace period after the first signal (for
  sglang's launcher, SIGTERM is its drain: it finishes the requests in flight);
- "killed": the group needed SIGKILL, and then emptied;
- "survivors": processes of the group were still alive after SIGKILL and the short wait
  (`survivor_pids`).

`ChildGroup.kill()` is the same without the first signal and the grace period.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from signal import SIGCONT, SIGKILL, SIGTERM
from typing import Literal

from glm5svc import parent_death

KILL_WAIT_S = 10.0  # after SIGKILL, for the group to empty
LEADER_REAP_WAIT_S = 5.0  # after the group emptied; a live leader would still be in it
POLL_S = 0.05
STOP_KINDS = ("exited", "terminated", "killed", "survivors")


@dataclass(frozen=True)
class StopOutcome:
    """How a stop ended: `kind` is one of STOP_KINDS (module docstring)."""

    kind: str
    returncode: int | None  # the leader's exit status, None if it could not be reaped
    waited_s: float  # from the stop's start to its end
    survivor_pids: tuple[int, ...] = ()

    @property
    def needed_kill(self) -> bool:
        return self.kind in ("killed", "survivors")

    def describe(self) -> str:
        if self.kind == "survivors":
            return f"survivors: {list(self.survivor_pids)}"
        return self.kind


class ChildGroup:
    """A started child and its process group (pgid = the child's pid)."""

    def __init__(self, popen: subprocess.Popen):
        self.popen = popen

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    def poll(self) -> int | None:
        return self.popen.poll()

    def wait(self, timeout: float | None) -> int | None:
        """The leader's exit status once reaped within `timeout`, else None."""
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def signal(self, sig: int) -> None:
        """Signal every process of the group (nothing happens once it is gone)."""
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def signal_leader(self, sig: int) -> None:
        """Signal the leader only, while it has not been reaped."""
        if self.popen.poll() is not None:
            return
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            pass

    def send_kill(self) -> None:
        """SIGCONT, then SIGKILL, to the whole group: a stopped process dies once continued."""
        self.signal(SIGCONT)
        self.signal(SIGKILL)

    def members(self) -> list[int]:
        """Live (non-zombie) processes of the group."""
        # Reap the leader through Popen first: waitpid(-pgid) could steal its exit status.
        if self.popen.poll() is not None:
            reap_orphans(self.pid)
        return live_group_members(self.pid)

    def stopped_members(self) -> list[int]:
        """Members in the stopped state (SIGSTOP/SIGTSTP): frozen, not running."""
        return [pid for pid, state in group_states(self.pid) if state in ("T", "t")]

    def stop(
        self,
        grace_s: float,
        *,
        first_signal: int = SIGTERM,
        first_signal_to: Literal["leader", "group"] = "leader",
        kill_wait_s: float = KILL_WAIT_S,
    ) -> StopOutcome:
        """First signal, up to `grace_s` for the group to empty, then SIGKILL (docstring)."""
        started = time.monotonic()
        if not self.members():
            return self._outcome("exited", started)
        if first_signal_to == "group" or self.popen.poll() is not None:
            self.signal(first_signal)
        else:
            self.signal_leader(first_signal)
        if self._wait_empty(started + grace_s):
            return self._outcome("terminated", started)
        return self._kill(started, kill_wait_s)

    def kill(self, wait_s: float = KILL_WAIT_S) -> StopOutcome:
        """SIGCONT and SIGKILL to the group at once, then up to `wait_s` for it to empty."""
        started = time.monotonic()
        if not self.members():
            return self._outcome("exited", started)
        return self._kill(started, wait_s)

    def _kill(self, started: float, wait_s: float) -> StopOutcome:
        self.send_kill()
        if self._wait_empty(time.monotonic() + wait_s):
            return self._outcome("killed", started)
        return StopOutcome(
            "survivors", self.popen.poll(), time.monotonic() - started, tuple(self.members())
        )

    def _wait_empty(self, deadline: float) -> bool:
        while self.members():
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL_S)
        return True

    def _outcome(self, kind: str, started: float) -> StopOutcome:
        # The group can look empty a moment before the leader can be reaped: a process's
        # main thread shows as a zombie while its other threads still tear down.
        code = self.wait(LEADER_REAP_WAIT_S)
        return StopOutcome(kind, code, time.monotonic() - started)


def spawn(
    argv: Sequence[str],
    *,
    die_with_parent: bool = True,
    death_signal: int = SIGKILL,
    new_session: bool = True,
    **popen_kwargs,
) -> ChildGroup:
    """Start `argv` as the leader of its own process group (and session, unless
    `new_session` is False); `popen_kwargs` go to subprocess.Popen. With `die_with_parent`
    the child gets `death_signal` when this process (the spawning thread) dies."""
    if isinstance(argv, str):
        raise TypeError("spawn() takes an argv list; for a shell line pass ['/bin/sh', '-c', line]")
    for taken in ("start_new_session", "process_group", "preexec_fn"):
        if taken in popen_kwargs:
            raise TypeError(f"spawn() sets {taken} itself; do not pass it")
    if new_session:
        popen_kwargs["start_new_session"] = True
    else:
        popen_kwargs["process_group"] = 0
    if die_with_parent:
        popen_kwargs["preexec_fn"] = parent_death.die_with_parent(death_signal)
    return ChildGroup(subprocess.Popen(list(argv), **popen_kwargs))


def reap_orphans(pgid: int) -> None:
    """Reap exited members of the group that were re-parented to this process (a
    subreaper), so their zombies do not make the group look alive."""
    while True:
        try:
            pid, _ = os.waitpid(-pgid, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def group_states(pgid: int) -> list[tuple[int, str]]:
    """(pid, state letter) of every process whose process group is `pgid`."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...: comm may contain spaces, so split after ')'.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid:
            members.append((int(entry.name), fields[0]))
    return members


def live_group_members(pgid: int) -> list[int]:
    """Processes of group `pgid` that are not zombies."""
    return [pid for pid, state in group_states(pgid) if state not in ("Z", "X")]
