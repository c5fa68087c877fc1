"""Benchmarks: sglang.bench_serving over a concurrency ladder, with GPU telemetry per level.

    summary = run_benchmark(plan_from_config(config), config.service.results_dir,
                            Judgement.from_config(config), config=config)

The service uses glm5svc.bench.post_start (run_post_start_benchmark, bench_metrics_families).
"""

from glm5svc.bench.baselines import load_baseline, load_summary, shipped_baselines
from glm5svc.bench.metrics import LevelMetrics, parse_bench_line
from glm5svc.bench.plan import BenchPlan, plan_from_config
from glm5svc.bench.results import BenchSummary, LevelResult
from glm5svc.bench.runner import BenchEvent
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
