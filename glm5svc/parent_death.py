"""Children that die with their parent: Linux PR_SET_PDEATHSIG, set between fork and exec.

prctl(2): the signal is sent when the *thread* that forked the child exits, and it
survives execve (except for set-user-ID programs). Used for the engine (`serve`) and
for bench_serving (`bench`), so neither outlives the glm5svc process that started it,
even when that process is SIGKILLed.
"""

from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Callable

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
LIBC = ctypes.CDLL(None, use_errno=True)


def die_with_parent(sig: int = signal.SIGKILL) -> Callable[[], None]:
    """A preexec_fn: the child gets `sig` when this process dies (or has died already)."""
    parent_pid = os.getpid()

    def set_death_signal() -> None:
        LIBC.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(128 + int(sig))

    return set_death_signal
