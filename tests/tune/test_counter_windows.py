"""The tune's figures: windows of the engine's counters under one continuous load, read
against recorded real /metrics and the test engine, and the load's prompts."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest

from glm5svc.bench.counter_window import (
    ITL,
    TTFT,
    CounterRead,
    CounterWindow,
    buckets,
    quantile,
    read_counters,
)
from glm5svc.bench.engine_sampler import sample_from_metrics
from glm5svc.bench.load import ContinuousLoad, LoadShape, read_stream
from glm5svc.metrics_text import parse_metrics
from testkit import sglang_test_engine
from testkit.engine import start_engine

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real_engine"
SERVICE = REAL / "sglang-0.5.11-h200-service-split-supervisor"


def read(path: Path, t: float):
    samples = parse_metrics(path.read_text())
    return CounterRead(sample_from_metrics(samples, t), buckets(samples, TTFT),
                       buckets(samples, ITL))  # fmt: skip


def test_the_test_engine_s_latency_buckets_are_sglang_s():
    text = "\n".join(p.read_text() for p in REAL.glob("*/metrics*.txt"))
    real = parse_metrics(text)
    for family, mine in ((TTFT, sglang_test_engine.TTFT_BUCKETS),
                         (ITL, sglang_test_engine.ITL_BUCKETS)):  # fmt: skip
        bounds = [b for b, _ in buckets(real, family)]
        assert bounds, family
        assert bounds == [*mine, float("inf")]


def test_a_window_between_two_recorded_real_reads():
    idle, loaded = (
        read(SERVICE / "metrics-idle.txt", 0.0),
        read(SERVICE / "metrics-under-load.txt", 10.0),
    )
    window = CounterWindow.between(idle, loaded)
    tokens = window.tokens
    assert window.duration_s == 10.0
    assert tokens.uncached_input + tokens.output > 0
    assert window.throughput == pytest.approx((tokens.uncached_input + tokens.output) / 10.0)
    assert window.ttft_p99_ms is not None and window.ttft_p99_ms > 0


def test_quantile_interpolates_within_the_bucket_as_prometheus_does():
    first = ((0.1, 0.0), (0.2, 0.0), (float("inf"), 0.0))
    last = ((0.1, 50.0), (0.2, 100.0), (float("inf"), 100.0))
    assert quantile(first, last, 0.5) == pytest.approx(0.1)
    assert quantile(first, last, 0.75) == pytest.approx(0.15)
    assert quantile(last, last, 0.5) is None  # nothing observed between the reads


def test_the_load_s_prompts_are_fresh_and_its_lengths_vary_within_the_stated_range():
    shape = LoadShape(concurrency=4, input_len=64, output_len=16, range_ratio=0.5, vocab_size=1000)
    load = ContinuousLoad("http://127.0.0.1:9", {}, shape, seed=3)
    rng = random.Random(1)
    bodies = [json.loads(load._body(rng, False)) for _ in range(200)]
    inputs = [len(b["input_ids"]) for b in bodies]
    outputs = [b["sampling_params"]["max_new_tokens"] for b in bodies]
    assert min(inputs) >= 32 and max(inputs) <= 64 and len(set(inputs)) > 10
    assert min(outputs) >= 8 and max(outputs) <= 16
    assert all(0 <= i < 1000 for b in bodies for i in b["input_ids"])
    firsts = [tuple(b["input_ids"][:3]) for b in bodies]
    assert len(set(firsts)) == len(firsts)  # no two prompts share even a 3-token prefix
    assert "uniform in [32, 64]" in shape.describe()


def test_a_continuous_load_on_the_test_engine_is_read_from_its_counters(tmp_path):
    engine = start_engine(tmp_path / "engine.log", "--step-base-ms", "2")
    try:
        shape = LoadShape(concurrency=8, input_len=32, output_len=8, vocab_size=5000)
        load = ContinuousLoad(engine.base_url, {}, shape, seed=1)
        first = read_counters(engine.base_url, {})
        load.start()
        deadline = time.monotonic() + 60
        while load.counts.completed < 40 and time.monotonic() < deadline:
            time.sleep(0.05)  # waits on the load's own counter, bounded
        last = read_counters(engine.base_url, {})
        counts = load.stop()
    finally:
        engine.stop()
    assert counts.completed >= 40 and counts.failed == 0
    window = CounterWindow.between(first, last)
    assert window.completed >= 40
    assert window.tokens.cached_share is not None and window.tokens.cached_share < 0.01
    assert window.ttft_p99_ms is not None and window.itl_p99_ms is not None


def test_a_workload_that_declares_sharing_is_measured_with_that_share_cached(tmp_path):
    """benchmark.prefix_sharing 0.5: every prompt begins with the same half; the engine's
    radix cache serves about that share, under the flag's threshold, window after window."""
    engine = start_engine(tmp_path / "engine.log", "--step-base-ms", "2")
    shape = LoadShape(concurrency=4, input_len=64, output_len=4, vocab_size=5000,
                      prefix_share=0.5)  # fmt: skip
    try:
        load = ContinuousLoad(engine.base_url, {}, shape, seed=2)
        load.start()
        shares = []
        for _ in range(3):
            first = read_counters(engine.base_url, {})
            target = load.counts.completed + 30
            deadline = time.monotonic() + 60
            while load.counts.completed < target and time.monotonic() < deadline:
                time.sleep(0.05)  # waits on the load's own counter, bounded
            shares.append(CounterWindow.between(first, read_counters(engine.base_url, {}))
                          .tokens.cached_share)  # fmt: skip
        load.stop()
    finally:
        engine.stop()
    assert all(0.3 < share < 0.51 for share in shares), shares
    assert "50% of each prompt shared" in shape.describe()


