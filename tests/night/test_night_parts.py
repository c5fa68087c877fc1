"""The night's parts, without an engine: glm5-tune.service as `glm5svc unit --tune` renders
it (systemd-analyze verify), the state file a killed night continues from, and the night's
options (the morning/evening comparison: test_night_verdict.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from glm5svc.cli import main
from glm5svc.commands.night import DEFAULT_CONCURRENCY
from glm5svc.errors import ConfigError
from glm5svc.night.chain import hand_back
from glm5svc.night.measure import workload_args
from glm5svc.night.state import NightState, current_night, set_current
from glm5svc.tune.settings import WorkloadOptions
from glm5svc.unit_file import render_fallback_unit, render_tune_unit, render_unit
from tests.serve.test_unit_file import parse_unit, seconds

REPO = Path(__file__).resolve().parents[2]


def test_the_tune_unit_runs_the_night_while_one_is_in_progress():
    unit = parse_unit(render_tune_unit(results_dir=Path("/srv/results")))
    service = unit["Service"]
    assert service["ExecStart"] == (
        "/opt/glm5/venv/bin/glm5svc --config /etc/glm5/glm5.yaml night resume "
        "--current /srv/results/night-current"
    )
    assert unit["Unit"]["ConditionPathExists"] == "/srv/results/night-current"
    assert "glm5.service" in unit["Unit"]["After"]
    assert service["Restart"] == "on-failure" and service["KillMode"] == "mixed"
    # Once systemd gives up on it, the fallback; the spare copy of its state on a tmpfs.
    assert unit["Unit"]["OnFailure"] == "glm5-night-fallback.service"
    assert service["RuntimeDirectory"] == "glm5-night"
    assert service["RuntimeDirectoryPreserve"] == "yes"
    # The stop puts the evening's configuration back: a whole start of glm5.service.
    glm5 = parse_unit(render_unit())
    assert seconds(service["TimeoutStopSec"]) > seconds(glm5["Service"]["TimeoutStartSec"])
    assert unit["Install"]["WantedBy"] == "multi-user.target"
    role = (REPO / "roles" / "glm5_service" / "tasks" / "unit.yml").read_text()
    assert "- --tune" in role


def test_the_fallback_unit_needs_only_the_marker_and_the_evenings_copy():
    unit = parse_unit(render_fallback_unit(results_dir=Path("/srv/results")))
    service = unit["Service"]
    assert service["ExecStart"] == (
        "/opt/glm5/venv/bin/glm5svc --config /etc/glm5/glm5.yaml night fallback "
        "--current /srv/results/night-current"
    )
    assert service["Type"] == "oneshot" and service["User"] == "root"
    assert unit["Unit"]["ConditionPathExists"] == "/srv/results/night-current"
    assert "Install" not in unit, "only the night's OnFailure= starts it"
    glm5 = parse_unit(render_unit())
    assert seconds(service["TimeoutStartSec"]) > seconds(glm5["Service"]["TimeoutStartSec"])
    # The role installs it from the same source as the others: `glm5svc unit --fallback`.
    role = (REPO / "roles" / "glm5_service" / "tasks" / "unit.yml").read_text()
    assert "- --fallback" in role and "glm5_service_fallback_unit" in role


@pytest.mark.parametrize("render", [render_tune_unit, render_fallback_unit])
def test_systemd_analyze_verifies_the_night_units(tmp_path, render):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    program = Path(sys.executable).parent / "glm5svc"  # verify wants ExecStart's program
    name = "glm5-tune.service" if render is render_tune_unit else "glm5-night-fallback.service"
    unit = tmp_path / name
    unit.write_text(render(program.parent.parent))
    if render is render_tune_unit:  # OnFailure= names it: verify looks for it beside
        (tmp_path / "glm5-night-fallback.service").write_text(
            render_fallback_unit(program.parent.parent)
        )
    result = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True,
                            timeout=60)  # fmt: skip
    problems = [line for line in result.stderr.splitlines() if name in line]
    assert result.returncode == 0 and not problems, result.stderr


def test_unit_tune_prints_it(tmp_path, capsys):
    config = tmp_path / "glm5.yaml"
    config.write_text(f"service: {{results_dir: {tmp_path}/results}}\n")
    assert main(["--config", str(config), "unit", "--tune", "--venv", "/srv/venv"]) == 0
    text = capsys.readouterr().out
    assert f"ConditionPathExists={tmp_path}/results/night-current" in text
    assert f"ExecStart=/srv/venv/bin/glm5svc --config {config} night resume --current" in text
    assert main(["--config", str(config), "unit", "--fallback", "--venv", "/srv/venv"]) == 0
    text = capsys.readouterr().out
    assert f"ExecStart=/srv/venv/bin/glm5svc --config {config} night fallback --current" in text


def test_a_step_cut_mid_way_runs_again_and_the_state_survives_a_reload(tmp_path):
    state = NightState(tmp_path, "/etc/glm5/glm5.yaml", "2026-12-04T20:00:00.000+00:00",
                       "2026-12-05T04:00:00+00:00", 28800.0, {"concurrency": 8}, 3, [])  # fmt: skip
    state.begin_step("tune")  # the night is killed here
    again = NightState.load(tmp_path)
    assert again.status_of("tune") == "running"
    again.begin_step("tune")
    again.end_step("tune", "done", "tune: nothing confirmed", apply=False)
    final = NightState.load(tmp_path)
    assert final.step("tune")["attempts"] == 2 and final.data("tune") == {"apply": False}
    assert any("continued after an interruption" in e["text"] for e in final.events)
    assert not list(tmp_path.glob("*.tmp*")), "written atomically"
    set_current(tmp_path, tmp_path)
    assert current_night(tmp_path) == tmp_path
    set_current(tmp_path, None)
    assert current_night(tmp_path) is None
    (tmp_path / "night.json").write_text("{}")
    with pytest.raises(ConfigError, match="not a night's state"):
        NightState.load(tmp_path)


def test_the_night_and_the_tune_measure_the_same_workload():
    assert DEFAULT_CONCURRENCY == WorkloadOptions.model_fields["concurrency"].default
    workload = {"concurrency": 32, "input_len": 16, "output_len": 8, "request_file": None}
    assert workload_args(workload, tune=True) == [
        "--concurrency", "32", "--input-len", "16", "--output-len", "8"]  # fmt: skip
    assert workload_args(workload, tune=False)[:2] == ["--ladder", "32"]
    recorded = {**workload, "request_file": "/w.jsonl"}
    assert workload_args(recorded, tune=False) == ["--ladder", "32", "--request-file", "/w.jsonl"]


def test_options_the_night_sets_itself_are_refused(tmp_path, capsys):
    config = tmp_path / "glm5.yaml"
    config.write_text(f"service: {{results_dir: {tmp_path}/results}}\n")
    argv = ["--config", str(config), "night", "plan", "--", "--budget", "2h"]
    assert main(argv) == 78
    assert "--budget after `--`: the night sets these itself" in capsys.readouterr().err
    assert main(["--config", str(config), "night", "plan", "--windows", "1"]) == 2


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's owner needs root")
def test_the_trials_caches_go_back_to_the_cache_folders_owner(tmp_path):
    cache = tmp_path / "cache"
    (cache / "flashinfer").mkdir(parents=True)
    written = cache / "flashinfer" / "kernel.so"
    written.write_text("compiled by a trial, as root")
    os.chown(cache, 65534, 65534)  # the service's user owns the folder
    hand_back(cache)
    assert (written.stat().st_uid, written.stat().st_gid) == (65534, 65534)
    assert (cache / "flashinfer").stat().st_uid == 65534
