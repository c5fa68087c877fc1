"""One night process at a time on a box: `night begin`, `night resume` and the fallback take
an exclusive lock (flock) on LOCK_FILE in service.results_dir; a second one is refused,
naming the holder. The kernel drops the lock when its holder dies, however it dies.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from glm5svc.errors import Glm5Error

LOCK_FILE = "night.lock"
EXIT_BUSY = 75  # EX_TEMPFAIL: another night process holds the lock


class NightBusy(Glm5Error):
    """Another `glm5svc night` process holds the lock."""

    exit_status = EXIT_BUSY


@contextmanager
def night_lock(results_dir: Path, what: str) -> Iterator[str | None]:
    """Hold the lock for `what`; NightBusy when another process holds it. Yields None, or
    why the lock could not be taken at all (a results folder that refuses the file): the
    caller goes on without it rather than leave the box as it is."""
    path = Path(results_dir) / LOCK_FILE
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        yield f"{path}: {exc.strerror or exc}"
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "unknown"
            raise NightBusy(
                f"{what}: refused: another `glm5svc night` process holds {path} "
                f"(pid and action: {holder}); `glm5svc night status` shows the night, "
                "wait for that process to end"
            ) from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()} {what}\n".encode(), 0)
        except OSError:
            pass  # a full disk: the lock holds all the same, only its note is missing
        yield None
    finally:
        os.close(fd)
