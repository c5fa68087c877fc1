"""A window under a continuous load: the engine's counters read at its two ends.

Under glm5svc/bench/load.py's load the engine holds the concurrency the whole time, so a
window needs no ramp detection (glm5svc/bench/steady.py does that for one bench_serving
run): it is the counters' advance between two reads of /metrics, `duration_s` apart.
- throughput: uncached prompt tokens plus output tokens per second
  (`sglang:realtime_tokens_total`, advanced per batch by the scheduler), as a steady
  window counts them: cache hits are not work;
- cached share: prompt tokens the radix cache served, of all prompt tokens;
- latency percentiles from the engine's own histograms, when it has them
  (`sglang:time_to_first_token_seconds`, `sglang:inter_token_latency_seconds`, sglang
  0.5.9-0.5.11 with --enable-metrics): the buckets' advance over the window, interpolated
  within the bucket as Prometheus' histogram_quantile does.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from glm5svc.bench.engine_sampler import ITL, TTFT, Buckets, CounterRead, buckets, read_counters
from glm5svc.bench.steady import TokenCounts

__all__ = ["ITL", "TTFT", "Buckets", "CounterRead", "CounterWindow", "buckets", "quantile",
           "read_counters"]  # fmt: skip


def quantile(first: Buckets, last: Buckets, q: float) -> float | None:
    """The q quantile of what the histogram observed between two reads, or None when it
    observed nothing (or has no buckets)."""
    before = dict(first)
    advance = [(bound, count - before.get(bound, 0.0)) for bound, count in last]
    if not advance or advance[-1][1] <= 0:
        return None
    rank = q * advance[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in advance:
        if count >= rank:
            if math.isinf(bound):
                return lower_bound  # beyond the last finite bucket: its bound, as Prometheus
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (
                count - lower_count
            )
        lower_bound, lower_count = bound, count
    return lower_bound


@dataclass(frozen=True)
class CounterWindow:
    """What the engine did between two reads."""

    duration_s: float
    tokens: TokenCounts
    completed: float  # requests finished
    ttft_p99_ms: float | None
    itl_p99_ms: float | None
    ttft_median_ms: float | None

    @classmethod
    def between(cls, first: CounterRead, last: CounterRead) -> CounterWindow:
        def ms(family: str, q: float) -> float | None:
            value = quantile(getattr(first, family), getattr(last, family), q)
            return None if value is None else round(value * 1000, 2)

        return cls(
            duration_s=round(last.sample.t - first.sample.t, 3),
            tokens=TokenCounts.between(first.sample, last.sample),
            completed=max(0.0, last.sample.completed - first.sample.completed),
            ttft_p99_ms=ms("ttft", 0.99),
            itl_p99_ms=ms("itl", 0.99),
            ttft_median_ms=ms("ttft", 0.5),
        )

    @property
    def throughput(self) -> float:
        if self.duration_s <= 0:
            return 0.0
        return (self.tokens.uncached_input + self.tokens.output) / self.duration_s

    @property
    def output_throughput(self) -> float:
        return self.tokens.output / self.duration_s if self.duration_s > 0 else 0.0

    def to_dict(self) -> dict:
        data = asdict(self)
        data.update(
            throughput=round(self.throughput, 1),
            output_throughput=round(self.output_throughput, 1),
            cached_share=self.tokens.cached_share,
        )
        return data
