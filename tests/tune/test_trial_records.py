"""A trial reads serve's last-run record through glm5svc.records: its message and each
diagnosis' fix, or why the record could not be read."""

from __future__ import annotations

from glm5svc.config import Config
from glm5svc.records import LAST_RUN_FILE, Diagnosis, LastRun
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
