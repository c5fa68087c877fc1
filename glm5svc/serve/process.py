"""The server process and its process group: start, signal, drain, kill, prove empty."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Orphaned grandchildren of the server are re-parented to us, so we can reap them.

    Without this they would go to PID 1, which in a container may never reap them,
    and their zombies would make the group look alive forever.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
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
        self.popen = subprocess.Popen(
            self.argv,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            process_group=0,
            close_fds=True,
        )
        return self.popen.pid

    @property
    def stdout_fd(self) -> int:
        return self.popen.stdout.fileno()

    def poll(self) -> int | None:
        return self.popen.poll() if self.popen else None

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

    def stop(self, drain_timeout_s: float, kill_wait_s: float = 10.0) -> str:
        """SIGTERM the group, wait up to drain_timeout_s, then SIGKILL whatever is left.

        Returns "drained", "killed" or "survivors: <pids>" (never silently leaves processes).
        """
        if self.popen is None:
            return "drained"
        self.signal_group(signal.SIGTERM)
        if self._wait_group_empty(drain_timeout_s):
            return "drained"
        self.signal_group(signal.SIGKILL)
        if self._wait_group_empty(kill_wait_s):
            return "killed"
        return f"survivors: {self.group_members()}"

    def kill_now(self) -> str:
        return self.stop(drain_timeout_s=0.0)

    def _wait_group_empty(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while True:
            if not self.group_members():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)


def reap_orphans(pgid: int) -> None:
    """Reap exited re-parented members of the group (we are their subreaper)."""
    while True:
        try:
            pid, _ = os.waitpid(-pgid, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def live_group_members(pgid: int) -> list[int]:
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
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(entry.name))
    return members
