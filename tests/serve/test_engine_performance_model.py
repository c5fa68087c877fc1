"""The test engine's performance model: the KV pool, the step factors, noise, cold, oom-above."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import time

import aiohttp
import pytest

from glm5svc.metrics_text import parse_metrics
from glm5svc.serve.diagnosis import diagnose
from testkit import sglang_test_engine as model
from testkit.engine import TEST_ENGINE, start_engine


def args_for(*argv: str):
    return model.parse_args(list(argv))


def test_the_kv_pool_follows_mem_fraction_static_the_cap_and_the_page_size():
    assert model.kv_pool_tokens(args_for()) == 1_080_000  # sglang's default 0.9
    assert model.kv_pool_tokens(args_for("--mem-fraction-static", "0.92")) == 1_104_000
    capped = args_for("--mem-fraction-static", "0.92", "--max-total-tokens", "50000")
    assert model.kv_pool_tokens(capped) == 50_000
    paged = args_for("--max-total-tokens", "50000", "--page-size", "64")
    assert model.kv_pool_tokens(paged) == 49_984
    assert model.request_kv_tokens(paged, 70, 10) == 128
    small = args_for("--mem-fraction-static", "0.5", "--test-mode", "kv-at-full=20000")
    assert model.kv_pool_tokens(small) == 10_000


def test_the_kv_line_prints_the_computed_pool(tmp_path):
    log = tmp_path / "engine.log"
    handle = start_engine(
        log, "--mem-fraction-static", "0.92", "--test-mode", "load=0.1,oom-above=0.95"
    )
    handle.stop()
    text = log.read_text()
    kv_lines = re.findall(r"KV Cache is allocated\. #tokens: (\d+), KV size: [\d.]+ GB", text)
    assert kv_lines and set(kv_lines) == {"1104000"}  # every rank prints it
    assert "max_total_num_tokens=1104000, " in text


def test_step_factors_graphs_win_at_low_concurrency_and_lose_at_high():
    eager = args_for("--disable-cuda-graph")
    graphs = args_for()
    assert model.predicted_step_ms(graphs, 8, 0) < model.predicted_step_ms(eager, 8, 0)
    assert model.predicted_step_ms(graphs, 512, 0) > model.predicted_step_ms(eager, 512, 0)
    # graphs off and no backend flag: the plain base + per request + prefill
    assert model.predicted_step_ms(eager, 10, 1000) == pytest.approx(8 + 2.5 + 2)
    fa3 = args_for("--disable-cuda-graph", "--attention-backend", "fa3")
    factor = model.STEP_FACTORS["attention_backend"]["fa3"]
    assert model.predicted_step_ms(fa3, 10, 0) == pytest.approx(10.5 * factor)
    unknown = args_for("--disable-cuda-graph", "--moe-runner-backend", "no-such-runner")
    assert model.predicted_step_ms(unknown, 10, 0) == model.predicted_step_ms(eager, 10, 0)


def test_admission_stops_at_the_kv_pool_and_the_prefill_chunk():
    engine = model.Engine(args_for("--max-total-tokens", "1000"))
    for _ in range(5):
        engine.submit(model.Request(prompt_tokens=200, max_new=100))
    assert len(engine.admit()) == 3 and engine.kv_used == 900
    assert engine.admit() == [] and len(engine.waiting) == 2 and len(engine.running) == 3
    chunked = model.Engine(args_for("--chunked-prefill-size", "500"))
    for _ in range(5):
        chunked.submit(model.Request(prompt_tokens=200, max_new=1))
    assert len(chunked.admit()) == 2 and len(chunked.admit()) == 2
    lone = model.Engine(args_for("--max-total-tokens", "100"))
    lone.submit(model.Request(prompt_tokens=200, max_new=100))
    assert len(lone.admit()) == 1  # larger than the pool, alone: it runs rather than hangs


def test_noise_with_the_same_seed_is_reproducible():
    def steps(mode: str) -> list[float]:
        engine = model.Engine(args_for("--test-mode", mode))
        return [engine.step_ms(running, 0) for running in range(1, 30)]

    assert steps("noise=0.2,seed=7") == steps("noise=0.2,seed=7")
    assert steps("noise=0.2,seed=7") != steps("noise=0.2,seed=8")
    assert steps("noise=0.2") == steps("noise=0.2,seed=0")
    plain = [model.predicted_step_ms(args_for(), running, 0) for running in range(1, 30)]
    assert steps("") == plain
    assert steps("noise=0.2") != plain


def test_cold_steps_are_slower_only_at_first():
    engine = model.Engine(args_for("--test-mode", "cold=5"))
    plain = model.predicted_step_ms(engine.args, 16, 0)
    engine.serving_since = time.monotonic()
    assert engine.step_ms(16, 0) == pytest.approx(plain * model.COLD_FACTOR)
    engine.serving_since = time.monotonic() - 6
    assert engine.step_ms(16, 0) == plain


def engine_output(*argv: str) -> tuple[int, str]:
    command = [sys.executable, str(TEST_ENGINE), "--port", "1", *argv]
    done = subprocess.run(command, capture_output=True, text=True, timeout=20)
    return done.returncode, done.stdout


def test_oom_above_crashes_at_the_kv_phase_as_crash_oom_does():
    code, output = engine_output(
        "--mem-fraction-static", "0.95", "--test-mode", "load=0,oom-above=0.9"
    )
    assert code == 1
    assert "torch.OutOfMemoryError: CUDA out of memory" in output
    assert "KV Cache is allocated" not in output and "Load weight end" in output
    _, crash_oom = engine_output("--test-mode", "load=0,crash=oom")
    ids = [d.signature.id for d in diagnose(output.splitlines())]
    assert ids == [d.signature.id for d in diagnose(crash_oom.splitlines())] == ["cuda-oom"]


async def run_load(base: str, requests: int, max_new: int) -> tuple[float, float]:
    """(output tokens per second, the most requests seen running) for a burst of requests."""
    payload = {"text": "hello " * 50, "sampling_params": {"max_new_tokens": max_new}}
    most_running = 0.0

    async def one(session):
        async with session.post(base + "/generate", json=payload) as response:
            assert response.status == 200
            await response.json()

    async def watch(session):
        nonlocal most_running
        while True:
            async with session.get(base + "/metrics") as response:
                text = await response.text()
            running = parse_metrics(text).total("sglang:num_running_reqs")
            most_running = max(most_running, running)
            await asyncio.sleep(0.02)

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        watcher = asyncio.create_task(watch(session))
        began = time.perf_counter()
        await asyncio.gather(*[one(session) for _ in range(requests)])
        elapsed = time.perf_counter() - began
        watcher.cancel()
    return requests * max_new / elapsed, most_running


def test_a_higher_kv_cap_raises_throughput_at_high_concurrency(tmp_path):
    # Each request holds 75 prompt + 20 new tokens: a 1,000-token pool runs 10 at once, in 5
    # waves of 20 steps (2.3 s by the model) where 20,000 run all 48 in 20 steps (0.6 s).
    results = {}
    for cap in (1000, 20000):
        handle = start_engine(
            tmp_path / f"engine-{cap}.log",
            *("--disable-cuda-graph", "--step-base-ms", "20", "--max-total-tokens", str(cap)),
        )
        try:
            results[cap] = asyncio.run(run_load(handle.base_url, 48, 20))
        finally:
            handle.stop()
    (small, small_running), (large, large_running) = results[1000], results[20000]
    assert small_running <= 10 < large_running
    assert large > 1.5 * small, results
