"""The real sglang 0.5.9 bench_serving, driven over a ladder against the test engine."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from glm5svc.bench import BenchPlan, Judgement, run_benchmark
from glm5svc.bench.runner import RAW_LINES_FILE
from glm5svc.cli import main
from glm5svc.telemetry import Sampler
from testkit.engine import SHORT_STEADY, start_engine
from testkit.fake_gpus import SteadyGpus

LADDER = (4, 8, 16, 32)


def make_plan(bench_python, tokenizer, base_url, **changes) -> BenchPlan:
    plan = BenchPlan(
        base_url=base_url,
        python=bench_python,
        tokenizer=tokenizer,
        model="glm-5",
        ladder=LADDER,
        input_len=64,
        output_len=24,
        prompts_per_concurrency=2,
        min_prompts=16,
        warmup_requests=2,
        level_timeout_s=120,
        **SHORT_STEADY,
    )
    return plan.with_overrides(**changes)


def write_baseline(
    path: Path,
    levels: dict[int, float],
    input_len: int = 64,
    output_len: int = 24,
    steady: bool = True,
) -> Path:
    data = {
        "name": "synthetic",
        "plan": {"input_len": input_len, "output_len": output_len, "steady": steady},
        "levels": {str(c): {"total_throughput": tput} for c, tput in levels.items()},
    }
    path.write_text(json.dumps(data))
    return path


@pytest.fixture
def bounded_engine(tmp_path):
    """The test engine at five times its default step costs (40 ms + 1.25 ms per running
    request, graphs on: 0.6 of the base): the same shape of throughput against concurrency,
    with the steps long enough that waiting for a core (the suite runs in more workers than
    cores) does not flatten it."""
    handle = start_engine(
        tmp_path / "engine.log", "--step-base-ms", "40", "--step-per-req-ms", "1.25"
    )
    yield handle
    handle.stop()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_ladder_against_the_test_engine(bench_python, tiny_tokenizer, bounded_engine, tmp_path):
    # Bounded throughput: each decode step costs a base plus a share per running request,
    # so 4 -> 32 gains less and less while latency rises. The single wave (the opt-out,
    # benchmark.steady: false): one bench_serving run per level, the telemetry window its
    # measured run.
    engine = bounded_engine
    sampler = Sampler(SteadyGpus(count=2, watts=150.0, limit_w=600.0), period_s=0.2)
    plan = make_plan(bench_python, tiny_tokenizer, engine.base_url, steady=False)
    huge = write_baseline(tmp_path / "huge.json", {4: 1e6, 8: 1e6, 2048: 1e6}, steady=False)
    events = []
    with sampler:
        summary = run_benchmark(
            plan,
            tmp_path / "results",
            Judgement(knee_gain_pct=60.0, underused_power_share=0.6, baseline=str(huge)),
            sampler=sampler,
            on_progress=events.append,
        )
    run_dir = Path(summary.results_dir)
    assert summary.stopped_reason is None
    assert [lv.concurrency for lv in summary.levels] == list(LADDER)
    for level in summary.levels:
        assert level.ok, level.error
        assert level.completed == level.requested == max(16, 2 * level.concurrency)
        m = level.metrics
        assert m.total_input_tokens == 64 * level.requested
        assert m.total_output_tokens == 24 * level.requested
        assert m.total_throughput == pytest.approx(m.input_throughput + m.output_throughput)
        assert 0 < m.concurrency <= level.concurrency + 0.5
        assert m.latency("ttft", "p99") >= m.latency("ttft", "median") > 0
        assert m.latency("itl") > 0 and m.latency("e2e_latency", "mean") > 0
        t = level.telemetry
        assert t.available and level.window_scope == "measured-run"
        # the window spans the measured run (bench_serving's own duration), not start-up
        assert t.window_s == pytest.approx(m.duration_s, abs=0.5)
        assert t.mean_power_share == pytest.approx(0.25, abs=0.02)
        assert t.joules_per_output_token == pytest.approx(
            2 * 150.0 * t.window_s / m.total_output_tokens, rel=0.05
        )
        assert t.pcie_tx_gb_per_s == pytest.approx(2.0, rel=0.1)
        assert t.pcie_rx_gb_per_s == pytest.approx(1.0, rel=0.1)
    outputs = [lv.metrics.total_throughput for lv in summary.levels]
    assert outputs[1] > outputs[0]  # it scales at first
    knee = summary.verdicts["knee"]
    assert knee["found"], knee
    assert knee["concurrency"] in LADDER[:-1]
    assert knee["throughput_gain_pct"] < 60.0 and knee["latency_change_pct"] > 0
    assert summary.verdicts["underused"]["underused"] is True
    base = summary.verdicts["baseline"]
    assert base["regressed"] and summary.below_baseline
    assert base["compared_levels"] == [4, 8]
    assert base["levels_without_baseline"] == [16, 32]
    assert [e.kind for e in events].count("level-done") == 4 and events[-1].kind == "finished"

    saved = json.loads((run_dir / "summary.json").read_text())
    assert saved["verdicts"]["knee"]["concurrency"] == knee["concurrency"]
    assert saved["provenance"]["sglang_version"] == "0.5.9"
    assert saved["provenance"]["gpus"]["driver_version"] == "999.99-fake"
    assert saved["plan"]["api_key"] is None
    raw = (run_dir / RAW_LINES_FILE).read_text().splitlines()
    assert [json.loads(line)["max_concurrency"] for line in raw] == list(LADDER)
    rows = list(csv.DictReader((run_dir / "levels.csv").open()))
    assert [int(r["concurrency"]) for r in rows] == list(LADDER)
    assert float(rows[0]["total_tok_s"]) == pytest.approx(outputs[0])
    assert float(rows[0]["j_per_output_token"]) > 0
    png = (run_dir / "plot.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    import matplotlib.image

    assert matplotlib.image.imread(run_dir / "plot.png").shape[0] > 100

    status = summary.to_status()
    assert status.below_baseline is True and status.knee_concurrency == knee["concurrency"]
    assert [lv.concurrency for lv in status.levels] == list(LADDER)

    # compare: a single-wave run has no windows, so against itself the gate cannot judge
    # (and does not pass); against the huge baseline the drop is beyond any run-to-run
    # spread, a regression either way.
    assert main(["bench", "compare", str(run_dir), str(run_dir), "--fail-on-regression"]) == 3
    assert main(["bench", "compare", str(run_dir), str(huge), "--fail-on-regression"]) == 3


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_cli_regression_exit_and_no_telemetry(
    bench_python, tiny_tokenizer, engine, tmp_path, capsys, monkeypatch
):
    config = tmp_path / "glm5.yaml"
    config.write_text(json.dumps({"benchmark": SHORT_STEADY}))
    huge = write_baseline(tmp_path / "huge.json", {8: 1e6}, 32, 8)
    argv = [
        "bench", "--ladder", "8", "--input-len", "32", "--output-len", "8",
        "--base-url", engine.base_url, "--python", bench_python,
        "--tokenizer", tiny_tokenizer, "--model", "glm-5",
        "--results-dir", str(tmp_path / "r"), "--baseline", str(huge), "--json",
    ]  # fmt: skip
    monkeypatch.setenv("GLM5SVC_CONFIG", str(config))
    assert main([*argv, "--fail-on-regression"]) == 3
    summary = json.loads(capsys.readouterr().out)
    level = summary["levels"][0]
    assert level["completed"] == level["requested"] > 0  # runs are sized to the window
    baseline = summary["verdicts"]["baseline"]
    assert baseline["judged"] and baseline["regressed"]
    assert len(level["steady"]["windows"]) == 2 and summary["plan"]["steady"] is True
    # No NVIDIA driver here (or a fake-free sampler): the run works and says so.
    assert summary["telemetry_status"] != "available"
    assert summary["levels"][0]["telemetry"]["available"] is False
    assert summary["verdicts"]["underused"]["underused"] is None
    assert main(argv) == 0  # the same regression without --fail-on-regression


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_ladder_stops_when_the_server_dies(bench_python, tiny_tokenizer, engine, tmp_path):
    plan = make_plan(bench_python, tiny_tokenizer, engine.base_url, ladder=(4, 8, 16))

    def kill_after_first(event):
        if event.kind == "level-done":
            engine.stop()

    summary = run_benchmark(
        plan, tmp_path, Judgement(baseline=None), sampler=None, on_progress=kill_after_first
    )
    assert [lv.concurrency for lv in summary.levels] == [4]
    assert summary.levels[0].ok
    assert "server not healthy before concurrency 8" in summary.stopped_reason
    assert "cannot reach" in summary.stopped_reason
    saved = json.loads((Path(summary.results_dir) / "summary.json").read_text())
    assert saved["stopped_reason"] == summary.stopped_reason
    assert (Path(summary.results_dir) / "plot.png").is_file()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_bench_serving_failure_stops_the_ladder(bench_python, engine, tmp_path):
    """bench_serving exits non-zero (here: no tokenizer at the path) at the first level: the
    ladder stops at once with bench_serving's own last words and the interpreter it ran
    with, and nothing measured means no results directory is left behind."""
    missing = str(tmp_path / "no-tokenizer")
    plan = make_plan(bench_python, missing, engine.base_url, ladder=(4, 8))
    summary = run_benchmark(plan, tmp_path / "results", Judgement(baseline=None))
    assert len(summary.levels) == 1
    level = summary.levels[0]
    assert not level.ok and level.metrics is None and level.returncode != 0
    assert summary.stopped_reason.startswith("stopped at concurrency 4: bench_serving exited")
    assert "no-tokenizer" in summary.stopped_reason
    assert f"bench_serving ran with {bench_python} (benchmark.python" in summary.stopped_reason
    assert summary.stopped_reason.endswith("nothing was measured, so no results were kept")
    assert summary.results_dir is None
    assert list((tmp_path / "results" / "bench").iterdir()) == []


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_post_start_hook_runs_the_short_ladder(bench_python, tiny_tokenizer, engine, tmp_path):
    import threading
    from types import SimpleNamespace

    from glm5svc.bench.post_start import post_start_hook
    from glm5svc.config import Config
    from glm5svc.records import BenchmarkStatus, from_dict, to_dict

    huge = write_baseline(tmp_path / "huge.json", {4: 1e6}, 32, 8)
    config = Config.model_validate(
        {
            "model": {"tokenizer_path": tiny_tokenizer, "served_name": "glm-5"},
            "server": {"python": bench_python, "port": 1},  # engine_url below wins
            "service": {"results_dir": str(tmp_path / "results")},
            "telemetry": {"enabled": False},
            "benchmark": {
                "input_len": 32, "output_len": 8, "warmup_requests": 1, "baseline": str(huge),
                **SHORT_STEADY,
                "post_start": {"ladder": [4], "num_prompts_per_level": 8,
                               "degrade_below_baseline": True},
            },
        }
    )  # fmt: skip
    logged = []
    context = SimpleNamespace(
        config=config, engine_url=engine.base_url, stop_requested=threading.Event(),
        log=logged.append, state=None,
    )  # fmt: skip
    status = post_start_hook(context)
    assert from_dict(BenchmarkStatus, json.loads(json.dumps(to_dict(status)))) == status
    assert status.kind == "post-start" and status.complete
    level = status.levels[0]
    assert level.completed == level.requested >= 8 and status.degraded is True
    assert status.summary["concurrency"] == 4.0
    assert "telemetry.enabled: false" in status.telemetry
    assert Path(status.results_dir).name.endswith("-post-start")
    assert (Path(status.results_dir) / "summary.json").is_file()
    assert any("concurrency 4" in line for line in logged)