def test_streaming_probes_time_the_first_token_and_the_gaps_after_it(tmp_path):
    """Two of eight workers stream: each of their requests gives its first token's time and
    the mean gap per later token; the other workers' requests give none."""
    engine = start_engine(tmp_path / "engine.log", "--step-base-ms", "2")
    try:
        shape = LoadShape(concurrency=8, input_len=32, output_len=8, vocab_size=5000,
                          range_ratio=1.0, latency_probes=2)  # fmt: skip
        load = ContinuousLoad(engine.base_url, {}, shape, seed=4)
        load.start()
        deadline = time.monotonic() + 60
        while len(load.counts.streamed) < 6 and time.monotonic() < deadline:
            time.sleep(0.05)  # waits on the load's own counter, bounded
        counts = load.stop()
    finally:
        engine.stop()
    streamed = list(counts.streamed)
    assert len(streamed) >= 6 and counts.failed == 0
    assert len(streamed) < counts.completed  # only the probes' requests are timed
    for probe in streamed:
        assert 0 < probe.ttft_s < 60 and probe.itl_s is not None and probe.itl_s > 0
    ended = [p.ended_at for p in streamed]
    assert counts.streamed_between(min(ended) - 1, max(ended)) == streamed
    assert counts.streamed_between(max(ended), max(ended) + 1) == []


def test_read_stream_counts_tokens_not_chunks():
    """A chunk that carries several tokens counts them all: the gap is per token."""

    class Answer:
        def __init__(self, lines):
            self.lines = lines

        def __iter__(self):
            return iter(self.lines)

    def chunk(tokens):
        return b'data: {"meta_info": {"completion_tokens": %d}}\n' % tokens

    timed = read_stream(Answer([chunk(1), b"\n", chunk(3), chunk(5), b"data: [DONE]\n"]), 0.0)
    assert timed.ttft_s > 0 and timed.itl_s is not None and timed.itl_s >= 0
    with pytest.raises(OSError, match="no output tokens"):
        read_stream(Answer([b"data: [DONE]\n"]), 0.0)
