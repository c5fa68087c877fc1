"""The server process and its process group: start, signal, kill, prove empty.

The engine never outlives `glm5svc serve`: the launcher gets PR_SET_PDEATHSIG
(SIGKILL) in the forked child before exec, so even a SIGKILLed supervisor takes it
down; sglang's own scheduler and detokenizer processes set the same on themselves
(`kill_itself_when_parent_died` in sglang/srt/utils/common.py), so the launcher's
death takes the rest of the tree. The death signal fires when the *thread* that
forked exits, so `start()` must run on the main thread.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from glm5svc.parent_death import LIBC, PR_SET_CHILD_SUBREAPER, die_with_parent


def become_subreaper() -> bool:
    """Orphaned grandchildren of the server are re-parented to us, so we can reap them.

    Without this they would go to PID 1, which in a container may never reap them,
    and their zombies would make the group look alive forever.
    """
    try:
        return LIBC.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


class EngineProcess:
    def __init__(self, argv: list[str], env: dict[str, str]):
        self.argv = argv
        self.env = env
        self.popen: subprocess.Popen | None = None

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    def start(self) -> int:
        """Start in its own process group (pgid = pid), output merged into one pipe."""
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("the engine must be started from the main thread (pdeathsig)")
        self.popen = subprocess.Popen(
            self.argv,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            process_group=0,
            close_fds=True,
            preexec_fn=die_with_parent(signal.SIGKILL),
        )
        return self.popen.pid

    @property
    def stdout_fd(self) -> int:
        return self.popen.stdout.fileno()

    def poll(self) -> int | None:
        return self.popen.poll() if self.popen else None

    def wait(self, timeout_s: float) -> int | None:
        """The launcher's exit status once reaped within `timeout_s`, else None."""
        if self.popen is None:
            return None
        try:
            return self.popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def signal_launcher(self, sig: int) -> None:
        """Signal the launcher only: sglang drains on its own SIGTERM and ends its children."""
        if self.popen is None or self.popen.poll() is not None:
            return
        try:
            os.kill(self.popen.pid, sig)
        except ProcessLookupError:
            pass

    def signal_group(self, sig: int) -> None:
        if self.popen is None:
            return
        try:
            os.killpg(self.popen.pid, sig)
        except ProcessLookupError:
            pass

    def group_members(self) -> list[int]:
        """Live (non-zombie) processes still in the server's process group."""
        if self.popen is None:
            return []
        # Reap the leader through Popen first: waitpid(-pgid) could steal its exit status.
        if self.popen.poll() is not None:
            reap_orphans(self.popen.pid)
        return live_group_members(self.popen.pid)

    def stopped_members(self) -> list[int]:
        """Group members in the stopped state (SIGSTOP/SIGTSTP): frozen, not serving."""
        if self.popen is None:
            return []
        return [pid for pid, state in group_states(self.popen.pid) if state in ("T", "t")]

    def kill_group(self, wait_s: float = 10.0) -> str:
        """SIGKILL the whole group; "empty" (nothing was left), "killed" or "survivors: ..."."""
        if self.popen is None or not self.group_members():
            return "empty"
        self.signal_group(signal.SIGCONT)  # a stopped process dies only once continued
        self.signal_group(signal.SIGKILL)
        deadline = time.monotonic() + wait_s
        while self.group_members():
            if time.monotonic() >= deadline:
                return f"survivors: {self.group_members()}"
            time.sleep(0.05)
        return "killed"


def reap_orphans(pgid: int) -> None:
    """Reap exited re-parented members of the group (we are their subreaper)."""
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
    return [pid for pid, state in group_states(pgid) if state not in ("Z", "X")]
