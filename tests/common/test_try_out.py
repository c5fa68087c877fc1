"""`scripts/try`, the GPU-free try-out, runs from start to clean stop (its short mode)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

from testkit.bench_venv import build_bench_serving_venv

REPO = Path(__file__).resolve().parents[2]


def test_the_try_out_serves_reports_benchmarks_and_stops_cleanly():
    build_bench_serving_venv()  # the try-out reuses the tests' bench_serving venv
    run = subprocess.run(
        [str(REPO / "scripts" / "try"), "--short"],
        capture_output=True, text=True, cwd="/", timeout=300,
    )  # fmt: skip
    out = run.stdout
    assert run.returncode == 0, out + run.stderr
    assert re.search(r"try: ready after [\d.]+ s; glm5svc status:\nglm5svc \S+: serving\n", out)
    assert "ready: yes" in out and "KV pool: " in out
    assert "concurrency 4: " in run.stdout + run.stderr
    assert "try: serve exited with 0; glm5svc status now exits 3" in out
    # What it says it runs is what it runs: the configuration whole, the bench command exactly.
    config_path = re.search(r"try: configuration (\S+):\n", out).group(1)
    printed = out.split(f"try: configuration {config_path}:\n", 1)[1]
    assert printed.startswith(Path(config_path).read_text())
    said = re.search(r"^try: (\S+ -m glm5svc --config \S+ bench .*)$", out, re.MULTILINE).group(1)
    assert shlex.split(said)[4:] == [
        config_path, "bench", "--ladder", "4", "--input-len", "64", "--output-len", "16",
        "--num-prompts", "32", "--warmup-requests", "2", "--baseline", "none",
    ]  # fmt: skip
    work = Path(re.search(r"everything is in (\S+)", out).group(1))
    [summary] = (work / "results" / "bench").glob("*/summary.json")
    levels = json.loads(summary.read_text())["levels"]
    # Steady windows: 32 prompts is the first run's size, later runs are sized to the window.
    assert [(lv["concurrency"], lv["error"]) for lv in levels] == [(4, None)]
    assert levels[0]["completed"] == levels[0]["requested"] >= 32
    assert len(levels[0]["steady"]["windows"]) == 2
    assert "drain" in (work / "serve.log").read_text()  # stopped by serve's own drain
