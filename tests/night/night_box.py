"""A box for the night's chain tests: the test engine's configuration, a stand-in service
manager of real processes (testkit/systemctl_stand_in.py) running glm5.service and
glm5-tune.service, and waits on the night's state file."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from testkit import systemctl_stand_in as systemctl
from testkit.timing import scaled
from tests.tune.conftest import write_space, write_tune_config

# Up to two A B B A blocks a start: the cap's verdict at the first look or at the second
# (tests/tune/test_tune_end_to_end.py does the same; one block leaves it undecided on a
# loaded machine).
TUNE_OPTIONS = [
    "--length-ratio", "0.5", "--window", "1", "--settle", "0.5", "--min-repeats", "2",
    "--max-repeats", "4", "--max-trials", "3",
]  # fmt: skip
WORKLOAD = ["--concurrency", "32", "--input-len", "16", "--output-len", "16"]
NIGHT_WAIT_S = 600.0
# Written before each start of glm5.service (ExecStartPre=): the engine serves 4x slower
# while the configuration differs from the evening's copy.
SLOW_WHEN_CHANGED = """
import sys, pathlib
config, evening, mode = map(pathlib.Path, sys.argv[1:])
changed = evening.exists() and config.read_bytes() != evening.read_bytes()
mode.write_text("slow=4" if changed else "")
"""


def night_setup(request, tmp_path, monkeypatch, bench_python, tokenizer_dir,
                slow_when_changed=False):  # fmt: skip
    mode_file = tmp_path / "engine-mode"
    config = write_tune_config(tmp_path, bench_python, tokenizer_dir,
                               f"load=0.1,mode-file={mode_file}")  # fmt: skip
    data = yaml.safe_load(config.read_text())
    data["benchmark"].update(steady=True, window_s=1.0, warmup_max_s=3.0,
                             warmup_tolerance_pct=50.0)  # fmt: skip
    config.write_text(yaml.safe_dump(data))
    space = write_space(
        tmp_path, [{"key": "tuning.max_running_requests", "values": [8, 64], "restart": False}]
    )
    manager = tmp_path / "systemd"
    for unit in ("glm5.service", "glm5-tune.service"):  # whatever a failed test left running
        request.addfinalizer(lambda unit=unit: systemctl.kill(manager, unit))
    monkeypatch.setenv("PATH", f"{systemctl.install(manager)}:{Path(sys.executable).parent}:"
                               "/usr/bin:/bin")  # fmt: skip
    monkeypatch.setenv(systemctl.FOLDER_ENV, str(manager))
    glm5svc = [sys.executable, "-m", "glm5svc", "--config", str(config)]
    listen = data["service"]["listen_port"]
    results = Path(data["service"]["results_dir"])
    pre_start = None
    if slow_when_changed:
        hook = tmp_path / "slow_when_changed.py"
        hook.write_text(SLOW_WHEN_CHANGED)
        pre_start = [sys.executable, str(hook), str(config), str(tmp_path / "evening-copy"),
                     str(mode_file)]  # fmt: skip
        (tmp_path / "evening-copy").write_bytes(config.read_bytes())
    ready = f"http://127.0.0.1:{listen}/readyz"
    systemctl.define(manager, "glm5.service", [*glm5svc, "serve"], ready, pre_start)
    systemctl.define(manager, "glm5-tune.service", [*glm5svc, "night", "resume"])
    assert systemctl.start(manager, "glm5.service") == 0, (manager / "glm5.service.log").read_text()
    return config, space, manager, glm5svc, results


def begin(glm5svc, space):
    done = subprocess.run(
        [*glm5svc, "night", "begin", "--budget", "15m", "--windows", "3", *WORKLOAD, "--json",
         "--", "--space", str(space), *TUNE_OPTIONS],
        capture_output=True, text=True, timeout=scaled(120),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return Path(json.loads(done.stdout)["night_dir"])


def state_of(night: Path) -> dict:
    try:
        return json.loads((night / "night.json").read_text())
    except (FileNotFoundError, ValueError):
        return {}


def wait_for(what, condition, manager: Path, night: Path, wait_s: float = NIGHT_WAIT_S):
    deadline = time.monotonic() + scaled(wait_s)
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.5)
    log = (manager / "glm5-tune.service.log").read_text()[-4000:]
    pytest.fail(f"no {what} in {scaled(wait_s):.0f} s; state {state_of(night)}; night log {log}")


def tune_measuring(night: Path) -> bool:
    """The tune's first engine start is measuring (a window was written)."""
    return any((night / "tune" / "starts").glob("*/runs/*.json"))


def night_ended(night: Path) -> bool:
    return state_of(night).get("steps", {}).get("report", {}).get("status") == "done"
