"""The service's post-start benchmark: a short ladder after READY, its /status view and its
/metrics gauges (labelled by concurrency).

    summary = run_post_start_benchmark(config, sampler=sampler, on_progress=cb)
    summary.to_status()                     # a BenchmarkStatus (glm5svc.records) for /status
    should_degrade(config, summary)         # below baseline and configured to degrade

`post_start_hook(context)` adapts this to the supervisor's post-READY hook protocol
(context.config, context.engine_url, context.stop_requested, context.log, and the
launched plan's summary, context.launch_plan, which the results record) and returns a
BenchmarkStatus (glm5svc.records). `run_post_start_benchmark(context)` does the same, for
hooks that pass the context to it directly.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

from glm5svc.bench.plan import plan_from_config
from glm5svc.bench.results import BenchSummary
from glm5svc.bench.runner import BenchEvent, ProgressCallback
from glm5svc.bench.sweep import Judgement, run_benchmark
from glm5svc.config import READ_KEY_FILE
from glm5svc.records import BenchmarkStatus, PlanSummary

POST_START_KIND = "post-start"


def run_post_start_benchmark(
    config: Any,
    sampler: Any = None,
    on_progress: ProgressCallback | None = None,
    *,
    base_url: str | None = None,
    stop_event: threading.Event | None = None,
    launch_plan: PlanSummary | None = None,
    api_key: str | None | object = READ_KEY_FILE,
) -> BenchSummary:
    """Run benchmark.post_start's ladder against the server; write results under
    service.results_dir/bench/<stamp>-post-start; return the BenchSummary. `launch_plan`:
    the summary of the plan the service launched, recorded with the results; `api_key`:
    the key the service read (else read from server.api_key_file)."""
    post = config.benchmark.post_start
    plan = plan_from_config(
        config,
        ladder=list(post.ladder),
        api_key=api_key,
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
        launch_plan=launch_plan,
    )


def should_degrade(config: Any, summary: BenchSummary) -> bool:
    """Degraded (not unready): below the baseline and benchmark.post_start says to mark it."""
    return bool(config.benchmark.post_start.degrade_below_baseline and summary.below_baseline)


def post_start_hook(context: Any) -> BenchmarkStatus:
    """The supervisor's post-READY hook: run, then return the /status record (with the
    headline figures in `summary`, and `degraded`)."""
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
        launch_plan=getattr(context, "launch_plan", None),
        api_key=getattr(context, "api_key", READ_KEY_FILE),
    )
    return benchmark_status(context.config, summary)


def benchmark_status(config: Any, summary: BenchSummary) -> BenchmarkStatus:
    return dataclasses.replace(
        summary.to_status(),
        summary=headline(summary),
        degraded=should_degrade(config, summary),
    )


def headline(summary: BenchSummary) -> dict[str, float]:
    """The best level's figures, flat (/status "benchmark" "summary")."""
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
