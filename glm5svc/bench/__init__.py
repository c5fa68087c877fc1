"""Benchmarks: sglang.bench_serving over a concurrency ladder, with GPU telemetry per level.

    summary = run_benchmark(plan_from_config(config), config.service.results_dir,
                            Judgement.from_config(config), config=config)

The service runs glm5svc.bench.post_start (post_start_hook) after READY; it exports the
result's gauges through glm5svc.benchmark_gauges, never importing this package.
"""

from glm5svc.bench.baselines import load_baseline, load_summary, shipped_baselines
from glm5svc.bench.plan import BenchPlan, plan_from_config
from glm5svc.bench.results import BenchSummary, LevelResult
from glm5svc.bench.runner import BenchEvent
from glm5svc.bench.serving_figures import LevelMetrics, parse_bench_line
from glm5svc.bench.sweep import Judgement, run_benchmark

__all__ = [
    "BenchEvent",
    "BenchPlan",
    "BenchSummary",
    "Judgement",
    "LevelMetrics",
    "LevelResult",
    "load_baseline",
    "load_summary",
    "parse_bench_line",
    "plan_from_config",
    "run_benchmark",
    "shipped_baselines",
]
