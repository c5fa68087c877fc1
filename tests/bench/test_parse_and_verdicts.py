"""Parsing real bench_serving lines of two versions; knee, under-use and baseline verdicts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from glm5svc.bench.baselines import load_baseline, shipped_baselines
from glm5svc.bench.plan import plan_from_config
from glm5svc.bench.post_start import benchmark_status, headline
from glm5svc.bench.power import LevelTelemetry, unavailable
from glm5svc.bench.results import BenchSummary, LevelResult
from glm5svc.bench.serving_figures import BenchLineError, parse_bench_line
from glm5svc.bench.verdicts import compare_with_baseline, find_knee, gpus_underused
from glm5svc.benchmark_gauges import bench_metrics_families
from glm5svc.config import Config, parse_config
from glm5svc.errors import ConfigError
from glm5svc.records import BenchmarkStatus, from_dict, to_dict

FIXTURES = Path(__file__).parent / "fixtures"


def fixture_line(version: str) -> str:
    return (FIXTURES / f"bench_serving-{version}.jsonl").read_text().splitlines()[-1]


def test_parses_sglang_0_5_9_line():
    raw = json.loads(fixture_line("0.5.9"))
    m = parse_bench_line(fixture_line("0.5.9"))
    assert m.completed == 32 and m.max_concurrency == 8
    assert m.total_throughput == raw["total_throughput"] and not m.total_throughput_derived
    assert m.peak_output_throughput == raw["max_output_tokens_per_s"]
    assert m.concurrency == raw["concurrency"]
    assert m.latency("e2e_latency", "p90") == raw["p90_e2e_latency_ms"]
    assert m.latency("itl", "p95") == raw["p95_itl_ms"]
    assert m.total_input_tokens == 32 * 64 and m.total_output_tokens == 32 * 24


def test_parses_sglang_0_4_6_line_without_the_newer_keys():
    raw = json.loads(fixture_line("0.4.6.post5"))
    assert "total_throughput" not in raw and "max_output_tokens_per_s" not in raw
    m = parse_bench_line(raw)
    assert m.total_throughput_derived
    assert m.total_throughput == pytest.approx(raw["input_throughput"] + raw["output_throughput"])
    assert m.peak_output_throughput is None  # absent, not zero
    assert m.latency("e2e_latency", "p90") is None
    assert m.latency("ttft", "p99") == raw["p99_ttft_ms"]
    assert m.request_throughput == raw["request_throughput"]


@pytest.mark.parametrize("line", ["", "not json", "[1, 2]", '{"duration": 1}'])
def test_rejects_lines_that_are_not_results(line):
    with pytest.raises(BenchLineError):
        parse_bench_line(line)


def steady(total, output, spread=0.004):
    """A level's steady record: four windows within +/- spread of the figures."""
    factors = (1 - spread, 1 + spread, 1 - spread / 2, 1 + spread / 2)
    return {"windows": [{"throughput": total * f, "window": {"output_throughput": output * f}}
                        for f in factors]}  # fmt: skip


def windows_of(figures: dict[int, tuple[float, float]]) -> dict[str, dict[str, list[float]]]:
    """A baseline's "windows": {concurrency: (total, output)} as four windows each."""
    found = {}
    for c, (total, output) in figures.items():
        runs = steady(total, output)["windows"]
        found[str(c)] = {
            "total_throughput": [r["throughput"] for r in runs],
            "output_throughput": [r["window"]["output_throughput"] for r in runs],
        }
    return found  # fmt: skip


def level(c, total, e2e_mean, share=None, requested=10, completed=10, output=None):
    metrics = parse_bench_line(
        {
            "completed": completed,
            "max_concurrency": c,
            "input_throughput": total * 2 / 3,
            "output_throughput": output if output is not None else total / 3,
            "total_throughput": total,
            "request_throughput": total / 100,
            "mean_e2e_latency_ms": e2e_mean,
            "median_e2e_latency_ms": e2e_mean,
            "total_output_tokens": 1000,
        }
    )
    telemetry = (
        LevelTelemetry(available=True, mean_power_share=share, max_power_share=share)
        if share is not None
        else unavailable("no NVIDIA driver")
    )
    windows = steady(total, output if output is not None else total / 3)
    return LevelResult(c, requested, metrics, telemetry, 0, 1.0, steady=windows)


