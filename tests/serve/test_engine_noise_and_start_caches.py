"""The test engine's noise model across starts and runs (start-effect=, run-noise=, drift=)
and its start-up caches (jit= with a marker in the cache folder, --skip-server-warmup)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from testkit import sglang_test_engine as model
from testkit.engine import TEST_ENGINE, free_port


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def engine_for(mode: str, start_index: int = 0, clock: Clock | None = None) -> model.Engine:
    args = model.parse_args(["--disable-cuda-graph", "--test-mode", mode])
    return model.Engine(args, clock=clock or Clock(), start_index=start_index)


def factor(engine: model.Engine) -> float:
    return engine.step_ms(10, 0) / model.predicted_step_ms(engine.args, 10, 0)


def test_start_effect_is_one_factor_per_start_seeded_by_the_start_count():
    starts = [factor(engine_for("start-effect=0.3,seed=5", index)) for index in range(6)]
    assert starts == [factor(engine_for("start-effect=0.3,seed=5", i)) for i in range(6)]
    assert len(set(starts)) == 6 and min(starts) < 1 < max(starts)
    engine = engine_for("start-effect=0.3,seed=5", 2)
    assert {engine.step_ms(10, 0) for _ in range(5)} == {engine.step_ms(10, 0)}  # per start
    assert factor(engine_for("start-effect=0.3,seed=6", 2)) != starts[2]
    assert factor(engine_for("seed=5", 2)) == 1.0


def test_start_effect_without_a_seed_differs_by_process():
    assert model.noise_seed({}, 4) == model.noise_seed({}, 0)  # the pid, not the counter
    assert model.noise_seed({"seed": "1"}, 4) != model.noise_seed({"seed": "1"}, 0)


def test_run_noise_changes_every_window_and_holds_within_one():
    clock = Clock()
    engine = engine_for("run-noise=0.2,run-noise-s=30,seed=1", clock=clock)
    engine.serving_since = clock.now
    windows = []
    for window in range(5):
        clock.now = 1000.0 + window * 30 + 1
        first = factor(engine)
        clock.now += 28
        assert factor(engine) == pytest.approx(first)
        windows.append(first)
    assert len(set(windows)) == 5
    again = engine_for("run-noise=0.2,run-noise-s=30,seed=1", clock=clock)
    again.serving_since = 1000.0
    assert factor(again) == pytest.approx(windows[-1])


def test_drift_grows_the_step_linearly_with_serving_time():
    clock = Clock()
    engine = engine_for("drift=0.1", clock=clock)
    assert factor(engine) == 1.0  # not serving yet
    engine.serving_since = clock.now
    assert factor(engine) == pytest.approx(1.0)
    clock.now += 120
    assert factor(engine) == pytest.approx(1.2)


def test_the_start_counter_counts_starts_in_the_cache_folder(tmp_path):
    assert [model.next_start_index(tmp_path / "sglang") for _ in range(3)] == [0, 1, 2]
    assert (tmp_path / "sglang" / model.START_COUNTER).read_text() == "3\n"


def test_the_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("SGLANG_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert model.cache_dir() == tmp_path / ".cache" / "sglang"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert model.cache_dir() == tmp_path / "xdg" / "sglang"
    monkeypatch.setenv("SGLANG_CACHE_DIR", str(tmp_path / "own"))
    assert model.cache_dir() == tmp_path / "own"


def test_the_jit_marker_is_keyed_by_the_kernel_flags(tmp_path):
    def marker(*argv: str):
        return model.jit_marker(model.parse_args(list(argv)), tmp_path)

    assert marker() == marker("--mem-fraction-static", "0.8", "--page-size", "64")
    for flags in (
        ("--attention-backend", "fa3"),
        ("--moe-runner-backend", "triton"),
        ("--disable-cuda-graph",),
        ("--max-running-requests", "64"),
        ("--chunked-prefill-size", "4096"),
    ):
        assert marker(*flags) != marker(), flags


def start_output(cache: str, *argv: str) -> str:
    """The test engine's output from start to its ready line (then stopped)."""
    command = [sys.executable, str(TEST_ENGINE), "--port", str(free_port()), *argv]
    env = {"SGLANG_CACHE_DIR": cache, "PATH": "/usr/bin:/bin"}
    engine = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    lines = []
    try:
        for line in engine.stdout:
            lines.append(line)
            if "The server is fired up and ready to roll!" in line:
                break
    finally:
        engine.kill()
        engine.communicate(timeout=10)
    return "".join(lines).replace("\r", "\n")


def capture_seconds(output: str) -> float:
    found = re.search(r"Capture piecewise CUDA graph end\. Time elapsed: ([\d.]+) s", output)
    return float(found.group(1))


def test_a_second_start_with_the_cache_kept_skips_the_compile(tmp_path):
    cache = str(tmp_path / "cache")
    mode = ("--test-mode", "load=0,ranks=1,jit=1")
    cold = start_output(cache, *mode)
    markers = list((tmp_path / "cache" / model.JIT_FOLDER).iterdir())
    warm = start_output(cache, *mode)
    other_flags = start_output(cache, *mode, "--attention-backend", "fa3")
    assert len(markers) == 1
    assert "Compiling num tokens (num_tokens=8192):" in cold
    assert "Compiling a graph for dynamic shape takes" in cold
    assert capture_seconds(cold) >= 1.0
    assert "Compiling num tokens" not in warm and capture_seconds(warm) < 1.0
    assert "Compiling num tokens" in other_flags  # other kernels: compiled again
    fresh = start_output(str(tmp_path / "other-cache"), *mode)
    assert "Compiling num tokens" in fresh


def test_skip_server_warmup_sends_no_generation_yet_prints_the_ready_line(tmp_path):
    cache = str(tmp_path / "cache")
    warmed = start_output(cache, "--test-mode", "load=0,ranks=1")
    skipped = start_output(cache, "--test-mode", "load=0,ranks=1", "--skip-server-warmup")
    assert "Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 0" in warmed
    assert "Prefill batch" not in skipped
    assert "The server is fired up and ready to roll!" in skipped
    assert "skip_server_warmup=True" in skipped
