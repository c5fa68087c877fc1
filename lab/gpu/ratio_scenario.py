"""The supervision cost, resolved: supervised/bare throughput ratio on one GPU, by pairs.

A bare `sglang.launch_server` and the same argv under `glm5svc serve` (the launch plan's
own argv, another port) run side by side on the qwen3-moe testbed (lab/gpu/models.py).
Two servers on one GPU are only comparable with the same KV pool: the second to start
sizes its pool from the memory the first left (tuning-facts: 74,734 against 453,312
tokens), so both are pinned with `--max-total-tokens` and the same
`--mem-fraction-static`, and the pools sglang logs (`KV Cache is allocated. #tokens: N`)
are recorded and compared. Both start at the same time (a minute saved).

After a discarded warm-up run on each, bench_serving runs alternate bare / supervised at
two concurrencies; consecutive runs at one concurrency (the same prompts, from the same
seed) make a pair, which goes first alternates from pair to pair, and the ratio is the
mean of the pairs' supervised/bare total throughput with a Student's t 95 % interval. The
runs go on until its half-width is at most 1 % (after MIN_PAIRS pairs) or the time is
spent. bench_serving runs in one process per server (lab/gpu/bench_driver.py), so a run
costs its own seconds, not 10-15 s of imports.
"""

from __future__ import annotations

import json
import math
import os
import queue
import shutil
import signal
import statistics
import subprocess
import threading
import time
from pathlib import Path

import yaml

from glm5svc.child_group import spawn
from lab.gpu.common import (
    BARE_PORT,
    BENCH_PYTHON,
    ENGINE_PORT,
    FIRED_UP,
    LAB,
    REPO,
    STARTED_GROUPS,
    Deadline,
    NotifySocket,
    Process,
    bench_figures,
    bench_serving_args,
    glm5svc_argv,
    kv_pool_tokens,
    log,
    plan_launch,
    stop_gracefully,
    write_h200_config,
)

DRIVER = Path(__file__).resolve().parent / "bench_driver.py"
CONCURRENCIES = tuple(int(c) for c in os.environ.get("GPU_LAB_RATIO_LEVELS", "32,128").split(","))
# Shorter in a CPU rehearsal (GPU_LAB_RATIO_INPUT_LEN, _OUTPUT_LEN).
INPUT_LEN = int(os.environ.get("GPU_LAB_RATIO_INPUT_LEN", "512"))
OUTPUT_LEN = int(os.environ.get("GPU_LAB_RATIO_OUTPUT_LEN", "128"))
# 128 requests of 512 + 128 tokens hold 81,920 tokens: a pool under that makes the
# scheduler queue or retract at 128 and measures the pool, not the supervision.
MAX_TOTAL_TOKENS = int(os.environ.get("GPU_LAB_RATIO_TOKENS", "100000"))
# Both servers load 30 GB of weights before either measures what is left; sglang's pool
# is what is free after loading minus (1 - fraction) of what was free before it, so the
# fraction must leave room for the other server's weights too (0.6: >= 11 GB for a pool
# of 4.9 GB even when both load at the same moment).
MEM_FRACTION = 0.6
RUN_SECONDS = float(os.environ.get("GPU_LAB_RATIO_RUN_S", "6"))
MAX_PAIRS = int(os.environ.get("GPU_LAB_RATIO_MAX_PAIRS", "200"))
MIN_PAIRS = 2 * len(CONCURRENCIES)
TARGET_HALF_WIDTH = 0.01
STOP_RESERVE_S = 50.0  # for stopping both servers (20 s each at most) and the drivers
# Two-sided 95 % Student's t quantiles for 1..30 degrees of freedom.
T_975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201,
         2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074,
         2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]  # fmt: skip


