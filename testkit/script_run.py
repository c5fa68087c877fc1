"""Run a script (a bench/ short mode, a GPU lab scenario) the way a test needs it.

When the script does not end by itself (its timeout, or pytest-timeout interrupting the
test), it and every process it started that is still there, in whatever session (serve and
the gateway run in their own), get SIGTERM, then SIGKILL: a serve drains and stops its
engine, and nothing the script left outlives the test to hold ports and CPU for the rest of
the run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

GRACE_S = 10.0


def _descendants(pid: int) -> list[int]:
    """Every live process below `pid`, from /proc (parents before children)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, queue = [], [pid]
    while queue:
        for child in children.get(queue.pop(), []):
            found.append(child)
            queue.append(child)
    return found


def _signal_all(pids: list[int], sig: signal.Signals) -> list[int]:
    alive = []
    for pid in pids:
        try:
            os.kill(pid, sig)
            alive.append(pid)
        except ProcessLookupError:
            pass
    return alive


def end_tree(pid: int) -> None:
    """SIGTERM `pid` and everything below it, SIGKILL what is left after GRACE_S."""
    pids = [pid, *_descendants(pid)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = _signal_all(pids, sig)
        deadline = time.monotonic() + GRACE_S
        while pids and time.monotonic() < deadline:
            time.sleep(0.1)
            pids = _signal_all(pids, 0)


def run_script(
    argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess:
    """subprocess.run(argv, capture_output=True, text=True, timeout=...) plus the clean-up."""
    proc = subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )  # fmt: skip
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except BaseException:  # its timeout, or pytest-timeout's interrupt: the script is alive
        end_tree(proc.pid)
        proc.wait()
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)
