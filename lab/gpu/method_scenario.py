"""The measurement method on the real engine: one setting, several engine starts, steady
windows of fresh prompts.

The qwen3-moe testbed (lab/gpu/models.py, Qwen3's 151,936-token vocabulary) is started
bare with the launch plan's own argv, `glm5svc bench` measures it at one concurrency
(per-run seeds, the radix cache flushed before each run, a warm-up until two windows
agree, then `windows` steady windows), and the engine is stopped; again, as many starts as
the time allows (GPU_LAB_METHOD_STARTS at most). Recorded per start: the server's log
(its "Prefill batch" lines show what each run found cached) and the bench summary, whose
levels carry every window. The figures: the spread of windows within a start, the spread
of per-start means from start to start, and the cached share of every measured window.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import statistics
from pathlib import Path

import yaml

from lab.gpu.common import (
    BARE_PORT,
    BENCH_PYTHON,
    FIRED_UP,
    Deadline,
    Process,
    log,
    plan_launch,
    run_glm5svc,
    stop_gracefully,
    write_h200_config,
)

CONCURRENCY = int(os.environ.get("GPU_LAB_METHOD_CONCURRENCY", "256"))
INPUT_LEN, OUTPUT_LEN = 512, 128
WINDOWS = int(os.environ.get("GPU_LAB_METHOD_WINDOWS", "3"))
WINDOW_S = float(os.environ.get("GPU_LAB_METHOD_WINDOW_S", "30"))
STARTS = int(os.environ.get("GPU_LAB_METHOD_STARTS", "2"))
# The first run sized near a window already (the H200 held 256 for 29-33 s with 2,832).
MIN_PROMPTS = int(os.environ.get("GPU_LAB_METHOD_MIN_PROMPTS", "2800"))
START_WAIT_S = float(os.environ.get("GPU_LAB_METHOD_START_WAIT_S", "240"))
# A start, its warm-up and its windows: below this much time left, no new start.
START_COST_S = float(os.environ.get("GPU_LAB_METHOD_START_COST_S", "200"))


def write_method_config(dest: Path, model_dir: Path, results_dir: Path) -> Path:
    write_h200_config(dest, model_dir, results_dir)
    config = yaml.safe_load(dest.read_text())
    config["model"]["served_name"] = model_dir.name
    config["gpus"].update(target="sm90", expected_count=1, compute_capability="9.0")
    config["tuning"].update(
        mem_fraction_static=0.6, attention_backend="triton", max_running_requests=CONCURRENCY,
        cuda_graph=True,
    )  # fmt: skip
    config["server"]["port"] = BARE_PORT
    config["server"]["extra_args"] = [
        "--sampling-backend", "pytorch", "--grammar-backend", "none",
        "--disable-piecewise-cuda-graph",
    ]  # fmt: skip
    config["service"]["run_preflight"] = False
    benchmark = config.setdefault("benchmark", {})
    benchmark.update(
        post_start={"enabled": False}, steady=True, ladder=[CONCURRENCY], input_len=INPUT_LEN,
        output_len=OUTPUT_LEN, windows=WINDOWS, min_prompts=MIN_PROMPTS, window_s=WINDOW_S,
        warmup_max_s=150,
        baseline=None, python=BENCH_PYTHON,
    )  # fmt: skip
    dest.write_text(yaml.safe_dump(config, sort_keys=False))
    return dest


def _summary(results_dir: Path) -> dict | None:
    found = sorted(results_dir.rglob("summary.json"), key=lambda p: p.stat().st_mtime)
    return json.loads(found[-1].read_text()) if found else None


def run(out: Path, env: dict[str, str], deadline: Deadline, results: dict, model: Path) -> None:
    recorded = out / "recorded" / "method"
    recorded.mkdir(parents=True, exist_ok=True)
    config = write_method_config(out / "method.yaml", model, out / "method-results")
    argv, launch_env = plan_launch(config, env, BARE_PORT)
    results["argv"] = argv
    starts: list[dict] = []
    results["starts"] = starts
    for number in range(1, STARTS + 1):
        if deadline.left() < START_COST_S:
            log(f"method: {deadline.left():.0f} s left, no start {number}")
            break
        server = Process(f"start{number}", argv, launch_env, recorded)
        ready = server.wait_for(FIRED_UP, Deadline(min(START_WAIT_S, deadline.left())))
        start = {"number": number, "fired_up_s": ready and round(ready - server.started, 1)}
        starts.append(start)
        if ready is None:
            start["error"] = "not fired up"
            stop_gracefully(server, 30)
            continue
        budget = max(30, deadline.left() - 40)
        bench = run_glm5svc(config, env, "bench", "--json", timeout=budget)
        start["bench_exit"] = bench.returncode
        (recorded / f"start{number}-bench.json").write_text(bench.stdout)
        (recorded / f"start{number}-bench.stderr").write_text(bench.stderr[-20000:])
        summary = _summary(out / "method-results")
        if summary:
            level = (summary.get("levels") or [{}])[0]
            start["steady"] = level.get("steady")
            start["error"] = level.get("error")
        start["stop"] = stop_gracefully(server, 60)
        log(f"method: start {number}: {json.dumps(figures([start]))}")
    results["figures"] = figures(starts)
    shutil.rmtree(out / "method-results", ignore_errors=True)


def figures(starts: list[dict]) -> dict:
    """Within-start and start-to-start spreads, and the cached share of each window."""
    per_start, within, cached = [], [], []
    for start in starts:
        steady = start.get("steady") or {}
        values = [v for v in steady.get("throughputs") or [] if v]
        for window in steady.get("windows") or []:
            share = (window.get("window") or {}).get("cached_share")
            cached.append(share)
        if values:
            per_start.append(statistics.fmean(values))
        if len(values) >= 2:
            within.append(statistics.stdev(values) / statistics.fmean(values))
    between = statistics.stdev([math.log(v) for v in per_start]) if len(per_start) >= 2 else None
    return {
        "per_start_mean_tok_s": per_start,
        "within_start_cv": within,
        "start_to_start_sd_log": between,
        "window_cached_shares": cached,
    }
