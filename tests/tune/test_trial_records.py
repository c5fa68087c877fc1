"""A trial reads serve's last-run record through glm5svc.records: its message and each
diagnosis' fix, or why the record could not be read; a trial's record reads back, of the
old method or the new."""

from __future__ import annotations

import json
from pathlib import Path

from glm5svc.config import Config
from glm5svc.records import LAST_RUN_FILE, Diagnosis, LastRun
from glm5svc.tune.evidence import TrialRecord
from glm5svc.tune.trial import _serve_diagnosis


def config_in(tmp_path) -> Config:
    return Config.model_validate({"service": {"results_dir": str(tmp_path)}})


def test_a_failed_start_gives_its_message_and_each_fix(tmp_path):
    oom = Diagnosis("engine-oom", "out of GPU memory", "the pool", "lower the fraction", "OOM")
    record = LastRun("2026-12-02T00:00:00.000+00:00", 3, "the server exited", (oom,))
    (tmp_path / LAST_RUN_FILE).write_text(record.to_json())
    assert _serve_diagnosis(config_in(tmp_path)) == [
        "the server exited",
        "out of GPU memory: lower the fraction",
    ]


def test_no_record_is_no_diagnosis_and_a_broken_one_says_so(tmp_path):
    assert _serve_diagnosis(config_in(tmp_path)) == []
    (tmp_path / LAST_RUN_FILE).write_text('{"exit_status": "3"}')
    [line] = _serve_diagnosis(config_in(tmp_path))
    assert str(tmp_path / LAST_RUN_FILE) in line and "'ended_at' is missing" in line


RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "real_engine"


def recorded_trial(tune: str, number: int) -> TrialRecord:
    path = RECORDED / tune / "tune-run" / "trials" / f"{number:03d}.json"
    return TrialRecord.from_json(json.loads(path.read_text()))


def test_a_trial_record_of_either_method_reads_its_windows():
    """Records of the old method (one bench_serving run a window, `warmup` in the outcome)
    and of the continuous load (counter windows with their cached share) both read."""
    old = recorded_trial("sglang-0.5.11-h200-tune-before", 0)
    assert old.runs and all(r.cached_share is None and r.throughput > 0 for r in old.runs)
    new = recorded_trial("sglang-0.5.11-h200-tune-vs-peer/tune-defaults", 1)
    assert new.runs and {r.round for r in new.runs} == set(range(len(new.runs)))
    for run in new.runs:
        assert run.cached_share is not None and run.cached_share <= 0.01
        assert run.name.startswith(f"r{run.round + 1:02d}-v{run.live_value}")
    assert new.outcome["warmup_windows"] and new.outcome["load"]["completed"] > 0
