"""The steady window of a run, from engine samples: ramps left out, cache hits not counted."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from glm5svc.bench.steady import (
    EngineSample,
    TokenCounts,
    cached_share_flag,
    prompts_for_window,
    steady_window,
    windows_agree,
)


def run(concurrency=8, ramp=4, hold=20, tail=4, rate=100.0, cached=0.0):
    """Samples 1 s apart: `ramp` s of the first wave (no completions), `hold` s holding the
    concurrency (completions at 2/s, tokens at `rate`/s), then `tail` s of ramp-down."""
    samples, completed, tokens = [], 0.0, 0.0
    for t in range(ramp + hold + tail):
        if t < ramp:
            in_engine, done_now, tok = concurrency, 0.0, rate / 4
        elif t < ramp + hold:
            in_engine, done_now, tok = concurrency, (concurrency if t == ramp else 2.0), rate
        else:
            in_engine, done_now, tok = (
                max(0, concurrency - 3 * (t - ramp - hold + 1)),
                2.0,
                rate / 3,
            )
        completed += done_now
        tokens += tok
        samples.append(
            EngineSample(
                t=float(t), running=in_engine, queued=0, completed=completed,
                prefill_compute=tokens * 0.5 * (1 - cached), prefill_cache=tokens * 0.5 * cached,
                decode=tokens * 0.5,
            )
        )  # fmt: skip
    return samples


def test_the_window_leaves_out_the_ramps():
    window = steady_window(run(), concurrency=8, min_window_s=10)
    assert window.ok
    assert window.start_s == 4  # once the first wave of 8 has finished
    assert window.duration_s == 19  # the last sample still holding 8
    assert window.throughput == pytest.approx(100.0)


def test_cached_tokens_are_not_work():
    window = steady_window(run(cached=0.5), concurrency=8, min_window_s=10)
    assert window.throughput == pytest.approx(75.0)  # half of the prompt half was cached
    assert window.tokens.cached_share == pytest.approx(0.5)


def test_a_short_run_has_no_window_and_says_why():
    window = steady_window(run(hold=5), concurrency=8, min_window_s=10)
    assert not window.ok
    assert "under the 10 s" in window.reason
    assert window.throughput is None


def test_a_run_that_never_finishes_a_wave_has_no_window():
    window = steady_window(run(ramp=10, hold=0, tail=0), concurrency=8, min_window_s=1)
    assert "first wave" in window.reason


def test_prompts_for_window_covers_both_waves_and_the_window():
    assert prompts_for_window(10.0, 256, 30) == 2 * 256 + 360
    with pytest.raises(ValueError):
        prompts_for_window(0.0, 256, 30)


def test_a_cached_share_above_the_declared_is_flagged():
    tokens = TokenCounts(uncached_input=90, cached_input=10, output=50)
    assert "10.0% of its prompt tokens" in cached_share_flag(tokens, 0.0)
    assert cached_share_flag(tokens, 0.1) is None
    assert cached_share_flag(TokenCounts(99.5, 0.5, 1), 0.0) is None


def test_windows_agree_within_a_tolerance():
    assert windows_agree(100, 102, 0.03)
    assert not windows_agree(100, 110, 0.03)
    assert not windows_agree(0, 0, 0.03)


counters = st.floats(min_value=0, max_value=1e9, allow_nan=False)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    st.lists(
        st.tuples(
            st.floats(0, 1e4, allow_nan=False),
            counters,
            counters,
            counters,
            counters,
            counters,
            counters,
        ),
        max_size=30,
    ),
    st.integers(1, 1024),
)
def test_any_samples_give_a_window_or_a_reason(rows, concurrency):
    samples = [EngineSample(*row) for row in sorted(rows)]
    window = steady_window(samples, concurrency, 30.0)
    assert window.ok or window.reason
    if window.ok:
        assert window.duration_s >= 30.0
        assert window.throughput is None or window.throughput >= 0
