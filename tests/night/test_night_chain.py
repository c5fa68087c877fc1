"""The whole night on the test engine, with a stand-in service manager of real processes
(testkit/systemctl_stand_in.py) for glm5.service and glm5-tune.service: baseline, a short
tune, the confirmed overlay applied, the restart, the morning's bench, the comparison and
the report. Its faults: the night's unit SIGKILLed in the middle of the tune (systemd
starts it again), and the whole box going down in the middle of the tune (every process
killed, then glm5.service and the night started as at boot); in both the night continues
from its state file, the tune with `--resume`, and ends with glm5.service serving. With the
engine made slower by the tuned configuration, the night rolls back: glm5.service serves
the evening's configuration, byte for byte."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from glm5svc.records import LastNight
from testkit import systemctl_stand_in as systemctl
from testkit.timing import scaled
from tests.tune.conftest import bench_python, tokenizer_dir, write_space, write_tune_config

__all__ = ["bench_python", "tokenizer_dir"]  # the fixtures, shared with tests/tune
pytestmark = pytest.mark.long  # minutes of engines under load: scheduled first

TUNE_OPTIONS = [
    "--length-ratio", "0.5", "--window", "1", "--settle", "0.5", "--min-repeats", "2",
    "--max-repeats", "2", "--max-trials", "3",
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


def test_a_night_tuned_through_a_kill_of_its_unit(request, tmp_path, monkeypatch, bench_python,
                                                  tokenizer_dir):  # fmt: skip
    config, space, manager, glm5svc, results = night_setup(
        request, tmp_path, monkeypatch, bench_python, tokenizer_dir
    )
    evening = config.read_bytes()
    night = begin(glm5svc, space)
    assert (results / "night-current").read_text().strip() == str(night)
    wait_for("tune measuring", lambda: tune_measuring(night), manager, night)
    systemctl.kill(manager, "glm5-tune.service")  # SIGKILL to the unit's processes
    assert state_of(night)["steps"]["tune"]["status"] == "running"
    # Restart=on-failure: systemd starts the unit again.
    assert systemctl.start(manager, "glm5-tune.service", block=False) == 0
    wait_for("the night's end", lambda: night_ended(night), manager, night)

    state = state_of(night)
    tune = state["steps"]["tune"]
    assert tune["attempts"] == 2 and tune["data"]["resumed"], tune
    assert state["outcome"] in ("tuned", "unchanged"), state["headline"]
    if state["outcome"] == "tuned":
        assert state["steps"]["compare"]["data"]["verdict"] != "worse"
        assert config.read_bytes() != evening  # the overlay serves
        assert "max_running_requests: 64" in config.read_text()
    else:
        assert config.read_bytes() == evening
    assert systemctl.unit_pid(manager, "glm5.service"), "glm5.service serves"
    assert not (results / "night-current").exists()  # the unit's condition: nothing at boot
    report = json.loads((night / "report.json").read_text())
    assert report["evening"]["low"] <= report["evening"]["mean"] <= report["evening"]["high"]
    assert report["dropped"] == [] and report["tune"]["confirmed"] is not None
    markdown = (night / "report.md").read_text()
    assert f"# The night of {state['began_at'][:10]}: {state['outcome']}" in markdown
    last = LastNight.read(results)
    assert last.night_outcome == state["outcome"] and last.night_dir == str(night)
    status = subprocess.run([*glm5svc, "status"], capture_output=True, text=True,
                            timeout=scaled(60))  # fmt: skip
    assert f"last night: {state['outcome']}" in status.stdout, status.stdout
    systemctl.stop(manager, "glm5.service")


def test_a_slower_morning_rolls_back_after_a_reboot_mid_tune(
    request, tmp_path, monkeypatch, bench_python,
                                                             tokenizer_dir):  # fmt: skip
    config, space, manager, glm5svc, results = night_setup(
        request, tmp_path, monkeypatch, bench_python, tokenizer_dir, slow_when_changed=True
    )
    evening = config.read_bytes()
    night = begin(glm5svc, space)
    wait_for("tune measuring", lambda: tune_measuring(night), manager, night)
    # The box goes down: every process of both units, at once.
    systemctl.kill(manager, "glm5-tune.service")
    systemctl.kill(manager, "glm5.service")
    # The boot: glm5.service (enabled), then glm5-tune.service (After=glm5.service,
    # ConditionPathExists= the night in progress).
    assert systemctl.start(manager, "glm5.service") == 0
    assert (results / "night-current").exists()
    assert systemctl.start(manager, "glm5-tune.service", block=False) == 0
    wait_for("the night's end", lambda: night_ended(night), manager, night)

    state = state_of(night)
    assert state["steps"]["tune"]["data"]["resumed"]
    if state["steps"]["tune"]["data"]["confirmed"] is not True:
        pytest.skip(f"the tune confirmed nothing here: {state['headline']}")
    assert state["outcome"] == "rolled_back", state["headline"]
    assert state["steps"]["compare"]["data"]["verdict"] == "worse"
    assert state["steps"]["rollback"]["data"] == {"restored": True, "serving": True}
    assert config.read_bytes() == evening  # the evening's configuration, byte for byte
    assert systemctl.unit_pid(manager, "glm5.service")
    assert (tmp_path / "engine-mode").read_text() == ""  # started on the evening's: not slow
    report = json.loads((night / "report.json").read_text())
    assert report["morning"]["high"] < report["evening"]["low"]
    assert "rollback:" in (night / "report.md").read_text()
    assert LastNight.read(results).night_outcome == "rolled_back"
    systemctl.stop(manager, "glm5.service")


def test_a_night_stopped_mid_tune_leaves_the_evening_serving(
    request, tmp_path, monkeypatch, bench_python, tokenizer_dir
):
    config, space, manager, glm5svc, results = night_setup(
        request, tmp_path, monkeypatch, bench_python, tokenizer_dir
    )
    evening = config.read_bytes()
    night = begin(glm5svc, space)
    wait_for("tune measuring", lambda: tune_measuring(night), manager, night)
    assert not systemctl.unit_pid(manager, "glm5.service"), "the tune took the GPUs"
    # `glm5svc night stop` is `systemctl stop glm5-tune`: SIGTERM, and the wait for its end.
    stopped = subprocess.run([*glm5svc, "night", "stop"], capture_output=True, text=True,
                             timeout=scaled(300))  # fmt: skip
    assert stopped.returncode == 0, stopped.stderr
    state = state_of(night)
    assert state["outcome"] == "stopped", state
    assert state["steps"]["tune"]["status"] == "stopped"
    assert state["steps"]["report"]["status"] == "done"
    assert config.read_bytes() == evening
    assert systemctl.unit_pid(manager, "glm5.service"), "the evening's glm5.service serves"
    assert not (results / "night-current").exists()  # systemd does not start it again
    assert LastNight.read(results).night_outcome == "stopped"
    systemctl.stop(manager, "glm5.service")
