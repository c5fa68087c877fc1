"""testkit.script_run: a script cut short leaves no process behind, in any session."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testkit.script_run import run_script

# Starts a child in a session of its own (as bench/ scripts start serve), writes its pid, waits.
SCRIPT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                         start_new_session=True)
print(child.pid, flush=True)
time.sleep(600)
"""


def test_a_script_past_its_timeout_takes_its_other_session_children_with_it(tmp_path):
    pid_file = tmp_path / "pid"
    script = SCRIPT.replace(
        "print(child.pid, flush=True)", f"open({str(pid_file)!r}, 'w').write(str(child.pid))"
    )
    with pytest.raises(subprocess.TimeoutExpired):
        run_script([sys.executable, "-c", script], cwd=tmp_path, env=dict(os.environ), timeout=3)
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    state = (
        Path(f"/proc/{child}/stat").read_text().split()[2]
        if Path(f"/proc/{child}").exists()
        else "gone"
    )
    assert state in ("gone", "Z"), state


def test_a_script_that_ends_by_itself_gives_its_result():
    done = run_script(
        [sys.executable, "-c", "print('hi')"], cwd=Path.cwd(), env=dict(os.environ), timeout=30
    )
    assert (done.returncode, done.stdout) == (0, "hi\n")
