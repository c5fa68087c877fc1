"""`glm5svc tune run` for real against the test engine's performance model: the optimum
found and confirmed, a crashing candidate recorded with serve's diagnosis and skipped, the
continuous load and its counter windows, the outputs, `tune apply` (and its refusal of a
best that failed its confirming start), and safety (a serving unit is not taken without
--take-over; SIGTERM restores it and leaves no process)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from glm5svc.bench.seconds import FIELDS, SECONDS_FILE, read_seconds
from glm5svc.tune.evidence import TrialRecord
from glm5svc.tune.outputs import write_outputs
from glm5svc.tune.settings import SearchSettings
from glm5svc.tune.trial import RunFigures
from tests.tune.conftest import write_space, write_tune_config

pytestmark = pytest.mark.long  # minutes of engines under load: scheduled first

# One continuous load per engine start: windows of a second, half a second left out after
# each change of the live cap, two rounds (one A B B A block) unless a test needs more.
WORKLOAD = [
    "--concurrency", "32", "--input-len", "16", "--output-len", "16", "--length-ratio", "0.5",
    "--window", "1", "--settle", "0.5", "--min-repeats", "2", "--max-repeats", "2",
]  # fmt: skip
# The configuration's windows, sized for the test engine: the warm-up (until two windows
# agree) bounded at 3 s, a loose tolerance (this machine's load moves windows).
SHORT_WINDOWS = {"window_s": 1.0, "warmup_max_s": 3.0, "warmup_tolerance_pct": 50.0}


def short_windows(config: Path) -> Path:
    """The configuration's benchmark windows sized for the test engine (SHORT_WINDOWS)."""
    data = yaml.safe_load(config.read_text())
    data["benchmark"].update(SHORT_WINDOWS)
    config.write_text(yaml.safe_dump(data))
    return config


def tune_config(tmp_path: Path, bench_python: str, tokenizer_dir: Path, mode: str) -> Path:
    return short_windows(write_tune_config(tmp_path, bench_python, tokenizer_dir, mode))


def glm5svc(config: Path, *args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "glm5svc", "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=kwargs.pop("timeout", 280),
        **kwargs,
    )


