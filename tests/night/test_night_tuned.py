"""The whole night on the test engine: baseline, a short tune, the confirmed overlay applied,
the restart, the morning's bench, the comparison and the report; the night's unit SIGKILLed
in the middle of the tune (systemd starts it again) continues from its state file, the tune
with `--resume`."""

from __future__ import annotations

import json
import subprocess

import pytest

from glm5svc.records import LastNight
from testkit import systemctl_stand_in as systemctl
from testkit.timing import scaled
from tests.night.night_box import (
    begin,
    night_ended,
    night_setup,
    state_of,
    tune_measuring,
    wait_for,
)
from tests.tune.conftest import bench_python, tokenizer_dir

__all__ = ["bench_python", "tokenizer_dir"]  # the fixtures, shared with tests/tune
pytestmark = pytest.mark.long  # minutes of engines under load: scheduled first


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
    assert state["outcome"] == "tuned", state["headline"]
    assert state["steps"]["compare"]["data"]["verdict"] != "worse"
    assert config.read_bytes() != evening  # the overlay serves
    assert "max_running_requests: 64" in config.read_text()
    assert systemctl.unit_pid(manager, "glm5.service"), "glm5.service serves"
    assert not (results / "night-current").exists()  # the unit's condition: nothing at boot
    report = json.loads((night / "report.json").read_text())
    assert report["evening"]["low"] <= report["evening"]["mean"] <= report["evening"]["high"]
    assert report["dropped"] == [] and report["tune"]["confirmed"] is True
    assert report["changed"] == {"tuning": {"max_running_requests": 64}}
    assert report["morning"]["windows"] and report["comparison"]["ratio"]["mean"] > 1
    markdown = (night / "report.md").read_text()
    assert f"# The night of {state['began_at'][:10]}: {state['outcome']}" in markdown
    last = LastNight.read(results)
    assert last.night_outcome == state["outcome"] and last.night_dir == str(night)
    status = subprocess.run([*glm5svc, "status"], capture_output=True, text=True,
                            timeout=scaled(60))  # fmt: skip
    assert f"last night: {state['outcome']}" in status.stdout, status.stdout
    systemctl.stop(manager, "glm5.service")
