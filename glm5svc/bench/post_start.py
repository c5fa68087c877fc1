"""The service's post-start benchmark: a short ladder after READY, its /status view and its
/metrics gauges (labelled by concurrency).

    summary = run_post_start_benchmark(config, sampler=sampler, on_progress=cb)
    summary.to_status()                     # for /status
    bench_metrics_families(summary)         # GaugeMetricFamily list for /metrics
    should_degrade(config, summary)         # below baseline and configured to degrade

`post_start_hook(context)` adapts this to the supervisor's post-READY hook protocol
(context.config, context.engine_url, context.stop_requested, context.log) and returns a
JSON-able dict. `run_post_start_benchmark(context)` does the same, for hooks that pass the
context to it directly.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from glm5svc.bench.plan import plan_from_config
from glm5svc.bench.results import BenchSummary
from glm5svc.bench.runner import BenchEvent, ProgressCallback
from glm5svc.bench.sweep import Judgement, run_benchmark

POST_START_KIND = "post-start"
# The keys the service exports as glm5svc_benchmark_<key> from the hook's "summary".
HEADLINE_KEYS = (
    "total_throughput",
    "output_throughput",
    "request_throughput",
    "mean_ttft_ms",
    "mean_tpot_ms",
    "concurrency",
)


def run_post_start_benchmark(
    config: Any,
    sampler: Any = None,
    on_progress: ProgressCallback | None = None,
    *,
    base_url: str | None = None,
    stop_event: threading.Event | None = None,
) -> BenchSummary:
    """Run benchmark.post_start's ladder against the server; write results under
    service.results_dir/bench/<stamp>-post-start; return the BenchSummary."""
    post = config.benchmark.post_start
    plan = plan_from_config(
        config,
        ladder=list(post.ladder),
        num_prompts=post.num_prompts_per_level,
        base_url=base_url,
    )
    return run_benchmark(
        plan,
        config.service.results_dir,
        Judgement.from_config(config),
        kind=POST_START_KIND,
        sampler=sampler,
        config=config,
        on_progress=on_progress,
        should_stop=stop_event.is_set if stop_event is not None else None,
    )


def should_degrade(config: Any, summary: BenchSummary) -> bool:
    """Degraded (not unready): below the baseline and benchmark.post_start says to mark it."""
    return bool(config.benchmark.post_start.degrade_below_baseline and summary.below_baseline)


def post_start_hook(context: Any) -> dict[str, Any]:
    """The supervisor's post-READY hook: run, then return the /status dict (with the
    headline figures under "summary" and "degraded")."""
    log: Callable[[str], None] = getattr(context, "log", None) or (lambda message: None)

    def progress(event: BenchEvent) -> None:
        if event.kind in ("level-start", "level-done", "stopped", "finished"):
            log(f"post-start benchmark: {event.message}")

    summary = run_post_start_benchmark(
        context.config,
        sampler=getattr(context, "sampler", None),
        on_progress=progress,
        base_url=context.engine_url,
        stop_event=getattr(context, "stop_requested", None),
    )
    return status_dict(context.config, summary)


def status_dict(config: Any, summary: BenchSummary) -> dict[str, Any]:
    status = summary.to_status()
    status["summary"] = headline(summary)
    status["degraded"] = should_degrade(config, summary)
    return status


def headline(summary: BenchSummary) -> dict[str, float]:
    """The best level's figures, flat (what glm5svc_benchmark_<key> gauges show)."""
    measured = [lv for lv in summary.levels if lv.metrics and lv.metrics.total_throughput]
    if not measured:
        return {}
    best = max(measured, key=lambda lv: lv.metrics.total_throughput)
    m = best.metrics
    values = {
        "total_throughput": m.total_throughput,
        "output_throughput": m.output_throughput,
        "request_throughput": m.request_throughput,
        "mean_ttft_ms": m.latency("ttft", "mean"),
        "mean_tpot_ms": m.latency("tpot", "mean"),
        "concurrency": float(best.concurrency),
        "below_baseline": 1.0 if summary.below_baseline else 0.0,
    }
    return {k: v for k, v in values.items() if v is not None}


# (metric name, help, status-level key, scale to base units)
LEVEL_GAUGES = (
    ("glm5svc_bench_total_throughput_tokens_per_second", "total tok/s", "total_tok_s", 1.0),
    ("glm5svc_bench_output_throughput_tokens_per_second", "output tok/s", "output_tok_s", 1.0),
    ("glm5svc_bench_request_throughput_per_second", "requests/s", "request_per_s", 1.0),
    ("glm5svc_bench_ttft_median_seconds", "median time to first token", "median_ttft_ms", 1e-3),
    ("glm5svc_bench_itl_median_seconds", "median inter-token latency", "median_itl_ms", 1e-3),
    (
        "glm5svc_bench_energy_per_output_token_joules",
        "GPU energy per output token",
        "joules_per_output_token",
        1.0,
    ),
    (
        "glm5svc_bench_power_share_of_limit_ratio",
        "mean GPU power over the power limit",
        "mean_power_share",
        1.0,
    ),
    (
        "glm5svc_bench_baseline_change_ratio",
        "total tok/s change against the baseline (-0.1 = 10% below)",
        "vs_baseline_pct",
        1e-2,
    ),
)


def bench_metrics_families(summary: BenchSummary | dict[str, Any] | None) -> list:
    """Prometheus gauge families of the last benchmark, per level (label `concurrency`).
    Takes the BenchSummary or its to_status() dict (what the service keeps)."""
    from prometheus_client.core import GaugeMetricFamily

    if summary is None:
        return []
    status = summary.to_status() if isinstance(summary, BenchSummary) else summary
    levels = status.get("levels") or []
    families = []
    for name, doc, key, scale in LEVEL_GAUGES:
        family = GaugeMetricFamily(name, f"last benchmark: {doc}", labels=["concurrency"])
        for level in levels:
            value = level.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                family.add_metric([str(level["concurrency"])], float(value) * scale)
        families.append(family)
    completed = GaugeMetricFamily(
        "glm5svc_bench_completed_ratio",
        "last benchmark: completed over requested requests",
        labels=["concurrency"],
    )
    for level in levels:
        if level.get("requested"):
            completed.add_metric(
                [str(level["concurrency"])], level.get("completed", 0) / level["requested"]
            )
    families.append(completed)
    below = GaugeMetricFamily(
        "glm5svc_bench_below_baseline",
        "1 when the last benchmark was below its baseline beyond the threshold",
        value=1.0 if status.get("below_baseline") else 0.0,
    )
    families.append(below)
    return families


class BenchCollector:
    """A prometheus_client collector over a function returning the last summary/status."""

    def __init__(self, last: Callable[[], BenchSummary | dict[str, Any] | None]):
        self.last = last

    def collect(self):
        yield from bench_metrics_families(self.last())