def test_knee_is_where_gain_falls_under_threshold_while_latency_rises():
    levels = [level(64, 700, 100), level(256, 1950, 150), level(512, 2800, 200),
              level(1024, 3000, 380), level(2048, 3050, 760)]  # fmt: skip
    knee = find_knee(levels, knee_gain_pct=10)
    assert knee["found"] and knee["concurrency"] == 512 and knee["next_concurrency"] == 1024
    assert knee["throughput_gain_pct"] == pytest.approx((3000 / 2800 - 1) * 100)
    assert find_knee(levels, knee_gain_pct=5)["concurrency"] == 1024


def test_no_knee_while_throughput_scales_or_latency_falls():
    scaling = [level(64, 700, 100), level(256, 1950, 150), level(1024, 3740, 300)]
    assert not find_knee(scaling, 10)["found"]
    flat_but_faster = [level(64, 700, 100), level(256, 705, 90)]
    assert not find_knee(flat_but_faster, 10)["found"]
    assert "fewer than two" in find_knee(scaling[:1], 10)["text"]


def test_underused_reads_power_share_at_the_best_level():
    levels = [level(256, 1950, 100, share=0.9), level(1024, 3740, 200, share=0.3)]
    verdict = gpus_underused(levels, threshold_share=0.6)
    assert verdict["underused"] is True and verdict["best_concurrency"] == 1024
    busy = gpus_underused([level(1024, 3740, 200, share=0.8)], 0.6)
    assert busy["underused"] is False
    unknown = gpus_underused([level(1024, 3740, 200)], 0.6)
    assert unknown["underused"] is None and "no NVIDIA driver" in unknown["text"]


def test_reference_baseline_ships_with_absent_levels_absent():
    assert "reference-8x-rtx-pro-6000" in shipped_baselines()
    ref = load_baseline("reference-8x-rtx-pro-6000")
    assert set(ref["levels"]) == {"64", "256", "512", "1024"}  # 2048 not recorded: absent
    assert ref["levels"]["256"]["output_throughput"] == 650
    assert ref["levels"]["1024"]["total_throughput"] == 3740
    assert any("2048" in note for note in ref["notes"])


def test_baseline_comparison_flags_drops_beyond_threshold():
    """Judged on the steady windows of both sides: a 10 % drop of total tok/s regresses,
    an unchanged figure does not; req/s and peak are shown, not judged; a baseline with no
    windows (the shipped reference) gives figures but no verdict, and says why."""
    figures = {"64": {"total_throughput": 689, "output_throughput": 689 / 3,
                      "request_throughput": 6.89},
               "256": {"total_throughput": 1950, "output_throughput": 650,
                       "request_throughput": 19.5}}  # fmt: skip
    own = {
        "name": "own",
        "levels": figures,
        "windows": windows_of({64: (689, 689 / 3), 256: (1950, 650)}),
    }
    levels = [level(64, 689, 100), level(256, 1950 * 0.9, 150, output=650), level(2048, 5000, 900)]
    result = compare_with_baseline(levels, own, threshold_pct=5)
    assert result["regressed"] and result["judged"]
    by_key = {(r["concurrency"], r["metric"]): r for r in result["rows"]}
    assert by_key[(64, "total_throughput")]["change_pct"] == pytest.approx(0.0)
    assert by_key[(64, "total_throughput")]["judged"]
    assert not by_key[(64, "total_throughput")]["regressed"]
    assert by_key[(256, "total_throughput")]["change_pct"] == pytest.approx(-10.0)
    assert by_key[(256, "total_throughput")]["regressed"]
    low, high = by_key[(256, "total_throughput")]["interval_pct"]
    assert low < -10 < high < 0
    assert not by_key[(256, "output_throughput")]["regressed"]
    assert not by_key[(256, "request_throughput")]["judged"]  # whole-run, ramps included
    assert "not judged" in result["text"] or "below baseline" in result["text"]
    assert result["levels_without_baseline"] == [2048]
    # A drop of 10 % is within a 25 % gate (not beyond half of it).
    assert not compare_with_baseline(levels, own, threshold_pct=25)["regressed"]
    shipped = compare_with_baseline(levels, load_baseline("reference-8x-rtx-pro-6000"), 5)
    assert not shipped["regressed"] and not shipped["judged"]
    assert all(not row["judged"] for row in shipped["rows"])
    assert "cannot judge" in shipped["text"] and "fewer than 2 steady windows" in shipped["text"]


