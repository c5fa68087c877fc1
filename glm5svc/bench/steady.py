"""The steady window of one run: throughput while the engine held the target concurrency.

A bench_serving run at concurrency C ramps up (the first wave prefills together), holds C
requests in the engine for a while, then ramps down (the last requests finish alone). Its
own figure divides every token by the whole run's wall time, ramps included, so a short
run measures mostly its ramps. The window here is read from the engine itself: sglang's
`sglang:realtime_tokens_total` counters (prefill computed, prefill served from the radix
cache, decode; advanced by the scheduler as batches run, not when requests finish) and its
running and queued gauges, sampled while the run goes on. The window opens once the first
wave of C requests has finished and closes when the engine last held C requests; its
throughput is the counters' advance over that time.

Pure functions over samples, so the test engine, recorded real samples and the lab share
one definition.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

# The engine "holds" the concurrency while running + queued requests reach this share of it:
# between a request's end and its successor's arrival, a slot is briefly empty.
HOLD_SHARE = 0.9
# A run whose cached share of prompt tokens exceeds what its workload declares by more
# than this is flagged: its throughput counts cache hits as work.
CACHED_SHARE_TOLERANCE = 0.01


@dataclass(frozen=True)
class EngineSample:
    """One read of the engine's /metrics."""

    t: float  # time.monotonic() of the read
    running: float
    queued: float
    completed: float  # sglang:num_requests_total (finished requests)
    prefill_compute: float  # uncached prompt tokens prefilled
    prefill_cache: float  # prompt tokens found in the radix cache
    decode: float  # output tokens generated


@dataclass(frozen=True)
class TokenCounts:
    uncached_input: float
    cached_input: float
    output: float

    @property
    def input(self) -> float:
        return self.uncached_input + self.cached_input

    @property
    def cached_share(self) -> float | None:
        """Of the prompt tokens, the share that came from the radix cache."""
        return self.cached_input / self.input if self.input > 0 else None

    @classmethod
    def between(cls, first: EngineSample, last: EngineSample) -> TokenCounts:
        return cls(
            uncached_input=max(0.0, last.prefill_compute - first.prefill_compute),
            cached_input=max(0.0, last.prefill_cache - first.prefill_cache),
            output=max(0.0, last.decode - first.decode),
        )


@dataclass(frozen=True)
class SteadyWindow:
    """The steady part of one run, or why there was none (`reason`)."""

    start_s: float | None  # from the run's first sample
    duration_s: float
    tokens: TokenCounts | None
    mean_in_engine: float | None  # running + queued, averaged over the window
    reason: str | None = None  # set when no window could be taken
    reads: tuple[int, int] | None = None  # the indexes of the samples that bound it

    @property
    def ok(self) -> bool:
        return self.reason is None

    @property
    def throughput(self) -> float | None:
        """Tokens the engine computed per second: uncached prompt tokens plus output tokens.
        Cache hits are not work and are not counted."""
        if not self.ok or self.tokens is None or self.duration_s <= 0:
            return None
        return (self.tokens.uncached_input + self.tokens.output) / self.duration_s

    @property
    def output_throughput(self) -> float | None:
        if not self.ok or self.tokens is None or self.duration_s <= 0:
            return None
        return self.tokens.output / self.duration_s

    def to_dict(self) -> dict:
        data = asdict(self)
        data["throughput"] = self.throughput
        data["output_throughput"] = self.output_throughput
        data["cached_share"] = self.tokens.cached_share if self.tokens else None
        return data


def _holds(sample: EngineSample, concurrency: int) -> bool:
    # At a small concurrency one slot in transit is already more than the share.
    needed = min(HOLD_SHARE * concurrency, max(1, concurrency - 1))
    return sample.running + sample.queued >= needed


def steady_window(
    samples: Sequence[EngineSample], concurrency: int, min_window_s: float
) -> SteadyWindow:
    """The window in which the engine held `concurrency` requests, after the first wave."""
    if len(samples) < 3:
        return SteadyWindow(None, 0.0, None, None, reason="fewer than 3 reads of /metrics")
    first = samples[0]
    wave_done = next(
        (i for i, s in enumerate(samples) if s.completed - first.completed >= concurrency), None
    )
    if wave_done is None:
        return SteadyWindow(
            None, 0.0, None, None,
            reason=f"the run never completed a first wave of {concurrency} requests",
        )  # fmt: skip
    holding = [i for i in range(wave_done, len(samples)) if _holds(samples[i], concurrency)]
    if len(holding) < 2:
        return SteadyWindow(
            None,
            0.0,
            None,
            None,
            reason=(
                f"the engine did not hold {concurrency} requests after the first wave "
                "(too few prompts for this concurrency)"
            ),
        )
    start, end = samples[holding[0]], samples[holding[-1]]
    duration = end.t - start.t
    inside = samples[holding[0] : holding[-1] + 1]
    mean_in_engine = math.fsum(s.running + s.queued for s in inside) / len(inside)
    tokens = TokenCounts.between(start, end)
    reason = None
    if duration < min_window_s:
        reason = (
            f"the steady window lasted {duration:.1f} s, under the {min_window_s:g} s needed "
            "(more prompts per run)"
        )
    return SteadyWindow(
        round(start.t - first.t, 3), round(duration, 3), tokens, round(mean_in_engine, 2), reason,
        (holding[0], holding[-1]),
    )  # fmt: skip


def prompts_for_window(
    completed_per_s: float, concurrency: int, window_s: float, margin: float = 1.2
) -> int:
    """Prompts a run needs for a steady window of `window_s`: the first wave, the window at
    the measured completion rate (with a margin), and the last wave that ramps down."""
    if not (completed_per_s > 0 and math.isfinite(completed_per_s)):
        raise ValueError("the completion rate must be a positive number")
    return 2 * concurrency + math.ceil(completed_per_s * window_s * margin)


def window_for_prompts(
    completed_per_s: float, concurrency: int, prompts: int, margin: float = 1.2
) -> float:
    """The longest window (whole seconds, at least 0) that `prompts` can give at this rate:
    prompts_for_window turned around."""
    if not (completed_per_s > 0 and math.isfinite(completed_per_s)):
        raise ValueError("the completion rate must be a positive number")
    return max(0.0, math.floor((prompts - 2 * concurrency) / (completed_per_s * margin)))


def completion_rate(samples: Sequence[EngineSample], window: SteadyWindow) -> float | None:
    """Requests finished per second inside the window (to size the next run)."""
    if window.start_s is None or window.duration_s <= 0 or not samples:
        return None
    t0 = samples[0].t + window.start_s
    t1 = t0 + window.duration_s
    inside = [s for s in samples if t0 <= s.t <= t1]
    if len(inside) < 2:
        return None
    return (inside[-1].completed - inside[0].completed) / (inside[-1].t - inside[0].t)


def cached_share_flag(tokens: TokenCounts | None, declared_share: float) -> str | None:
    """Why a run's cached share cannot be counted as new prompts, or None."""
    if tokens is None or tokens.cached_share is None:
        return None
    share = tokens.cached_share
    if share > declared_share + CACHED_SHARE_TOLERANCE:
        return (
            f"{share:.1%} of its prompt tokens came from the radix cache, over the "
            f"{declared_share:.0%} the workload declares (benchmark.prefix_sharing): "
            "the prompts were not new"
        )
    return None


def windows_agree(a: float, b: float, tolerance: float) -> bool:
    """Two consecutive windows agree when they differ by at most `tolerance` of their mean."""
    mean = (a + b) / 2
    return mean > 0 and abs(a - b) <= tolerance * mean
