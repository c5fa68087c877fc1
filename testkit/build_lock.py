"""One builder at a time for the environments built once per machine under .cache/.

pytest runs in several worker processes (pytest-xdist) and the session starts a prewarm
(testkit/prewarm.py) beside them, so two processes may want the same venv or wheel at
once. Each builder holds an exclusive `flock` on `<name>.lock` beside what it builds: the
second waits, then finds the first one's finished result and returns it.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def build_lock(target: Path) -> Iterator[None]:
    """Hold the lock of `target` (a directory or file that is built once)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(target.parent / f"{target.name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