def test_bad_baseline_references_name_the_fix(tmp_path):
    with pytest.raises(ConfigError, match="not a shipped baseline"):
        load_baseline("no-such-baseline")
    bad = tmp_path / "b.json"
    bad.write_text(json.dumps({"levels": {"64": {"total_throughput": 0}}}))
    with pytest.raises(ConfigError) as err:
        load_baseline(bad)
    assert "levels.64.total_throughput" in err.value.render()


def summary_of(levels, regressed):
    return BenchSummary(
        run_id="r1", kind="post-start", started_at="t0", finished_at="t1", plan={},
        levels=levels, stopped_reason=None, telemetry_status="no NVIDIA driver",
        verdicts={"baseline": compare_with_baseline(
            levels, {"name": "b", "levels": {"64": {"total_throughput": 2000 if regressed else 1}},
                     "windows": windows_of({64: (2000 if regressed else 1, 1)})},
            5)},
    )  # fmt: skip


def test_status_metrics_and_degraded_for_the_service():
    summary = summary_of([level(64, 700, 100, share=0.2)], regressed=True)
    assert BenchSummary.from_dict(json.loads(json.dumps(summary.to_dict()))).below_baseline
    config = Config.model_validate({"benchmark": {"post_start": {"degrade_below_baseline": True}}})
    status = benchmark_status(config, summary)
    assert status.degraded is True and status.below_baseline is True
    assert status.summary["total_throughput"] == 700 == headline(summary)["total_throughput"]
    assert status.levels[0].vs_baseline_pct == pytest.approx(-65.0)
    assert benchmark_status(Config(), summary).degraded is False  # not configured to degrade
    read_back = from_dict(BenchmarkStatus, json.loads(json.dumps(to_dict(status))))
    assert read_back == status
    families = {f.name: f for f in bench_metrics_families(read_back)}
    total = families["glm5svc_bench_total_throughput_tokens_per_second"].samples[0]
    assert total.labels == {"concurrency": "64"} and total.value == 700
    assert families["glm5svc_bench_baseline_change_ratio"].samples[0].value == pytest.approx(-0.65)
    assert families["glm5svc_bench_below_baseline"].samples[0].value == 1.0
    assert families["glm5svc_bench_power_share_of_limit_ratio"].samples[0].value == 0.2
    assert bench_metrics_families(None) == []


def test_bench_interpreter_comes_from_benchmark_python_then_server_python():
    assert plan_from_config(Config()).python == "/opt/glm5/venv/bin/python"
    config = parse_config("benchmark: {python: /opt/glm5/bench-venv/bin/python}")
    assert plan_from_config(config).python == "/opt/glm5/bench-venv/bin/python"
    assert plan_from_config(config, python="/usr/bin/python3").python == "/usr/bin/python3"
    with pytest.raises(ConfigError) as bad:
        parse_config("benchmark: {python: [1]}")
    assert bad.value.problems[0].startswith("line 1: benchmark.python: ")
