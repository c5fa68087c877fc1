"""The service's reading of a server, checked against what a real sglang 0.5.11 printed and
served on an H200 (tests/fixtures/real_engine/, recorded by scripts/gpu-lab), and the test
engine checked against the same recordings, so the double cannot drift from the real thing.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from glm5svc.bench.serving_figures import parse_bench_line
from glm5svc.serve.diagnosis import diagnose
from glm5svc.serve.phases import FIRED_UP, Phase, parse_line
from glm5svc.serve.probes import PROGRESS_COUNTERS, parse_progress_counters
from testkit.engine import TEST_ENGINE, free_port

RECORDED = (
    Path(__file__).resolve().parents[1] / "fixtures" / "real_engine" / "sglang-0.5.11-h200-service"
)
PREFIX = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?: TP\d+)?\] ")


def real_lines(name: str) -> list[str]:
    return (RECORDED / name).read_text().splitlines()


def shape(line: str) -> str:
    """A log line's fixed words: the text before its first number, '=' or '(' once the
    timestamp prefix is gone ("Load weight end. elapsed=0.09 s" -> "Load weight end. elapsed")."""
    text = PREFIX.sub("", line.strip())
    return re.split(r"[\d=(\[]", text, maxsplit=1)[0].strip()


def test_startup_phases_of_a_real_server_are_recognised_in_order():
    phases, steps, fired = [], 0, None
    for number, line in enumerate(real_lines("bare.log")):
        info = parse_line(line)
        if info.phase and (not phases or phases[-1] != info.phase):
            phases.append(info.phase)
        steps += info.startup_step
        if info.fired_up and fired is None:
            fired = number
    assert phases[:2] == [Phase.LOADING, Phase.WARMUP]
    assert fired is not None
    # The 45 s piecewise CUDA graph capture of 0.5.11 is warm-up, not loading.
    capture = next(
        line for line in real_lines("bare.log") if "Capture piecewise CUDA graph begin" in line
    )
    assert parse_line(capture).phase is Phase.WARMUP and parse_line(capture).startup_step
    assert steps >= 6


def test_compile_progress_of_a_real_server_counts_as_progress():
    bars = [
        parse_line(line)
        for line in real_lines("bare.log")
        if line.startswith("Compiling num tokens")
    ]
    assert bars and all(info.progress_percent is not None for info in bars)
    assert max(info.progress_percent for info in bars) == 100


def test_scheduler_killed_under_load_is_diagnosed():
    found = diagnose(real_lines("serve-kill9.log"))
    assert [d.signature.id for d in found] == ["engine-child-killed"]
    assert "scheduler_0" in found[0].evidence


def test_a_clean_real_log_matches_no_failure_signature():
    assert diagnose(real_lines("bare.log")) == []


@pytest.mark.parametrize("name", ["metrics-idle.txt", "metrics-under-load.txt"])
def test_progress_counters_are_read_from_real_metrics(name):
    counters = parse_progress_counters((RECORDED / name).read_text())
    assert set(counters) == set(PROGRESS_COUNTERS)
    if name == "metrics-under-load.txt":
        assert counters["sglang:generation_tokens_total"] > 0


def test_running_requests_gauge_is_what_the_drain_watches():
    text = (RECORDED / "metrics-under-load.txt").read_text()
    assert re.search(r"^sglang:num_running_reqs\{[^}]*\} [0-9.e+]+$", text, re.M)
    # The run polled that gauge before stopping the service with 64 requests in flight.
    drain = json.loads((RECORDED / "results.json").read_text())["service"]["drain"]
    assert drain["running_at_stop"] == drain["in_flight_requests"] == 64


def test_real_bench_serving_lines_parse():
    lines = (RECORDED / "bench_serving.jsonl").read_text().splitlines()
    results = [parse_bench_line(line) for line in lines]
    assert all(r.completed > 0 and r.total_throughput > 0 for r in results)


@pytest.fixture(scope="module")
def test_engine_output():
    port = free_port()
    engine = subprocess.Popen(
        [sys.executable, str(TEST_ENGINE), "--host", "127.0.0.1", "--port", str(port),
         "--model-path", "/models/x", "--test-mode", "load=0.1,ranks=1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as reply:
                    metrics = reply.read().decode()
                break
            except OSError:
                time.sleep(0.1)
        else:
            pytest.fail("the test engine did not start")
    finally:
        engine.terminate()
        output = engine.communicate(timeout=15)[0]
    return output.replace("\r", "\n").splitlines(), metrics


# Lines of the reference deployment (GLM-5-NVFP4 from real safetensors shards, FlashInfer
# MoE autotune) that a random-weights llama on the H200 does not print.
REFERENCE_ONLY = {"Loading safetensors checkpoint shards:", "Running FlashInfer autotune...",
                  "FlashInfer autotune completed."}  # fmt: skip


def test_test_engine_prints_the_lines_a_real_server_prints(test_engine_output):
    lines, _ = test_engine_output
    real = {shape(line) for name in ("bare.log", "serve.log") for line in real_lines(name)}
    printed = [shape(line) for line in lines if line.strip()]
    unknown = [s for s in printed if s not in real and s not in REFERENCE_ONLY]
    assert not unknown, f"test engine lines with no real counterpart: {unknown}"


def test_test_engine_metrics_are_a_subset_of_real_ones(test_engine_output):
    _, metrics = test_engine_output
    names = lambda text: set(re.findall(r"^(sglang:\w+)", text, re.M))  # noqa: E731
    real = names((RECORDED / "metrics-under-load.txt").read_text())
    assert names(metrics) and names(metrics) <= real
    assert set(PROGRESS_COUNTERS) <= names(metrics)


def test_recorded_run_says_where_and_when():
    machine = json.loads((RECORDED / "results.json").read_text())["machine"]
    assert machine["sglang"] == "0.5.11" and "H200" in machine["gpus"][0]
    assert FIRED_UP.search("\n".join(real_lines("bare.log")))