def test_tune_finds_the_engines_optimum_and_records_a_crash(tmp_path, bench_python, tokenizer_dir):
    config = tune_config(tmp_path, bench_python, tokenizer_dir, "load=0.1,oom-above=0.9")
    space = write_space(
        tmp_path,
        [
            {"key": "tuning.max_running_requests", "values": [8, 64], "restart": False},
            {"key": "tuning.mem_fraction_static", "values": [0.85, 0.95], "kv_pool": True},
        ],
    )  # finer differences: tests/tune/test_search.py (this machine's load adds noise)
    before = config.read_bytes()
    run_dir = tmp_path / "tune"
    # Up to four rounds: the cap is looked at from its first pair.
    done = glm5svc(
        config, "tune", "run", *WORKLOAD, "--max-repeats", "4", "--space", str(space),
        "--max-trials", "3", "--run-dir", str(run_dir), "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    trials = summary["trials"]
    # The cap is live: the first engine start measures 8 and 64 (two trials of start 0),
    # and, 64 better, goes on with fresh rounds of both: the overlay as written is that
    # start's engine (cap 64 at start-up), so its confirmation needs no start of its own.
    # The second start has 0.95 of memory, over oom-above: serve's diagnosis names the fix.
    assert [(t["start"], t["status"]) for t in trials] == [
        (0, "measured"), (0, "measured"), (0, "measured"), (0, "measured"), (1, "failed")
    ], [(t["start"], t["status"], t["verdict"]) for t in trials]  # fmt: skip
    # The model: a cap of 8 bounds 32 concurrent requests (2.8x by its step times).
    assert summary["overlay"] == {"tuning": {"max_running_requests": 64}}
    assert "bound by the running-request cap" in trials[0]["diagnosis"]
    assert trials[1]["verdict"].startswith("better") and "paired window" in trials[1]["verdict"]
    assert trials[1]["best"] and trials[1]["was_best"]
    fresh = "the confirmation: fresh pairs in the overlay's own start"
    assert trials[2]["verdict"] == trials[3]["verdict"] == fresh
    assert {trials[2]["setting"], trials[3]["setting"]} == {
        "(the start)", "max_running_requests=64"
    }  # fmt: skip
    assert "out of memory" in trials[4]["diagnosis"].lower()
    assert "mem_fraction_static" in trials[4]["diagnosis"]
    assert summary["confirmed"] is True, summary["confirmation_detail"]
    assert summary["confirmation"] == "confirmed"
    assert summary["confirmation_detail"].startswith(
        "confirmed by a fresh test of the overlay as written"
    )
    started = yaml.safe_load((run_dir / "starts" / "000" / "config.yaml").read_text())
    assert started["tuning"]["max_running_requests"] == 64
    timeline = summary["timeline"]
    assert 0 < timeline["decided_s"] <= timeline["wall_s"]
    # The screen called it on its first pairs (with the pair prior); the summary's gain is
    # the plain interval of those few pairs, the confirmation's lower bound the bar it cleared.
    assert summary["gain"]["mean"] > 1.5
    low = float(summary["confirmation_detail"].split("[")[1].split("%")[0]) / 100
    assert low > 0.03, summary["confirmation_detail"]
    assert config.read_bytes() == before  # trials have their own files
    for name in ("trials.md", "trials.csv", "tuned.yaml", "host_vars.yml", "plot.png",
                 "study.db", "summary.json"):  # fmt: skip
        assert (run_dir / name).is_file(), name
    assert not (run_dir / "baseline").exists()  # the tune runs no bench_serving baseline
    host_vars = yaml.safe_load((run_dir / "host_vars.yml").read_text())
    assert host_vars["glm5_service_config_extra"]["tuning"]["max_running_requests"] == 64

    applied = glm5svc(config, "tune", "apply", str(run_dir), "--no-restart", "--json")
    assert applied.returncode == 0, applied.stderr
    written = yaml.safe_load(config.read_text())
    assert written["tuning"]["max_running_requests"] == 64
    assert Path(json.loads(applied.stdout)["backup"]).read_bytes() == before
    assert glm5svc(config, "validate").returncode == 0


def test_a_best_that_failed_its_confirming_start_writes_no_overlay_and_apply_refuses(
    tmp_path, bench_python, tokenizer_dir
):
    """A run directory as a tune leaves it when the best's fresh start did not reproduce
    its gain: the trials' records (the cap of 64 better in start 0, no better in start 1,
    its confirming start) through the same writer as `tune run`."""
    config = tune_config(tmp_path, bench_python, tokenizer_dir, "load=0.1")
    before = config.read_bytes()
    run_dir = tmp_path / "tune"
    (run_dir / "trials").mkdir(parents=True)
    cap = "tuning.max_running_requests"
    start = {cap: 8}

    def record(number: int, value: int, start_index: int, windows: list[float], **kw):
        runs = [
            RunFigures(throughput=t, output_throughput=t / 2, ttft_p99_ms=None, itl_p99_ms=None,
                       ttft_median_ms=None, power_share=None, running_max=None,
                       queue_mean=None, token_usage_max=None, wall_s=1.0, completed=10,
                       requested=10, name=f"r{i + 1:02d}-v{value}", live_value=value, round=i,
                       cached_share=0.0).to_dict()
            for i, t in enumerate(windows)
        ]  # fmt: skip
        return TrialRecord(number, {cap: value}, "measured", {"runs": runs, "wall_s": 9.0},
                           start=start_index, **kw)  # fmt: skip

    better = "better: +29.5% [+26%, +33%] over 2 paired window(s), look 1"
    records = [
        record(0, 8, 0, [100.0, 102.0, 101.0, 99.0], verdict="the start"),
        record(1, 64, 0, [130.0, 128.0, 131.0, 129.0], verdict=better, became_best=True),
        record(2, 8, 1, [101.0, 100.0, 99.0, 102.0], verdict="the start"),
        record(3, 64, 1, [100.0, 103.0, 98.0, 101.0], verdict="the confirming start"),
    ]
    why = (
        "its gain was not reproduced by a fresh engine start: not confirmed: with its fresh "
        "start the best's gain over the start is no longer above zero"
    )
    verdict = {"confirmed": False, "confirmation": "failed", "confirmation_detail": why}
    summary = write_outputs(
        run_dir, records, records[1], start,
        {**verdict, "stopped_by": "every proposal measured"},
        SearchSettings(),
        lambda a, b: True,  # only the live cap differs: every setting ran in every start
    )  # fmt: skip
    assert summary["overlay"] == {} and summary["confirmed"] is False
    tuned = (run_dir / "tuned.yaml").read_text()
    assert "Nothing to apply: the confirmation failed" in tuned and why in tuned
    assert yaml.safe_load(tuned) == {}
    assert yaml.safe_load((run_dir / "host_vars.yml").read_text()) == {}

    refused = glm5svc(config, "tune", "apply", str(run_dir), "--no-restart", "--json")
    assert refused.returncode == 78, refused.stdout + refused.stderr
    answer = json.loads(refused.stdout)
    assert answer["ok"] is False
    assert "the confirmation failed: " + why in answer["error"]
    assert config.read_bytes() == before
    assert not list(tmp_path.glob("glm5.yaml.*"))  # no backup: nothing was written


def test_a_serving_unit_is_not_taken_without_take_over(
    tmp_path, bench_python, tokenizer_dir, fake_systemctl
):
    (fake_systemctl / "state").write_text("active\n")
    config = tune_config(tmp_path, bench_python, tokenizer_dir, "load=0.1")
    done = glm5svc(config, "tune", "run", *WORKLOAD, "--run-dir", str(tmp_path / "t"), "--json",
                   env=dict(os.environ))  # fmt: skip
    assert done.returncode == 75
    answer = json.loads(done.stdout)
    assert answer["ok"] is False and "--take-over" in answer["error"]
    assert "stop" not in (fake_systemctl / "calls").read_text()


def test_sigterm_restores_the_unit_and_leaves_no_process(
    tmp_path, bench_python, tokenizer_dir, fake_systemctl
):
    (fake_systemctl / "state").write_text("active\n")
    config = tune_config(tmp_path, bench_python, tokenizer_dir, "load=0.1")
    before = config.read_bytes()
    run_dir = tmp_path / "t"
    tune = subprocess.Popen(
        [sys.executable, "-m", "glm5svc", "--config", str(config), "tune", "run", *WORKLOAD,
         "--run-dir", str(run_dir), "--take-over", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ),
    )  # fmt: skip
    log = run_dir / "starts" / "000" / "runs"
    deadline = time.monotonic() + 120
    while not log.exists() and time.monotonic() < deadline and tune.poll() is None:
        time.sleep(0.2)  # the first window has been read: the engine serves the load
    assert log.exists(), tune.communicate()[1][-3000:]
    tune.send_signal(signal.SIGTERM)
    out, err = tune.communicate(timeout=120)
    assert tune.returncode == 128 + signal.SIGTERM, err[-3000:]
    summary = json.loads(out)
    assert summary["interrupted_by"] == "SIGTERM"
    calls = (fake_systemctl / "calls").read_text().split("\n")
    assert "stop glm5.service" in calls and "start glm5.service" in calls
    assert (fake_systemctl / "state").read_text().strip() == "active"
    assert config.read_bytes() == before
    left = subprocess.run(["pgrep", "-f", str(run_dir)], capture_output=True, text=True)
    assert left.stdout.strip() == "", f"processes left: {left.stdout}"


def test_each_start_holds_one_continuous_load_read_in_counter_windows(
    tmp_path, bench_python, tokenizer_dir
):
    """One load per engine start (fresh random token ids, lengths in [ratio x len, len]):
    the radix cache finds nothing to reuse, each window's throughput is the engine's
    counters' advance over it, and the live cap's values alternate A B B A."""
    config = tune_config(tmp_path, bench_python, tokenizer_dir, "load=0.1")
    cap = {"key": "tuning.max_running_requests", "values": [8, 64], "restart": False}
    space = write_space(tmp_path, [cap])
    run_dir = tmp_path / "tune"
    done = glm5svc(
        config, "tune", "run", *WORKLOAD, "--space", str(space), "--max-trials", "1",
        "--run-dir", str(run_dir), "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    runs_dir = run_dir / "starts" / "000" / "runs"
    windows = sorted(runs_dir.glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
    assert windows, sorted(p.relative_to(run_dir) for p in run_dir.rglob("*.json"))[:20]
    for path in windows:
        window = json.loads(path.read_text())
        tokens = window["tokens"]
        assert window["cached_share"] is not None and window["cached_share"] <= 0.01, path
        counted = (tokens["uncached_input"] + tokens["output"]) / window["duration_s"]
        assert window["throughput"] == pytest.approx(counted, abs=0.1), path
        assert window["throughput"] > 0 and window["completed"] > 0, path
    # A B B A: round 1 measures 8 then 64, round 2 64 then 8 (a window that could not be
    # counted is measured again under its name with -again).
    order = [p.stem for p in windows if not p.stem.endswith("-again")]
    assert [name.split("-v")[1] for name in order][:4] == ["8", "64", "64", "8"], order
    measured = {}
    for number in (0, 1):
        record = json.loads((run_dir / "trials" / f"{number:03d}.json").read_text())
        assert record["start"] == 0 and record["status"] == "measured", record["verdict"]
        outcome = record["outcome"]
        load = outcome["load"]
        assert load["shape"] == "input uniform in [8, 16], output in [8, 16] tokens"
        assert load["completed"] > 0 and load["failed"] == 0, load["errors"]
        assert outcome["warmup_windows"]
        for run in outcome["runs"]:
            window = json.loads((runs_dir / f"{run['name']}.json").read_text())
            assert run["throughput"] == window["output_throughput"]  # the objective
            assert run["total_throughput"] == window["throughput"]
            assert run["cached_share"] == window["cached_share"]
            measured[run["name"]] = run["live_value"]
    assert sorted(measured.values()) == [8, 8, 64, 64]
    assert [t["runs"] for t in summary["trials"]] == [2, 2]
    # Every second of the measurement beside the windows: no NVML here (null GPU fields),
    # the engine's gauges and counters, the load's pacing.
    header, seconds = read_seconds(run_dir / "starts" / "000" / SECONDS_FILE)
    assert header["nvml_absent"] and len(seconds) >= 4
    assert all(set(FIELDS) <= set(line) for line in seconds)
    assert all(line["running"] is not None and line["passes"] for line in seconds)
    assert seconds[-1]["decode"] > seconds[0]["decode"] and seconds[-1]["gaps"] > 0
    assert 0 < max(line["in_flight"] for line in seconds) <= 32


def test_a_tune_on_a_request_file_sends_its_lengths_and_refuses_a_bad_one(
    tmp_path, bench_python, tokenizer_dir
):
    """--request-file: the start's load sends the file's lengths, in turn, as new prompts;
    a bad file, or fixed lengths beside it, is refused before any trial starts."""
    config = tune_config(tmp_path, bench_python, tokenizer_dir, "load=0.1")
    requests = tmp_path / "requests.jsonl"
    lengths = [(24, 16), (8, 12), (40, 20)]
    requests.write_text("".join(f'{{"input_len": {i}, "output_len": {o}}}\n' for i, o in lengths))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"input_len": 24, "output_len": 16}\n{"input_len": 0, "output_len": 4}\n')
    space = write_space(tmp_path, [{"key": "tuning.max_running_requests", "values": [8, 64]}])
    options = ["--concurrency", "32", "--window", "1", "--settle", "0.5", "--min-repeats", "2",
               "--max-repeats", "2", "--space", str(space), "--max-trials", "1",
               "--json"]  # fmt: skip
    refused = glm5svc(config, "tune", "run", *options, "--request-file", str(bad))
    assert refused.returncode == 78
    assert f"{bad}: line 2: input_len 0 is under 2" in refused.stdout
    both = glm5svc(config, "tune", "run", *options, "--request-file", str(requests),
                   "--input-len", "16")  # fmt: skip
    assert both.returncode == 78 and "leave out --input-len" in both.stdout
    assert not list(tmp_path.glob("results/tune/*"))  # nothing started

    run_dir = tmp_path / "tune"
    done = glm5svc(
        config, "tune", "run", *options, "--request-file", str(requests), "--run-dir", str(run_dir)
    )
    assert done.returncode == 0, done.stderr[-3000:]
    saved = json.loads((run_dir / "tune.json").read_text())
    assert saved["workload"]["request_file"] == str(requests)
    record = json.loads((run_dir / "trials" / "000.json").read_text())
    load = record["outcome"]["load"]
    assert load["shape"] == "3 recorded request lengths, in turn"
    assert load["completed"] > 0 and load["failed"] == 0, load["errors"]
    windows = sorted(run_dir.glob("starts/000/runs/*.json"))
    assert windows
    # The file's requests average 24 tokens in, 16 out: each window's prompt tokens per
    # answer token is about 1.5 (in turn, 32 at once: the window cuts requests, not many).
    sent_in = sum(json.loads(p.read_text())["tokens"]["uncached_input"] for p in windows)
    sent_out = sum(json.loads(p.read_text())["tokens"]["output"] for p in windows)
    assert 1.0 < sent_in / sent_out < 2.2, (sent_in, sent_out)