def t_975(df: int) -> float:
    """Student's t 0.975 quantile: the table, then the Cornish-Fisher expansion (within
    0.001 from 30 degrees of freedom)."""
    if df < 1:
        return math.inf
    if df <= len(T_975):
        return T_975[df - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def interval(values: list[float]) -> dict:
    """Mean and the 95 % confidence half-width of the mean (Student's t)."""
    n = len(values)
    if n == 0:
        return {"n": 0}
    mean = statistics.fmean(values)
    if n == 1:
        return {"n": 1, "mean": round(mean, 5), "half_width_95": None}
    sd = statistics.stdev(values)
    t = t_975(n - 1)
    return {
        "n": n,
        "mean": round(mean, 5),
        "sd": round(sd, 5),
        "t_975": round(t, 4),
        "half_width_95": round(t * sd / math.sqrt(n), 5),
    }


class BenchDriver:
    """lab/gpu/bench_driver.py in its own process group: one bench_serving run at a time."""

    def __init__(self, name: str, env: dict[str, str], recorded: Path):
        self.name = name
        self._log = (recorded / f"{name}.log").open("w")
        self.group = spawn(
            [BENCH_PYTHON, str(DRIVER)],
            die_with_parent=False,  # the run's end kills STARTED_GROUPS
            env=env,
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )
        self.proc = self.group.popen
        STARTED_GROUPS.add(self.proc.pid)
        self.replies: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.broken = False

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.replies.put(line.rstrip("\n"))

    def _reply(self, prefix: str, timeout: float) -> str | None:
        end = time.monotonic() + timeout
        while (left := end - time.monotonic()) > 0:
            try:
                line = self.replies.get(timeout=min(left, 1.0))
            except queue.Empty:
                if self.proc.poll() is not None and self.replies.empty():
                    return None
                continue
            if line.startswith(prefix):
                return line[len(prefix) :].strip()
        return None

    def wait_ready(self, timeout: float) -> bool:
        return self._reply("@@ready", timeout) is not None

    def run(self, argv: list[str], out_file: Path, timeout: float) -> dict:
        """One bench_serving run: its figures, or why none."""
        if self.broken:
            return {"error": f"{self.name} is broken"}
        before = out_file.read_text().count("\n") if out_file.exists() else 0
        t0 = time.monotonic()
        self.proc.stdin.write(json.dumps({"argv": argv}) + "\n")
        self.proc.stdin.flush()
        reply = self._reply("@@done", timeout)
        wall = round(time.monotonic() - t0, 3)
        if reply is None:
            self.broken = True
            self.kill()
            return {"error": f"no reply within {timeout:.0f} s", "wall_s": wall}
        status = json.loads(reply)
        figures = bench_figures(out_file, before)
        if not status.get("ok") or figures is None:
            return {"error": f"bench_serving: {status}", "wall_s": wall}
        return figures | {"wall_s": wall}

    def kill(self) -> None:
        self.group.send_kill()

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        if self.group.wait(5) is None:
            self.group.kill(5)
        self._log.close()


def pair_order(runs: list[dict], level: int) -> tuple[str, str]:
    """Which goes first alternates from pair to pair at each level (the levels alternate
    too, so a plain alternation would put the same one first at each level)."""
    nth = sum(1 for r in runs if r["level"] == level) // 2
    return ("bare", "serve") if nth % 2 == 0 else ("serve", "bare")


def write_ratio_config(dest: Path, model_dir: Path, results_dir: Path) -> Path:
    """The H200 configuration (common.write_h200_config) on the testbed, with the pool pinned
    and the piecewise CUDA graph capture off (49 s of each fresh start; the same on both)."""
    write_h200_config(dest, model_dir, results_dir)
    config = yaml.safe_load(dest.read_text())
    config["model"]["served_name"] = model_dir.name
    config["tuning"]["mem_fraction_static"] = MEM_FRACTION
    config["server"]["extra_args"] = [
        *config["server"].get("extra_args", []),
        "--max-total-tokens",
        str(MAX_TOTAL_TOKENS),
        "--disable-piecewise-cuda-graph",
    ]
    config["benchmark"] = {**config.get("benchmark", {}), "post_start": {"enabled": False}}
    dest.write_text(yaml.safe_dump(config, sort_keys=False))
    return dest


def wait_started(bare: Process, serve: Process, notify: NotifySocket, wait: Deadline) -> dict:
    while not wait.expired():
        done_bare = bare.first_time(FIRED_UP) is not None or bare.proc.poll() is not None
        done_serve = notify.first("READY=1") is not None or serve.proc.poll() is not None
        if done_bare and done_serve:
            break
        time.sleep(0.2)
    fired_bare, fired_serve = bare.first_time(FIRED_UP), serve.first_time(FIRED_UP)
    ready = notify.first("READY=1")
    return {
        "bare_fired_up_s": fired_bare and round(fired_bare - bare.started, 1),
        "serve_fired_up_s": fired_serve and round(fired_serve - serve.started, 1),
        "serve_ready_s": ready and round(ready - serve.started, 1),
        "bare_exit": bare.proc.poll(),
        "serve_exit": serve.proc.poll(),
    }


def run(out: Path, env: dict[str, str], deadline: Deadline, results: dict, model_dir: Path):
    recorded = out / "recorded"
    recorded.mkdir(exist_ok=True)
    work = LAB / "work" / "ratio"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    config = write_ratio_config(work / "h200-ratio.yaml", model_dir, work / "results")
    results["config"] = config.read_text()
    results["settings"] = {
        "concurrencies": CONCURRENCIES,
        "input_len": INPUT_LEN,
        "output_len": OUTPUT_LEN,
        "max_total_tokens": MAX_TOTAL_TOKENS,
        "mem_fraction_static": MEM_FRACTION,
        "run_seconds_target": RUN_SECONDS,
        "target_half_width": TARGET_HALF_WIDTH,
    }
    bare_argv, bare_env = plan_launch(config, env, BARE_PORT)
    results["bare_argv"] = bare_argv
    notify = NotifySocket(out / "notify-ratio.sock")
    serve_env = dict(env, NOTIFY_SOCKET=str(notify.path))
    serve = Process("serve", glm5svc_argv(config, "serve"), serve_env, recorded)
    bare = Process("bare", bare_argv, bare_env, recorded)
    drivers = {t: BenchDriver(f"bench-{t}", env, recorded) for t in ("bare", "serve")}
    try:
        measure(out, deadline, results, model_dir, bare, serve, notify, drivers, recorded)
    finally:
        results["bare_stop"] = stop_gracefully(bare, 20)
        t0 = time.monotonic()
        serve.signal_leader(signal.SIGTERM)
        results["serve_stop"] = {"exit": serve.finish(timeout=20)}
        results["serve_stop"]["seconds"] = round(time.monotonic() - t0, 2)
        for driver in drivers.values():
            driver.close()


def measure(out, deadline, results, model_dir, bare, serve, notify, drivers, recorded) -> None:
    start_wait = Deadline(max(10, min(420, deadline.left() - STOP_RESERVE_S - 60)))
    results["start"] = wait_started(bare, serve, notify, start_wait)
    log(f"ratio start: {results['start']}")
    pools = {"bare": kv_pool_tokens(bare), "serve": kv_pool_tokens(serve)}
    results["kv_pool_tokens"] = pools
    results["same_kv_pool"] = pools["bare"] is not None and pools["bare"] == pools["serve"]
    if not (results["start"]["bare_fired_up_s"] and results["start"]["serve_ready_s"]):
        results["error"] = "a server did not come up"
        return
    for name, driver in drivers.items():
        if not driver.wait_ready(max(5, min(60, deadline.left() - STOP_RESERVE_S))):
            results["error"] = f"bench driver for {name} did not start"
            return
    urls = {"bare": f"http://127.0.0.1:{BARE_PORT}", "serve": f"http://127.0.0.1:{ENGINE_PORT}"}
    files = {t: recorded / f"bench_serving-{t}.jsonl" for t in urls}

    def one(target: str, concurrency: int, prompts: int, seed: int, timeout: float) -> dict:
        argv = bench_serving_args(
            urls[target], model_dir, concurrency, prompts, INPUT_LEN, OUTPUT_LEN,
            files[target], seed=seed,
        )  # fmt: skip
        return drivers[target].run(argv, files[target], timeout)

    # Warm-up, discarded: both at once (kernels compile per shape on a fresh server).
    top = max(CONCURRENCIES)
    warm: dict = {}
    warm_timeout = max(10, min(180, deadline.left() - STOP_RESERVE_S - 30))
    threads = [
        threading.Thread(target=lambda t=t: warm.update({t: one(t, top, 2 * top, 0, warm_timeout)}))
        for t in drivers
    ]  # fmt: skip
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    results["warmup"] = warm
    log(f"ratio warm-up: {json.dumps(warm)}")

    prompts = {c: 2 * c for c in CONCURRENCIES}
    sized: set[int] = set()
    runs: list[dict] = []
    pairs: list[dict] = []
    results.update(runs=runs, pairs=pairs)
    pair_seconds = 4 * RUN_SECONDS
    while len(pairs) < MAX_PAIRS:
        stopped = False
        for concurrency in CONCURRENCIES:
            if deadline.left() < STOP_RESERVE_S + 1.5 * pair_seconds:
                stopped = True
                break
            index = len(runs) // 2
            order = pair_order(runs, concurrency)
            t0 = time.monotonic()
            got = {}
            for target in order:
                timeout = max(5, min(20 * RUN_SECONDS + 30, deadline.left() - STOP_RESERVE_S))
                figures = one(target, concurrency, prompts[concurrency], 1000 + index, timeout)
                got[target] = figures
                runs.append(
                    {**figures, "target": target, "level": concurrency,
                     "prompts": prompts[concurrency], "pair": index}
                )  # fmt: skip
            pair_seconds = time.monotonic() - t0
            complete = all(
                got[t].get("completed") == prompts[concurrency] and got[t].get("total_throughput")
                for t in got
            )
            if complete:
                ratio = got["serve"]["total_throughput"] / got["bare"]["total_throughput"]
                pairs.append(
                    {"pair": index, "level": concurrency, "first": order[0],
                     "prompts": prompts[concurrency], "ratio": round(ratio, 5),
                     "bare": got["bare"]["total_throughput"],
                     "serve": got["serve"]["total_throughput"]}
                )  # fmt: skip
                log(f"ratio pair {index} c={concurrency}: {ratio:.4f}")
            else:
                log(f"ratio pair {index} c={concurrency} incomplete: {json.dumps(got)[:600]}")
            if concurrency not in sized and got["bare"].get("duration"):
                # Whole waves of `concurrency` requests filling about RUN_SECONDS.
                waves = RUN_SECONDS / got["bare"]["duration"] * prompts[concurrency] / concurrency
                prompts[concurrency] = concurrency * max(1, min(16, round(waves)))
                sized.add(concurrency)
        summary = interval([p["ratio"] for p in pairs])
        results["ratio"] = summary
        if stopped or any(d.broken for d in drivers.values()):
            break
        if len(pairs) >= MIN_PAIRS and summary.get("half_width_95") is not None:
            if summary["half_width_95"] <= TARGET_HALF_WIDTH:
                break
    results["ratio"] = interval([p["ratio"] for p in pairs])
    results["ratio_by_level"] = {
        str(c): interval([p["ratio"] for p in pairs if p["level"] == c]) for c in CONCURRENCIES
    }
    results["resolved"] = (
        results["ratio"].get("half_width_95") is not None
        and results["ratio"]["half_width_95"] <= TARGET_HALF_WIDTH
    )
    log(f"ratio: {json.dumps(results['ratio'])} by level {json.dumps(results['ratio_by_level'])}")
