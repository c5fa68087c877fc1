"""The last benchmark's /metrics gauges (glm5svc_bench_*), from its BenchmarkStatus.

The BenchmarkStatus (glm5svc.records) is what the benchmark hands the service (glm5svc.bench
results' BenchSummary.to_status(), shown in /status "benchmark"); the service's Prometheus
collector (glm5svc.serve.metrics) renders it with this module, so the service needs nothing
from the benchmark package, and the benchmark nothing from the service.
"""

from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily

from glm5svc.records import BenchmarkStatus

# (metric name, help, BenchmarkLevel field, scale to base units)
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


def bench_metrics_families(status: BenchmarkStatus | None) -> list[GaugeMetricFamily]:
    """Prometheus gauge families of the last benchmark, per level (label `concurrency`)."""
    if status is None:
        return []
    families = []
    for name, doc, field_name, scale in LEVEL_GAUGES:
        family = GaugeMetricFamily(name, f"last benchmark: {doc}", labels=["concurrency"])
        for level in status.levels:
            value = getattr(level, field_name)
            if value is not None:
                family.add_metric([str(level.concurrency)], float(value) * scale)
        families.append(family)
    completed = GaugeMetricFamily(
        "glm5svc_bench_completed_ratio",
        "last benchmark: completed over requested requests",
        labels=["concurrency"],
    )
    for level in status.levels:
        if level.requested:
            completed.add_metric([str(level.concurrency)], level.completed / level.requested)
    families.append(completed)
    below = GaugeMetricFamily(
        "glm5svc_bench_below_baseline",
        "1 when the last benchmark was below its baseline beyond the threshold",
        value=1.0 if status.below_baseline else 0.0,
    )
    families.append(below)
    return families
