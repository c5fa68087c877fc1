"""A stand-in for `systemctl`, for tests: a tiny service manager of real processes.

`install(folder)` writes a `systemctl` script into folder/bin (put it first on PATH) that
runs this module; `define(folder, unit, argv, ...)` describes a unit. What glm5svc asks of
systemctl, done for real on processes the tests can watch:

  is-active [--quiet] UNIT   exit 0 while its process lives
  start [--no-block] UNIT    unless active: run its pre_start (ExecStartPre=), start argv in a
                             session of its own (output to folder/UNIT.log); without
                             --no-block wait until ready_url answers 200 (Type=notify's
                             READY) or the process ends (exit 1)
  stop UNIT                  SIGTERM to the process, wait for it to end (then SIGKILL)
  restart UNIT               stop, then start
  kill --signal=KILL UNIT    SIGKILL to the unit's whole process group (a cgroup's kill)
  reset-failed UNIT          nothing to reset

Every call is appended to folder/calls. The folder comes from $SYSTEMCTL_STAND_IN_DIR.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from testkit.timing import scaled

FOLDER_ENV = "SYSTEMCTL_STAND_IN_DIR"
READY_WAIT_S = 120.0
STOP_WAIT_S = 120.0
SCRIPT = '#!/bin/sh\nPYTHONPATH="{root}" exec "{python}" -m testkit.systemctl_stand_in "$@"\n'


def install(folder: Path) -> Path:
    """The `systemctl` script in folder/bin; returns that bin folder (for PATH)."""
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "systemctl"
    root = Path(__file__).resolve().parent.parent
    script.write_text(SCRIPT.format(root=root, python=sys.executable))
    script.chmod(0o755)
    return bin_dir


def define(
    folder: Path,
    unit: str,
    argv: list[str],
    ready_url: str | None = None,
    pre_start: list[str] | None = None,
) -> None:
    units = folder / "units"
    units.mkdir(parents=True, exist_ok=True)
    spec = {"argv": argv, "ready_url": ready_url, "pre_start": pre_start}
    (units / f"{unit}.json").write_text(json.dumps(spec))


def unit_pid(folder: Path, unit: str) -> int | None:
    try:
        pid = int((folder / "run" / f"{unit}.pid").read_text())
    except (FileNotFoundError, ValueError):
        return None
    return pid if alive(pid) else None


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state not in ("Z", "X")


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status == 200
    except (urllib.error.URLError, OSError):
        return False


def start(folder: Path, unit: str, block: bool = True) -> int:
    if unit_pid(folder, unit):
        return 0
    spec = json.loads((folder / "units" / f"{unit}.json").read_text())
    if spec.get("pre_start"):
        subprocess.run(spec["pre_start"], check=True)
    (folder / "run").mkdir(exist_ok=True)
    with (folder / f"{unit}.log").open("ab") as log:
        child = subprocess.Popen(
            spec["argv"], stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
        )
    (folder / "run" / f"{unit}.pid").write_text(str(child.pid))
    if not block or not spec.get("ready_url"):
        return 0
    deadline = time.monotonic() + scaled(READY_WAIT_S)
    while time.monotonic() < deadline:
        if child.poll() is not None:
            print(f"{unit}: exited {child.returncode} before READY", file=sys.stderr)
            return 1
        if _ready(spec["ready_url"]):
            return 0
        time.sleep(0.2)
    print(f"{unit}: no READY in {scaled(READY_WAIT_S):.0f} s", file=sys.stderr)
    return 1


def stop(folder: Path, unit: str) -> int:
    pid = unit_pid(folder, unit)
    if pid is None:
        return 0
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + scaled(STOP_WAIT_S)
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if alive(pid):
        kill(folder, unit)
    return 0


def kill(folder: Path, unit: str) -> int:
    pid = unit_pid(folder, unit)
    if pid is not None:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        while alive(pid):
            time.sleep(0.05)
    return 0


def main(argv: list[str]) -> int:
    folder = Path(os.environ[FOLDER_ENV])
    with (folder / "calls").open("a") as calls:
        calls.write(" ".join(argv) + "\n")
    words = [a for a in argv if not a.startswith("-")]
    if len(words) != 2:
        print(f"systemctl stand-in: cannot do {argv}", file=sys.stderr)
        return 1
    verb, unit = words
    if verb == "is-active":
        active = unit_pid(folder, unit) is not None
        if "--quiet" not in argv:
            print("active" if active else "inactive")
        return 0 if active else 3
    if verb == "start":
        return start(folder, unit, block="--no-block" not in argv)
    if verb == "stop":
        return stop(folder, unit)
    if verb == "restart":
        stop(folder, unit)
        return start(folder, unit)
    if verb == "kill":
        return kill(folder, unit)
    if verb == "reset-failed":
        return 0
    print(f"systemctl stand-in: no verb {verb}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
