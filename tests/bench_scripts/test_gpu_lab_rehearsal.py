"""scripts/gpu-lab's scenarios rehearsed on the CPU against the test engine, so that a GPU
run is never the first to find a broken runner (docs/gpu-lab.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testkit.bench_venv import build_bench_serving_venv
from testkit.engine import TEST_ENGINE

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # the bench_serving venv (built once per machine) makes the tokenizers
def test_drain_scenario_rehearsed_on_the_test_engine(tmp_path):
    bench_python = build_bench_serving_venv()
    env = dict(
        os.environ,
        OUT=str(tmp_path / "out"),
        GPU_LAB_ENGINE=f"{sys.executable} {TEST_ENGINE}",
        GPU_LAB_BENCH_PYTHON=str(bench_python),
        GPU_LAB_DRAIN_TOKENS="60",
    )
    done = subprocess.run(
        [sys.executable, "-m", "lab.gpu.remote", "drain", "--budget", "120"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=200,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    drain = json.loads((tmp_path / "out" / "results.json").read_text())["drain"]
    assert "error" not in drain, drain
    assert drain["running_at_stop"] >= 60
    assert drain["in_flight"]["completed_in_full"] == drain["in_flight"]["sent"] == 64
    assert drain["readyz_0_3s_after_stop"] == 503
    assert drain["serve_exit"] == 0 and drain["processes_left"] == []
    assert (tmp_path / "out" / "recorded.tar.gz").exists()
