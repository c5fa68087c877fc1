"""The night's faults, each from a prepared state (tests/night/night_box.py, FaultBox): the
test engine served by `glm5svc serve` under the stand-in systemctl, the real `tune apply`,
restarts and rollback; each ends with what serves looked at (the sha256 of the file the
serving glm5.service started on, from its /status) and the report and `glm5svc status`
saying the same."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from glm5svc.night.state import NightState
from glm5svc.records import LastNight
from testkit import systemctl_stand_in as systemctl
from testkit.timing import scaled
from tests.night.night_box import FaultBox, sha

pytestmark = pytest.mark.long  # an engine started a few times per test: scheduled early


def report_of(state) -> str:
    return (state.night_dir / "report.md").read_text()


def test_killed_between_the_overlays_write_and_the_restart_the_rerun_restarts_and_measures_it(
    request, tmp_path, monkeypatch
):
    box = FaultBox(request, tmp_path, monkeypatch)
    state = box.night_at_apply()
    # The night is killed inside `tune apply`, the overlay written, glm5.service not
    # restarted: the apply step is running, its intent recorded, the evening's process serves.
    state.begin_step("apply")
    state.intend("apply", "run `tune apply`")
    apply = [*box.glm5svc, "tune", "apply", str(state.tune_dir), "--no-restart", "--json"]
    done = subprocess.run(apply, capture_output=True, text=True, timeout=scaled(120))
    assert done.returncode == 0, done.stderr
    overlay = box.config.read_bytes()
    assert overlay != box.evening and box.serving_sha() == sha(box.evening)
    rerun = NightState.load(state.night_dir)
    night, outcome = box.run(rerun, monkeypatch)

    assert rerun.step("apply")["attempts"] == 2, rerun.steps
    assert box.measured == [sha(overlay)], (rerun.headline, rerun.steps)
    assert outcome == "tuned", rerun.headline
    assert box.serving_sha() == sha(overlay)
    assert "restart glm5.service" in " ".join(rerun.step("apply")["done"])
    assert "- now: glm5.service serves the tuned configuration" in report_of(rerun)
    assert LastNight.read(box.results).night_outcome == "tuned"


def refuse_writes_under(folder, monkeypatch):
    """Every atomic write under `folder` fails as on a read-only file system."""
    import errno
    import tempfile

    from glm5svc import atomic_file

    real = tempfile.mkstemp

    def mkstemp(*args, dir=None, **kwargs):
        if dir is not None and str(dir).startswith(str(folder)):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(dir))
        return real(*args, dir=dir, **kwargs)

    monkeypatch.setattr(atomic_file.tempfile, "mkstemp", mkstemp)


def test_a_read_only_night_folder_in_the_morning_still_rolls_back_and_records_it_later(
    request, tmp_path, monkeypatch, capfd
):
    box = FaultBox(request, tmp_path, monkeypatch)
    state = box.night_at_apply()
    with monkeypatch.context() as fault:
        box.before_measuring = lambda: refuse_writes_under(state.night_dir, fault)
        night, outcome = box.run(state, monkeypatch)
        assert not night.recorded
    said = capfd.readouterr().err
    # The rollback happened all the same: the evening's configuration serves.
    assert outcome == "failed" and "morning failed" in state.headline, state.headline
    assert box.config.read_bytes() == box.evening
    assert box.serving_sha() == sha(box.evening)
    assert "Read-only file system" in said and "# The night of 2026-12-07: failed" in said
    assert not (state.night_dir / "report.md").exists()
    spare = tmp_path / "run-glm5-night" / f"{state.night_dir.name}.night.json"
    assert json.loads(spare.read_text())["outcome"] == "failed"
    assert (box.results / "night-current").exists(), "the unit runs again to record it"
    # The disk allows again: the unit's next run writes what the spare copy kept.
    again = NightState.load(state.night_dir)
    assert again.outcome == "failed" and again.status_of("rollback") == "done"
    night, outcome = box.run(again, monkeypatch)
    assert night.recorded and outcome == "failed"
    assert "- now: glm5.service serves the evening's configuration" in report_of(again)
    assert not (box.results / "night-current").exists()
    assert LastNight.read(box.results).night_outcome == "failed"


def test_a_rollback_that_cannot_start_glm5_is_reported_failed_and_status_still_says_so(
    request, tmp_path, monkeypatch
):
    box = FaultBox(request, tmp_path, monkeypatch)
    state = box.night_at_apply()
    box.before_measuring = lambda: box.fail_flag.touch()  # every start fails from now on
    night, outcome = box.run(state, monkeypatch, slower_when_tuned=True)

    assert state.steps["compare"]["data"]["verdict"] == "worse"
    assert outcome == "failed" and "the rollback failed" in state.headline, state.headline
    assert state.status_of("rollback") == "failed"
    assert box.config.read_bytes() == box.evening  # the evening's file is back at least
    assert box.serving_sha() is None
    report = report_of(state)
    assert "serves the evening's configuration" not in report
    assert "- now: glm5.service does not serve" in report
    status = box.status()
    assert status.returncode == 3, status.stderr
    assert "last night: failed" in status.stdout and "the rollback failed" in status.stdout
    answer = subprocess.run([*box.glm5svc, "status", "--json"], capture_output=True, text=True,
                            timeout=scaled(60))  # fmt: skip
    assert answer.returncode == 3
    assert json.loads(answer.stdout)["last_night"]["night_outcome"] == "failed"
    textfile = (tmp_path / "textfiles" / "glm5svc-night.prom").read_text()
    assert 'glm5svc_night_outcome{outcome="failed"} 1.0' in textfile
    assert "glm5svc_night_in_progress 0.0" in textfile


def test_an_unreadable_state_with_glm5_down_is_ended_by_resume_and_a_new_begin_may_follow(
    request, tmp_path, monkeypatch
):
    box = FaultBox(request, tmp_path, monkeypatch)
    state = box.night_at_apply(tuned=False)
    state.begin_step("tune")  # killed mid-tune: the tune had stopped glm5.service
    systemctl.stop(box.manager, "glm5.service")
    text = state.path.read_text()
    state.path.write_text(text[: len(text) // 2])  # truncated
    current = box.results / "night-current"
    done = subprocess.run([*box.glm5svc, "night", "resume", "--current", str(current)],
                          capture_output=True, text=True, timeout=scaled(120))  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert box.serving_sha() == sha(box.evening)
    last = LastNight.read(box.results)
    assert last.night_outcome == "failed" and "state cannot be read" in last.night_headline
    assert not current.exists()
    status = box.status()
    assert "last night: failed" in status.stdout and "state cannot be read" in status.stdout
    # A new night may begin, and says how the last one ended.
    systemctl.define(box.manager, "glm5-tune.service", [sys.executable, "-c", "pass"])
    begun = subprocess.run([*box.glm5svc, "night", "begin"], capture_output=True, text=True,
                           timeout=scaled(120))  # fmt: skip
    assert begun.returncode == 0, begun.stdout + begun.stderr
    assert "the last night" in begun.stdout and "state cannot be read" in begun.stdout
    assert current.exists() and Path(current.read_text().strip()) != state.night_dir


def test_killed_between_the_rollbacks_write_and_its_restart_the_rerun_restarts(
    request, tmp_path, monkeypatch
):
    from glm5svc.night.chain import Night
    from glm5svc.night.measure import Benches

    box = FaultBox(request, tmp_path, monkeypatch)
    state = box.night_at_apply()
    night, _ = box.run(state, monkeypatch, slower_when_tuned=True)
    assert state.outcome == "rolled_back"
    # Back to the moment the evening's file was written and glm5.service not yet restarted.
    crashed = NightState.load(state.night_dir)
    crashed.steps["rollback"] = {"status": "running", "intent": {"action": "restart"}}
    crashed.steps.pop("report")
    subprocess.run([*box.glm5svc, "tune", "apply", str(state.tune_dir)], check=True,
                   capture_output=True, timeout=scaled(120))  # fmt: skip
    assert box.serving_sha() == sha(box.config.read_bytes()) != sha(box.evening)
    # The tuned process serves, the file...
    box.config.write_bytes(box.evening)  # ...is the evening's again
    monkeypatch.setattr(Benches, "bench", box.measure())
    again = Night(crashed, box.loaded(), threading.Event(), log=lambda _: None)
    assert again.run() == "rolled_back"
    assert box.serving_sha() == sha(box.evening)
    assert crashed.step("rollback")["attempts"] == 2
    assert "- now: glm5.service serves the evening's configuration" in report_of(crashed)


def test_a_broken_configuration_is_put_aside_and_the_evenings_serves_again(
    request, tmp_path, monkeypatch
):
    box = FaultBox(request, tmp_path, monkeypatch)
    state = box.night_at_apply(tuned=False)
    state.begin_step("tune")
    systemctl.stop(box.manager, "glm5.service")
    box.config.write_text(box.config.read_text() + "not: [a, valid\n")  # an edit gone wrong
    broken = box.config.read_bytes()
    current = box.results / "night-current"
    done = subprocess.run([*box.glm5svc, "night", "resume", "--current", str(current)],
                          capture_output=True, text=True, timeout=scaled(120))  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert box.config.read_bytes() == box.evening
    assert box.serving_sha() == sha(box.evening)
    (aside,) = tmp_path.glob("glm5.yaml.night-fallback-*")
    assert aside.read_bytes() == broken, "the edit is kept"
    again = NightState.load(state.night_dir)
    assert again.outcome == "failed" and "does not load" in again.headline
    assert str(aside) in again.headline
    assert "- now: glm5.service serves the evening's configuration" in report_of(again)


def test_the_fallback_unit_needs_nothing_the_night_wrote(request, tmp_path, monkeypatch):
    """systemd gave up on the night's unit (OnFailure=): unreadable state, a configuration
    that does not load, glm5.service down; `night fallback` brings the evening back."""
    box = FaultBox(request, tmp_path, monkeypatch)
    state = box.night_at_apply()
    state.path.write_text("{")
    systemctl.stop(box.manager, "glm5.service")
    box.config.write_text("server: [\n")
    current = box.results / "night-current"
    done = subprocess.run([*box.glm5svc, "night", "fallback", "--current", str(current)],
                          capture_output=True, text=True, timeout=scaled(120))  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "systemd gave up on the night" in done.stdout
    assert box.config.read_bytes() == box.evening
    assert box.serving_sha() == sha(box.evening)
    assert LastNight.read(box.results).night_outcome == "failed"
    assert not current.exists()


def test_an_edit_during_the_night_is_drift_and_stays(request, tmp_path, monkeypatch):
    box = FaultBox(request, tmp_path, monkeypatch)
    state = box.night_at_apply()
    edited = box.config.read_text().replace("drain_timeout_s: 5", "drain_timeout_s: 6")
    box.config.write_text(edited)  # the operator's, between the tune and the apply
    night, outcome = box.run(state, monkeypatch)
    assert outcome == "unchanged" and "changed during the night" in state.headline
    assert box.config.read_text() == edited
    assert box.serving_sha() == sha(box.evening), "nothing restarted"
    assert box.measured == []


def test_an_edit_during_the_morning_is_not_rolled_back(request, tmp_path, monkeypatch):
    box = FaultBox(request, tmp_path, monkeypatch)
    state = box.night_at_apply()
    edited = []

    def edit():
        text = box.config.read_text().replace("drain_timeout_s: 5", "drain_timeout_s: 6")
        box.config.write_text(text)
        edited.append(text)

    box.before_measuring = edit
    night, outcome = box.run(state, monkeypatch, slower_when_tuned=True)
    assert state.steps["compare"]["data"]["verdict"] == "worse"
    assert outcome == "unchanged" and "changed during the night" in state.headline
    assert state.steps["rollback"]["data"]["restored"] is False
    assert box.config.read_text() == edited[0]  # not discarded
    assert box.serving_sha() == sha(edited[0].encode())  # and serving


def test_a_stop_when_glm5_does_not_start_after_the_tune_is_a_stop(request, tmp_path, monkeypatch):
    from glm5svc.night import chain
    from glm5svc.night.children import Stopped

    box = FaultBox(request, tmp_path, monkeypatch, fail_starts="once")
    state = box.night_at_apply(tuned=False)
    systemctl.stop(box.manager, "glm5.service")  # the tune took it over
    stop = threading.Event()

    def stopped_tune(argv, name, folder, stop_event):
        box.fail_flag.touch()  # its first start after the tune fails
        stop.set()
        raise Stopped(f"{name} stopped (exit status {128 + signal.SIGTERM})")

    monkeypatch.setattr(chain, "run_child", stopped_tune)
    night, outcome = box.run(state, monkeypatch, stop=stop)
    assert outcome == "stopped", state.headline
    assert "stopped by the operator during tune" in state.headline
    assert "glm5.service did not start after the tune" in state.headline
    assert box.serving_sha() == sha(box.evening)  # the rollback started it
    assert "- now: glm5.service serves the evening's configuration" in report_of(state)
