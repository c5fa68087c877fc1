"""glm5svc.records: each record read back as written; a wrong shape refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from glm5svc.records import (
    LAST_RUN_FILE,
    BenchmarkLevel,
    BenchmarkStatus,
    Diagnosis,
    DrainReport,
    LastRun,
    ProbeStatus,
    RecordError,
    StatusDocument,
)

DRAIN = DrainReport("SIGTERM", 4.2, 30.0, 64, 72, 0, False, "drained", 0)
DIAGNOSIS = Diagnosis("engine-oom", "out of GPU memory", "the pool", "lower it", "CUDA OOM")
LAST = LastRun("2026-12-01T17:45:30.123+00:00", 0, "stopped by SIGTERM: drained", (), 0, DRAIN, 123)


def test_a_last_run_reads_back_as_written_with_its_schema():
    text = LAST.to_json()
    assert json.loads(text)["schema"] == "glm5svc.last-run/1"
    assert LastRun.from_json(text) == LAST


def test_the_status_document_reads_back_and_keeps_every_key_it_had():
    document = StatusDocument(
        ready=True,
        phase="serving",
        drain=DRAIN,
        previous_run=LAST,
        probes=ProbeStatus(3, 1, 0, 0.5, engine_counters={"sglang:num_running_reqs": 2.0}),
        diagnosis=(DIAGNOSIS,),
        benchmark=BenchmarkStatus(levels=(BenchmarkLevel(8, 80, 80, total_tok_s=700.0),)),
    )
    data = json.loads(document.to_json())
    assert StatusDocument.from_dict(data) == document
    # The keys /status had before it named its schema: the document stays compatible.
    before = """service version phase status ready ready_reason draining wedged unresponsive
        stopped_pids drain degraded pid engine_pid engine_exit_status started_at uptime_s
        engine_uptime_s startup_seconds load_percent kv_pool_tokens engine_starts
        restarts_seen previous_run probes diagnosis last_error launch_plan plan_warnings
        benchmark benchmark_running""".split()
    assert sorted(data) == sorted(["schema", *before])
    assert data["schema"] == "glm5svc.status/1"


def test_a_document_from_before_the_schema_key_is_read():
    record = {"ended_at": 1764611130.5, "exit_status": 3, "message": "gone", "diagnosis": []}
    assert LastRun.from_json(json.dumps(record)).exit_status == 3


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ({"exit_status": 0, "message": "m"}, "LastRun: 'ended_at' is missing"),
        ({"ended_at": "t", "exit_status": "0", "message": "m"}, "LastRun.exit_status is '0'"),
        ({"ended_at": "t", "exit_status": True, "message": "m"}, "expected a int"),
        (
            {"ended_at": "t", "exit_status": 0, "message": "m", "drain": {"signal": "SIGTERM"}},
            "LastRun.drain: 'seconds' is missing",
        ),
        (
            {"ended_at": "t", "exit_status": 0, "message": "m", "diagnosis": [{"id": 1}]},
            "LastRun.diagnosis[0].id is 1",
        ),
        ({"schema": "glm5svc.status/1", "ended_at": "t"}, "expected glm5svc.last-run/1"),
        ({"schema": "glm5svc.last-run/2"}, "newer than this glm5svc reads"),
        ([1, 2], "LastRun is a list, not an object"),
    ],
)
def test_a_wrong_shape_is_refused_naming_the_field(data, said):
    with pytest.raises(RecordError, match=None) as caught:
        LastRun.from_json(json.dumps(data))
    assert said in str(caught.value)


def test_the_last_run_file_names_itself_and_the_fix_when_it_is_not_a_record(tmp_path):
    assert LastRun.read(tmp_path) is None
    (tmp_path / LAST_RUN_FILE).write_text("{not json")
    with pytest.raises(RecordError) as caught:
        LastRun.read(tmp_path)
    assert str(tmp_path / LAST_RUN_FILE) in str(caught.value)
    assert "remove it" in str(caught.value)


def test_failed_runs_count_on_from_the_previous_record():
    failed = LastRun.following(LAST, ended_at="t", exit_status=3, message="gone")
    again = LastRun.following(failed, ended_at="t", exit_status=3, message="gone")
    assert (failed.failed_runs_in_a_row, again.failed_runs_in_a_row) == (1, 2)
    assert (
        LastRun.following(again, ended_at="t", exit_status=0, message="ok").failed_runs_in_a_row
        == 0
    )


@pytest.mark.parametrize(
    "recorded",
    sorted(
        (Path(__file__).parents[1] / "fixtures" / "real_engine").glob("*/status-under-load.json")
    ),
    ids=lambda path: path.parent.name,
)
def test_a_status_recorded_on_the_h200_is_read(recorded):
    """/status as a service before this schema key served it, on the real hardware."""
    data = json.loads(recorded.read_text())
    document = StatusDocument.from_dict(data)
    assert document.ready is data["ready"] and document.phase == data["phase"]
    assert document.launch_plan is not None and document.launch_plan.flag_value("--port")
