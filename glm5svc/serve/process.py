"""The server process and its process group: start, signal, kill, prove empty.

The engine never outlives `glm5svc serve`: the launcher gets PR_SET_PDEATHSIG
(SIGKILL) in the forked child before exec, so even a SIGKILLed supervisor takes it
down; sglang's own scheduler and detokenizer processes set the same on themselves
(`kill_itself_when_parent_died` in sglang/srt/utils/common.py), so the launcher's
death takes the rest of the tree. The death signal fires when the *thread* that
forked exits, so `start()` must run on the main thread. The group itself is a
`child_group.ChildGroup`.
"""

from __future__ import annotations

import signal
import subprocess
import threading
from dataclasses import dataclass

from glm5svc.child_group import KILL_WAIT_S, ChildGroup, spawn
from glm5svc.parent_death import LIBC, PR_SET_CHILD_SUBREAPER
from glm5svc.records import PlanSummary


@dataclass(frozen=True)
class Launch:
    """What the supervisor starts: the launch plan's argv and environment, its summary and
    warnings (for /status and the post-start benchmark's record), and the API key the
    probes send."""

    argv: list[str]
    env: dict[str, str]
    summary: PlanSummary | None = None
    warnings: tuple[str, ...] = ()
    api_key: str | None = None


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
        self.group: ChildGroup | None = None

    @property
    def popen(self) -> subprocess.Popen | None:
        return self.group.popen if self.group else None

    @property
    def pid(self) -> int | None:
        return self.group.pid if self.group else None

    def start(self) -> int:
        """Start in its own process group (pgid = pid), output merged into one pipe."""
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("the engine must be started from the main thread (pdeathsig)")
        self.group = spawn(
            self.argv,
            death_signal=signal.SIGKILL,
            new_session=False,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            close_fds=True,
        )
        return self.group.pid

    @property
    def stdout_fd(self) -> int:
        return self.group.popen.stdout.fileno()

    def poll(self) -> int | None:
        return self.group.poll() if self.group else None

    def wait(self, timeout_s: float) -> int | None:
        """The launcher's exit status once reaped within `timeout_s`, else None."""
        return self.group.wait(timeout_s) if self.group else None

    def signal_launcher(self, sig: int) -> None:
        """Signal the launcher only: sglang drains on its own SIGTERM and ends its children."""
        if self.group is not None:
            self.group.signal_leader(sig)

    def send_kill(self) -> None:
        """SIGCONT and SIGKILL to the group, without waiting (the drain waits in its loop)."""
        if self.group is not None:
            self.group.send_kill()

    def group_members(self) -> list[int]:
        """Live (non-zombie) processes still in the server's process group."""
        return self.group.members() if self.group else []

    def stopped_members(self) -> list[int]:
        """Group members in the stopped state (SIGSTOP/SIGTSTP): frozen, not serving."""
        return self.group.stopped_members() if self.group else []

    def kill_group(self, wait_s: float = KILL_WAIT_S) -> str:
        """SIGKILL the whole group; "empty" (nothing was left), "killed" or "survivors: ..."."""
        if self.group is None:
            return "empty"
        outcome = self.group.kill(wait_s)
        return "empty" if outcome.kind == "exited" else outcome.describe()
