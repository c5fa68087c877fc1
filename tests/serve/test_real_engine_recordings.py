"""The service's reading of a server, checked against what a real sglang 0.5.11 printed and
served on an H200 (tests/fixtures/real_engine/, recorded by scripts/gpu-lab), and the test
engine checked against the same recordings, so the double cannot drift from the real thing.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from glm5svc.bench.serving_figures import parse_bench_line
from glm5svc.http_fetch import fetch_text
from glm5svc.metrics_text import parse_metrics
from glm5svc.serve.diagnosis import diagnose
from glm5svc.serve.phases import FIRED_UP, PRIORITY_ERR, Phase, parse_line
from glm5svc.serve.probes import PROGRESS_COUNTERS, parse_progress_counters
from glm5svc.serve.state import SupervisorState
from testkit.engine import TEST_ENGINE, free_port, start_engine

RECORDINGS = Path(__file__).resolve().parents[1] / "fixtures" / "real_engine"
RECORDED = RECORDINGS / "sglang-0.5.11-h200-service"
# The NSA FP8 prefill crash, unpatched and patched (2026-12-01, 05:43-05:49 UTC).
NSA_LOGS = RECORDINGS / "sglang-0.5.11-h200-nsa"
# glm5svc serve stopped with 64 requests in flight, after READY stopped asking /health.
DRAIN_LOG = RECORDINGS / "sglang-0.5.11-h200-drain-fast-ready" / "serve-drain.log"
EARLIER_DRAIN_LOG = RECORDINGS / "sglang-0.5.11-h200-drain" / "serve-drain.log"
# The service scenario with the split supervisor (2026-12-03, 08:32-08:39 UTC).
SPLIT = RECORDINGS / "sglang-0.5.11-h200-service-split-supervisor"
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


@pytest.mark.parametrize(
    "log",
    # Every recorded server that got as far as its KV pool (one refused at start did not).
    [p for p in sorted(RECORDINGS.glob("*/*.log")) if "max_total_num_tokens=" in p.read_text()],
    ids=lambda p: f"{p.parent.name}/{p.name}",
)
def test_the_kv_pool_of_a_real_server_is_read_from_its_log(log):
    """The KV line (0.5.11: "K size: ..., V size: ..."; NSA: "KV size: ...") gives the pool
    the scheduler reports as max_total_num_tokens."""
    lines = log.read_text().splitlines()
    state = SupervisorState(wedge_window_s=1)
    for line in lines:
        tokens = parse_line(line).kv_pool_tokens
        if tokens is not None:
            state.record_kv_pool(tokens)
    scheduler = [re.search(r"max_total_num_tokens=(\d+)", line) for line in lines]
    expected = [int(found.group(1)) for found in scheduler if found]
    assert expected and state.kv_pool_tokens == expected[0]
    assert state.snapshot().kv_pool_tokens == expected[0]


def test_scheduler_killed_under_load_is_diagnosed():
    found = diagnose(real_lines("serve-kill9.log"))
    assert [d.signature.id for d in found] == ["engine-child-killed"]
    assert "scheduler_0" in found[0].evidence


def test_a_clean_real_log_matches_no_failure_signature():
    assert diagnose(real_lines("bare.log")) == []


def test_the_real_nsa_prefill_crash_is_diagnosed_as_exactly_that():
    found = diagnose((NSA_LOGS / "nsa-unpatched.log").read_text().splitlines())
    assert [d.signature.id for d in found] == ["nsa-prefill-metadata"]
    assert found[0].evidence.startswith("AttributeError: 'PrefillMetadata'")


@pytest.mark.parametrize(
    "log",
    [NSA_LOGS / "nsa-patched.log", DRAIN_LOG, EARLIER_DRAIN_LOG, SPLIT / "serve.log"],
    ids=lambda p: p.parent.name,
)
def test_real_logs_that_served_and_drained_match_no_failure_signature(log):
    # The supervisor diagnoses the engine's output only; the serve logs also carry glm5svc's
    # own lines ("glm5svc: ..."), whose preflight warning names the HMM failure it guards.
    engine_lines = [
        line for line in log.read_text().splitlines() if not line.startswith("glm5svc:")
    ]
    assert len(engine_lines) > 100
    assert diagnose(engine_lines) == []


@pytest.mark.parametrize(
    ("log", "marker"),
    [
        (NSA_LOGS / "nsa-unpatched.log", "SIGQUIT received. signum=None"),
        (RECORDED / "serve-kill9.log", "SIGQUIT received. signum=None"),
        (RECORDED / "serve-kill9.log", "Subprocess scheduler_0 (pid="),
        (RECORDED / "serve.log", "Subprocess scheduler_0 (pid="),  # a group-wide SIGTERM
        (NSA_LOGS / "nsa-unpatched.log", "Scheduler hit an exception: Traceback"),
    ],
)
def test_real_failure_lines_are_logged_as_errors(log, marker):
    lines = [line for line in log.read_text().splitlines() if marker in line]
    assert lines and all(parse_line(line).priority == PRIORITY_ERR for line in lines)


def test_real_drain_lines_are_not_errors():
    drain = [line for line in DRAIN_LOG.read_text().splitlines() if "Gracefully exiting" in line]
    assert drain and all(parse_line(line).priority != PRIORITY_ERR for line in drain)


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


def _generate(port: int, max_new_tokens: int, into: list) -> None:
    body = json.dumps({"text": "x", "sampling_params": {"max_new_tokens": max_new_tokens}})
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/generate", body.encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        into.append(json.loads(reply.read()))


def _running(port: int) -> float:
    text = fetch_text(f"http://127.0.0.1:{port}/metrics", timeout_s=2)
    return parse_metrics(text).total("sglang:num_running_reqs")


@pytest.fixture(scope="module")
def test_engine_output():
    """The test engine's output from start to the end of a drain with one request in flight."""
    port = free_port()
    engine = subprocess.Popen(
        [sys.executable, str(TEST_ENGINE), "--host", "127.0.0.1", "--port", str(port),
         "--model-path", "/models/x", "--test-mode", "load=0.1,ranks=1,drain-check=0.2"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    replies: list = []
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:  # once ready (the warm-up generation done), as a real server after it
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).close()
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as reply:
                    metrics = reply.read().decode()
                break
            except OSError:
                time.sleep(0.1)
        else:
            pytest.fail("the test engine did not start")
        in_flight = threading.Thread(target=_generate, args=(port, 60, replies))
        in_flight.start()
        while _running(port) < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        engine.terminate()  # SIGTERM to the launcher: sglang 0.5.11's drain
        output = engine.communicate(timeout=15)[0]
    in_flight.join(10)
    assert replies and replies[0]["meta_info"]["completion_tokens"] == 60  # drained in full
    return output.replace("\r", "\n").splitlines(), metrics


# Lines of the reference deployment (GLM-5-NVFP4 from real safetensors shards, FlashInfer
# MoE autotune) that a random-weights llama on the H200 does not print.
REFERENCE_ONLY = {"Loading safetensors checkpoint shards:", "Running FlashInfer autotune...",
                  "FlashInfer autotune completed."}  # fmt: skip


def test_test_engine_prints_the_lines_a_real_server_prints(test_engine_output):
    lines, _ = test_engine_output
    real = {shape(line) for name in ("bare.log", "serve.log") for line in real_lines(name)}
    real |= {shape(line) for line in DRAIN_LOG.read_text().splitlines()}
    printed = [shape(line) for line in lines if line.strip()]
    unknown = [s for s in printed if s not in real and s not in REFERENCE_ONLY]
    assert not unknown, f"test engine lines with no real counterpart: {unknown}"


def test_test_engine_drains_as_the_real_server_logs_it(test_engine_output):
    lines, _ = test_engine_output
    drain_words = ("SIGTERM received", "Gracefully exiting")
    real = [
        line for line in DRAIN_LOG.read_text().splitlines() if any(w in line for w in drain_words)
    ]
    printed = [line for line in lines if any(w in line for w in drain_words)]
    assert {shape(line) for line in printed} == {shape(line) for line in real}
    # Both count down from the requests in flight to none, then exit.
    for found in (printed, real):
        counts = [
            int(n) for n in re.findall(r"Remaining number of requests (\d+)", "\n".join(found))
        ]
        assert counts[0] >= 1 and counts[-1] == 0


def _frames(lines: list[str]) -> list[str]:
    """A crash's lines from sglang's header to its SIGQUIT line, without timestamps and with
    the site-packages folder dropped from frame paths (the H200 lab and the deployment differ)."""
    start = next(i for i, line in enumerate(lines) if "Scheduler hit an exception" in line)
    end = next(i for i, line in enumerate(lines) if "SIGQUIT received" in line)
    return [
        re.sub(r'File "/\S*/(?=sglang/|torch/)', 'File "', PREFIX.sub("", line.strip()))
        for line in lines[start : end + 1]
        if line.strip()
    ]


def test_test_engine_prefill_metadata_crash_prints_what_sglang_0_5_11_printed():
    port = free_port()
    engine = subprocess.Popen(
        [sys.executable, str(TEST_ENGINE), "--host", "127.0.0.1", "--port", str(port),
         "--test-mode", "load=0,ranks=1,crash=prefill-metadata"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and engine.poll() is None:
            try:
                _generate(port, 1, [])
            except OSError:
                time.sleep(0.1)
    finally:
        engine.kill()
        output = engine.communicate(timeout=15)[0]
    printed = _frames(output.splitlines())
    real = _frames((NSA_LOGS / "nsa-unpatched.log").read_text().splitlines())
    assert len(printed) >= 10
    assert printed[0] == real[0] == "Scheduler hit an exception: Traceback (most recent call last):"
    assert printed[-2:] == real[-2:]  # the exception, then the launcher's SIGQUIT line
    missing = [line for line in printed if line not in real]
    assert not missing, f"test engine crash lines sglang 0.5.11 did not print: {missing}"
    assert diagnose(output.splitlines())[0].signature.id == "nsa-prefill-metadata"


def test_test_engine_metrics_are_a_subset_of_real_ones(test_engine_output):
    _, metrics = test_engine_output
    names = lambda text: set(re.findall(r"^(sglang:\w+)", text, re.M))  # noqa: E731
    real = set().union(*(names(path.read_text()) for path in REAL_METRICS))
    assert names(metrics) and names(metrics) <= real
    assert set(PROGRESS_COUNTERS) <= names(metrics)


REAL_METRICS = [
    RECORDINGS / run / name
    for run in ("sglang-0.5.11-h200-service", "sglang-0.5.11-h200-service-new-drain")
    for name in ("metrics-idle.txt", "metrics-under-load.txt")
]
SAMPLE = re.compile(r"^(sglang:\w+)\{([^}]*)\} \S+$")


def metric_families(texts: list[str]) -> dict[str, dict]:
    """Each sglang: family's HELP and TYPE lines, label names and label values."""
    families: dict[str, dict] = {}
    for text in texts:
        for line in text.splitlines():
            if line.startswith(("# HELP sglang:", "# TYPE sglang:")):
                name = line.split()[2]
                families.setdefault(name, {"meta": set(), "keys": set(), "values": {}})
                families[name]["meta"].add(line)
            elif found := SAMPLE.match(line):
                name = found.group(1)
                base = re.sub(r"_(bucket|sum|count)$", "", name)
                if base != name and base in families:  # a histogram's series
                    name = base
                family = families.setdefault(name, {"meta": set(), "keys": set(), "values": {}})
                labels = dict(re.findall(r'(\w+)="([^"]*)"', found.group(2)))
                family["keys"].add(tuple(labels))
                for key, value in labels.items():
                    family["values"].setdefault(key, set()).add(value)
    return families


def test_test_engine_metrics_match_real_ones_in_help_type_and_labels(tmp_path):
    """Every family the test engine serves, with a prefix-cache hit among its requests, has
    sglang 0.5.11's HELP and TYPE lines, label names (in order) and fixed label values."""
    handle = start_engine(tmp_path / "engine.log", "--served-model-name", "tiny")
    try:
        body = json.dumps({"input_ids": list(range(40)), "sampling_params": {"max_new_tokens": 3}})
        for _ in range(2):
            request = urllib.request.Request(handle.base_url + "/generate", body.encode())
            with urllib.request.urlopen(request, timeout=10) as reply:
                reply.read()
        with urllib.request.urlopen(handle.base_url + "/metrics", timeout=10) as reply:
            served = metric_families([reply.read().decode()])
    finally:
        handle.stop()
    real = metric_families([path.read_text() for path in REAL_METRICS])
    assert {
        "sglang:cached_tokens_total",
        "sglang:realtime_tokens_total",
        "sglang:time_to_first_token_seconds",
        "sglang:inter_token_latency_seconds",
        "sglang:e2e_request_latency_seconds",
        "sglang:queue_time_seconds",
        "sglang:http_responses_total",
        "sglang:cuda_graph_passes_total",
    } <= set(served)
    assert served["sglang:realtime_tokens_total"]["values"]["mode"] == {
        "prefill_compute", "prefill_cache", "decode"
    }  # fmt: skip
    # A forward pass's mode is its phase and whether a CUDA graph ran it; the recordings
    # ran with decode graphs off, so only their decode_none is recorded.
    graph_modes = {f"{phase}_{graph}" for phase in ("prefill", "decode")
                   for graph in ("cuda_graph", "none")}  # fmt: skip
    assert real["sglang:cuda_graph_passes_total"]["values"]["mode"] <= graph_modes
    assert served["sglang:cuda_graph_passes_total"]["values"]["mode"] == {
        "prefill_cuda_graph", "decode_cuda_graph"
    }  # fmt: skip
    for name, family in served.items():
        assert family["meta"] and family["meta"] <= real[name]["meta"], name
        assert family["keys"] <= real[name]["keys"], name
        for key, values in family["values"].items():
            # The model's name and the HTTP routes and answers the requests sent decide.
            if (name, key) == ("sglang:cuda_graph_passes_total", "mode"):
                assert values <= graph_modes
            elif key not in ("model_name", "endpoint", "status_code"):
                assert values <= real[name]["values"][key], (name, key)


def batch_line_template(line: str) -> str:
    text = PREFIX.sub("", line.strip())
    return re.sub(r"\d+(?:\.\d+)?", "N", re.sub(r"\b(True|False)\b", "B", text))


def test_test_engine_batch_lines_have_the_real_wording(test_engine_output):
    """The Prefill batch and Decode batch lines, numbers aside, are word for word what
    sglang 0.5.11 logged (every recorded log)."""
    real = {
        batch_line_template(line)
        for path in RECORDINGS.rglob("*.log")
        for line in path.read_text().splitlines()
        if PREFIX.match(line) and ("Prefill batch" in line or "Decode batch" in line)
    }
    lines, _ = test_engine_output
    printed = [line for line in lines if "Prefill batch" in line or "Decode batch" in line]
    assert any("Prefill batch" in line for line in printed)
    assert any("Decode batch" in line for line in printed)
    assert {batch_line_template(line) for line in printed} <= real


def progress_template(line: str) -> str:
    """A tqdm line with its numbers, bar blocks and padding blanked."""
    text = re.sub(r"[\u2580-\u259f]", " ", re.sub(r"\d+(?:\.\d+)?", "N", line.strip()))
    return re.sub(r"\s+", " ", text)


def test_test_engine_jit_start_prints_the_real_compile_lines(tmp_path):
    """jit=: the compile phase's lines are shaped as sglang 0.5.11's first start printed them,
    and its progress bar reads as the real one, numbers aside."""
    command = [sys.executable, str(TEST_ENGINE), "--port", str(free_port()),
               "--test-mode", "load=0,ranks=1,jit=0.3"]  # fmt: skip
    engine = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={"SGLANG_CACHE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    lines = []
    try:
        for line in engine.stdout:
            lines += line.replace("\r", "\n").splitlines()
            if "Capture piecewise CUDA graph end" in line:
                break
    finally:
        engine.kill()
        engine.communicate(timeout=10)
    real_lines = (RECORDED / "bare.log").read_text().replace("\r", "\n").splitlines()
    real = {shape(line) for line in real_lines}
    unknown = [line for line in lines if line.strip() and shape(line) not in real | REFERENCE_ONLY]
    assert not unknown, unknown
    bars = [line for line in lines if line.startswith("Compiling num tokens")]
    real_bars = {
        progress_template(line)
        for line in real_lines
        if line.startswith("Compiling num tokens") and line.endswith(("s/it]", "it/s]"))
    }
    assert len(bars) > 10
    assert {progress_template(line) for line in bars[1:]} <= real_bars
    assert any(line.startswith("Compiling num tokens (num_tokens=4): 100%") for line in bars)


def test_recorded_run_says_where_and_when():
    machine = json.loads((RECORDED / "results.json").read_text())["machine"]
    assert machine["sglang"] == "0.5.11" and "H200" in machine["gpus"][0]
    assert FIRED_UP.search("\n".join(real_lines("bare.log")))


def test_the_split_supervisor_drained_a_real_server_and_left_nothing():
    """What the service scenario recorded on the H200 after the supervisor was split: READY
    once the generation check passed, the drain summary line with every request of the stop
    finished, and no process of the group left."""
    service = json.loads((SPLIT / "results.json").read_text())["service"]
    drain = service["drain"]
    assert drain["serve_exit"] == 0 and drain["processes_left"] == []
    assert drain["in_flight"]["completed_in_full"] == drain["in_flight"]["sent"] == 64
    assert drain["readyz_0_3s_after_stop"] == 503
    log = (SPLIT / "serve.log").read_text().splitlines()
    ready = [line for line in log if line.startswith("glm5svc: ready after ")]
    finished = [line for line in log if line.startswith("glm5svc: drain finished (drained)")]
    assert len(ready) == 1 and "generation check: " in ready[0]
    assert len(finished) == 1 and finished[0].endswith("processes left: 0")
    assert log.index(ready[0]) < log.index(finished[0])
