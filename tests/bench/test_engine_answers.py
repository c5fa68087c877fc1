"""What the steady measurement reads from the engine, answered oddly: /metrics without
sglang's token counters or with other label sets, POST /flush_cache answering 400, 401,
500 or text, GET /get_server_info of another shape. Each ends with a message saying what
the engine answered and the fix (a version, a key, a setting), never a traceback, and a
measurement that cannot succeed stops at once instead of spending its warm-up."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st

from glm5svc.bench import engine_sampler, measure
from glm5svc.bench.engine_sampler import (
    EngineCountersMissing,
    EngineSampler,
    FlushRefused,
    flush_radix_cache,
    sample_from_metrics,
    server_info_problem,
)
from glm5svc.bench.plan import BenchPlan
from glm5svc.bench.power import unavailable
from glm5svc.bench.results import LevelResult
from glm5svc.bench.serving_figures import parse_bench_line
from glm5svc.bench.steady import EngineSample
from glm5svc.metrics_text import MetricsTextError, parse_metrics
from testkit.http_stub import stub

GOOD_METRICS = """\
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{tp_rank="0"} 8.0
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{tp_rank="0"} 0.0
# TYPE sglang:num_requests_total counter
sglang:num_requests_total{model_name="m"} 12.0
# TYPE sglang:realtime_tokens_total counter
sglang:realtime_tokens_total{mode="prefill_compute",tp_rank="0"} 100.0
sglang:realtime_tokens_total{mode="decode",tp_rank="0"} 50.0
"""


def text(body: str, status: int = 200) -> Callable[[web.Request], web.Response]:
    return lambda request: web.Response(text=body, status=status)


def answer(value, status: int = 200) -> Callable[[web.Request], web.Response]:
    return lambda request: web.json_response(value, status=status)


# ----- /metrics ---------------------------------------------------------------------


def test_sglang_counters_are_read_summed_over_ranks():
    extra = GOOD_METRICS + 'sglang:realtime_tokens_total{mode="decode",tp_rank="1"} 5.0\n'
    sample = sample_from_metrics(parse_metrics(extra), 1.0)
    assert (sample.prefill_compute, sample.prefill_cache, sample.decode) == (100.0, 0.0, 55.0)
    assert (sample.running, sample.completed) == (8.0, 12.0)


def test_metrics_without_any_sglang_metric_name_enable_metrics():
    with pytest.raises(EngineCountersMissing) as raised:
        sample_from_metrics(parse_metrics("process_cpu_seconds_total 3.0\n"), 1.0)
    said = str(raised.value)
    assert "sglang:realtime_tokens_total" in said and "--enable-metrics" in said
    assert "1 samples, none named sglang:*" in said and "benchmark.steady: false" in said


def test_metrics_of_an_sglang_without_the_token_counter_name_the_versions():
    text_ = 'sglang:num_running_reqs{tp_rank="0"} 1.0\n'
    with pytest.raises(EngineCountersMissing, match="sglang 0.5.9 and 0.5.11 do"):
        sample_from_metrics(parse_metrics(text_), 1.0)


def test_token_counters_with_other_label_sets_are_refused_not_read_as_zero():
    text_ = 'sglang:realtime_tokens_total{kind="prefill",tp_rank="0"} 100.0\n'
    with pytest.raises(EngineCountersMissing) as raised:
        sample_from_metrics(parse_metrics(text_), 1.0)
    said = str(raised.value)
    assert "{kind=prefill,tp_rank=0}" in said
    assert "mode=prefill_compute|prefill_cache|decode" in said


labels = st.dictionaries(st.sampled_from(["mode", "tp_rank", "kind", "dp"]),
                         st.sampled_from(["decode", "prefill_cache", "prefill", "0", "x"]),
                         max_size=3)  # fmt: skip
names = st.sampled_from(["sglang:realtime_tokens_total", "sglang:num_requests_total",
                         "sglang:num_running_reqs", "other_metric"])  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(names, labels, st.floats(0, 1e12)), max_size=6))
def test_any_metrics_text_is_a_sample_or_a_named_refusal(series):
    lines = [
        name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(lab.items())) + "} " + repr(value)
        for name, lab, value in series
    ]
    text_ = "\n".join(lines) + "\n"
    try:
        sample = sample_from_metrics(parse_metrics(text_), 0.0)
    except EngineCountersMissing as exc:
        assert "benchmark.steady: false" in str(exc)
        modes = {lab.get("mode") for name, lab, _ in series if name.endswith("tokens_total")
                 and name.startswith("sglang:realtime")}  # fmt: skip
        assert not modes & {"prefill_compute", "prefill_cache", "decode"}
        return
    except MetricsTextError:
        return  # e.g. one series given twice: prometheus' parser refuses, with the line
    assert isinstance(sample, EngineSample)
    assert sample.decode >= 0 and sample.prefill_cache >= 0


def test_a_sampler_on_a_page_that_is_not_metrics_says_it_could_not_read_them():
    with stub({("GET", "/metrics"): text("<html><body>login</body></html>")}) as base:
        sampler = EngineSampler(base, {})
        sampler.start()
        samples = sampler.stop()
    assert samples == [] and sampler.missing is None
    assert sampler.errors[0].startswith("the engine's /metrics could not be read")
    assert "Prometheus text format" in sampler.errors[0]


# ----- POST /flush_cache ------------------------------------------------------------


@pytest.fixture
def quick_flush(monkeypatch):
    monkeypatch.setattr(engine_sampler, "FLUSH_TIMEOUT_S", 1.0)
    monkeypatch.setattr(engine_sampler, "FLUSH_RETRY_S", 0.1)


def test_a_flush_answered_with_text_is_a_flush():
    with stub({("POST", "/flush_cache"): text("Cache flushed.\nPlease check backend logs")}) as b:
        assert flush_radix_cache(b, {}) >= 0


def test_a_flush_refused_while_requests_run_is_retried_then_named(quick_flush):
    with stub({("POST", "/flush_cache"): text("not performed", status=400)}) as base:
        started = time.monotonic()
        with pytest.raises(FlushRefused) as raised:
            flush_radix_cache(base, {})
    said = str(raised.value)
    assert time.monotonic() - started >= 1.0  # retried for the whole time
    assert "HTTP 400 ('not performed')" in said and "stop other traffic" in said


def test_a_flush_that_fails_on_the_engine_stops_at_once(quick_flush):
    with stub({("POST", "/flush_cache"): text("Internal Server Error", status=500)}) as base:
        started = time.monotonic()
        with pytest.raises(FlushRefused) as raised:
            flush_radix_cache(base, {})
    said = str(raised.value)
    assert time.monotonic() - started < 1.0
    assert "HTTP 500 ('Internal Server Error')" in said and "benchmark.prefix_sharing" in said


def test_a_flush_that_refuses_the_key_names_the_admin_key(quick_flush):
    with stub({("POST", "/flush_cache"): answer({"error": "Unauthorized"}, 401)}) as base:
        with pytest.raises(FlushRefused) as raised:
            flush_radix_cache(base, {"Authorization": "Bearer k"})
    said = str(raised.value)
    assert "HTTP 401" in said and "--admin-api-key" in said and "server.api_key_file" in said


def test_a_flush_to_no_server_says_there_was_no_answer(quick_flush):
    with stub({}) as base:
        pass  # stopped: nothing listens there any more
    with pytest.raises(FlushRefused, match="no answer") as raised:
        flush_radix_cache(base, {})
    assert "requests run" not in str(raised.value)


# ----- GET /get_server_info -----------------------------------------------------------


@pytest.mark.parametrize(
    ("handler", "said"),
    [
        (text("<html>proxy</html>"), "text that is not JSON ('<html>proxy</html>')"),
        (answer([1, 2]), "JSON that is a list of int, not an object"),
        (answer("ok"), "JSON that is a string, not an object"),
        (answer({"decode": {}}), "decode is an object"),
        (answer({"decode": []}), "decode is an empty list"),
        (answer({"internal_states": "busy"}), "internal_states is a string"),
        (answer({"decode": [{"internal_states": [3]}]}), "internal_states is a list of int"),
    ],
    ids=["html", "list", "string", "decode-object", "decode-empty", "states-text", "states-int"],
)
def test_a_server_info_bench_serving_cannot_read_is_named(handler, said):
    with stub({("GET", "/get_server_info"): handler}) as base:
        problem = server_info_problem(base, {})
    assert problem is not None and said in problem, problem
    assert "sglang.bench_serving (0.5.9)" in problem and "/get_server_info" in problem


@pytest.mark.parametrize(
    "handler",
    [
        answer({"internal_states": [{"avg_spec_accept_length": None}], "version": "0.5.11"}),
        answer({"decode": [{"internal_states": [{}]}]}),
        answer({}),
        text("Not Found", status=404),  # bench_serving skips an error status
        text("oops", status=500),
    ],
    ids=["0.5.11", "disaggregated", "empty", "404", "500"],
)
def test_a_server_info_bench_serving_reads_passes(handler):
    with stub({("GET", "/get_server_info"): handler}) as base:
        assert server_info_problem(base, {}) is None


def test_the_steady_ladder_stops_before_a_level_on_such_a_server_info(tmp_path, monkeypatch):
    monkeypatch.setattr(measure, "run_level", lambda *a, **k: pytest.fail("a run started"))
    routes = {**steady_routes(GOOD_METRICS), ("GET", "/get_server_info"): answer([1])}
    with stub(routes) as base:
        levels, stopped = measure.run_steady_ladder(plan(base), tmp_path)
    assert "JSON that is a list of int, not an object" in levels[0].error
    assert stopped.startswith("stopped at concurrency 8: GET ")


# ----- the measurement stops at once ----------------------------------------------------


def plan(base_url: str, **changes) -> BenchPlan:
    return BenchPlan(
        base_url=base_url, python="/nonexistent/python", tokenizer="t", model="m", ladder=(8,),
        input_len=8, output_len=8, min_prompts=16, steady=True, window_s=0.5, windows=2,
        warmup_max_s=60, warmup_tolerance_pct=50,
    ).with_overrides(**changes)  # fmt: skip


def finished_level(plan_, concurrency, run_dir, sampler=None, **kwargs):
    """run_level's stand-in: a completed bench_serving run of 0.6 s (the counters are read
    meanwhile)."""
    time.sleep(0.6)
    requested = plan_.prompts_for(concurrency)
    metrics = parse_bench_line(json.dumps({"completed": requested, "total_throughput": 1.0}))
    level = LevelResult(concurrency, requested, metrics, unavailable("none"), 0, 0.6)
    return level, None


def steady_routes(metrics: str) -> dict:
    return {
        ("POST", "/flush_cache"): text("Cache flushed."),
        ("GET", "/get_server_info"): answer({"version": "0.5.11"}),
        ("GET", "/health"): text(""),
        ("GET", "/metrics"): text(metrics),
    }


def test_an_engine_without_token_counters_ends_the_level_at_the_first_run(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(measure, "run_level", lambda *a, **k: calls.append(1) or finished_level(
        *a, **k))  # fmt: skip
    with stub(steady_routes("sglang:num_running_reqs 1.0\n")) as base:
        levels, stopped = measure.run_steady_ladder(plan(base), tmp_path)
    assert len(calls) == 1  # not a warm-up of 60 s of runs that cannot be read
    assert "has no sglang:realtime_tokens_total" in levels[0].error
    assert "sglang 0.5.9 and 0.5.11 do" in stopped


def test_a_bad_server_info_ends_the_measurement_before_any_run(tmp_path, monkeypatch):
    monkeypatch.setattr(measure, "run_level", lambda *a, **k: pytest.fail("a run started"))
    routes = {**steady_routes(GOOD_METRICS), ("GET", "/get_server_info"): text("<html>")}
    with stub(routes) as base:
        result = measure.Measurer(plan(base), 8, tmp_path).measure(seed=1)
    assert result.runs == [] and "text that is not JSON" in result.error


def test_good_counters_give_a_run_that_is_counted_or_flagged_with_a_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(measure, "run_level", finished_level)
    with stub(steady_routes(GOOD_METRICS)) as base:
        run = measure.Measurer(plan(base), 8, tmp_path).run("a", seed=1)
    # Counters that never move: no first wave, and the window says so.
    assert run.flag and "first wave" in run.flag
