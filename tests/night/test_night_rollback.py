"""A night whose tuned configuration serves slower (the test engine made 4x slower by it)
rolls back: glm5.service serves the evening's configuration, byte for byte; the box going
down in the middle of the tune (every process killed, then glm5.service and the night
started as at boot) changes nothing of that."""

from __future__ import annotations

import json

import pytest

from glm5svc.night.compare import NOT_WITHIN
from glm5svc.records import LastNight
from testkit import systemctl_stand_in as systemctl
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
    assert state["steps"]["tune"]["data"]["confirmed"] is True, state["headline"]
    assert state["outcome"] == "rolled_back", state["headline"]
    # Worse beyond the noise, or at least not shown within the margin: either rolls back.
    verdict = state["steps"]["compare"]["data"]
    assert verdict["rollback"] is True and verdict["verdict"] in ("worse", NOT_WITHIN), verdict
    assert state["steps"]["rollback"]["data"] == {"restored": True, "serving": True}
    assert config.read_bytes() == evening  # the evening's configuration, byte for byte
    assert systemctl.unit_pid(manager, "glm5.service")
    assert (tmp_path / "engine-mode").read_text() == ""  # started on the evening's: not slow
    report = json.loads((night / "report.json").read_text())
    assert report["morning"]["high"] < report["evening"]["low"]
    assert "rollback:" in (night / "report.md").read_text()
    assert LastNight.read(results).night_outcome == "rolled_back"
    systemctl.stop(manager, "glm5.service")
