"""`glm5svc night stop` in the middle of the tune: the tune stops (its trial drained,
glm5.service started again), the night reports `stopped`, and the evening's configuration
serves; nothing is left for a boot to continue."""

from __future__ import annotations

import subprocess

import pytest

from glm5svc.records import LastNight
from testkit import systemctl_stand_in as systemctl
from testkit.timing import scaled
from tests.night.night_box import (
    begin,
    night_setup,
    state_of,
    tune_measuring,
    wait_for,
)
from tests.tune.conftest import bench_python, tokenizer_dir

__all__ = ["bench_python", "tokenizer_dir"]  # the fixtures, shared with tests/tune
pytestmark = pytest.mark.long  # minutes of engines under load: scheduled first


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
