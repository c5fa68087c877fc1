"""Where the window noise comes from: fixed-cap windows with every second recorded beside
them, in two or three engine starts, and a variant that removes a suspected cause.

The qwen3-moe testbed is started bare with the tune scenario's flags (the precision
scenario's configuration: tune_scenario.write_tune_config, CUDA graphs on, cap 1024) under
the tune's own continuous load (concurrency 256, lengths uniform in [half, full] of 512 in
/ 128 out, LATENCY_PROBES workers streaming). glm5svc.bench.seconds.SecondsRecorder writes
each second (SM and memory clocks, power, temperature, throttle reasons, the engine's
gauges and token counters, forward passes by CUDA-graph mode, the load's in-flight
requests and send gaps) to recorded/noise/start{N}/seconds.jsonl from READY to the
start's end. Each start then measures, all at cap 1024:
- WARMUP windows (kept, marked `warmup`: noise.py leaves them out or shows what they add);
- WINDOWS windows of WINDOW_S each (the first start; LATER_WINDOWS in later ones), back to
  back, as the tune's windows are (`time`);
- in start VARIANT_START (the second; the only one when MAX_STARTS is 1), then
  VARIANT_WINDOWS of the variant (GPU_LAB_NOISE_VARIANT; a variant that fails is recorded
  as `variant_error`, its start's fixed windows kept):
  - `flush`: before each window the load stops, the engine empties, sglang's
    POST /flush_cache empties the radix cache, and a fresh load runs SETTLE_S before the
    window opens (what a start leaves behind, without a restart);
  - `count`: a window closes when COUNT_REQUESTS requests have finished (the median of the
    fixed windows' count), not after a fixed time (the measured quantity);
  - `none`: no variant.
Every window's counters go to recorded/noise/start{N}-windows.json with its wall-clock
bounds (`began_unix`, `ended_unix`, the recorder's clock), so glm5svc/tune/noise.py cuts
the seconds that belong to it. Starts follow one another while the next fits the
deadline (MAX_STARTS at most). lab/gpu/noise_figures.py prints the attribution.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path

import yaml

from glm5svc.bench.counter_window import CounterWindow, read_counters
from glm5svc.bench.engine_sampler import SteadyRefused, flush_radix_cache
from glm5svc.bench.load import ContinuousLoad, LoadShape
from glm5svc.bench.seconds import SECONDS_FILE, SecondsRecorder
from glm5svc.http_fetch import FetchError
from glm5svc.metrics_text import MetricsTextError
from lab.gpu.common import BARE_PORT, Deadline, log, plan_launch, stop_gracefully
from lab.gpu.precision_scenario import fire_up, testbed_shape
from lab.gpu.tune_scenario import (
    CONCURRENCY,
    write_tune_config,
)

CAP = 1024
LATENCY_PROBES = 8
WINDOW_S = float(os.environ.get("GPU_LAB_NOISE_WINDOW_S", "10"))
WARMUP = int(os.environ.get("GPU_LAB_NOISE_WARMUP", "2"))
WINDOWS = int(os.environ.get("GPU_LAB_NOISE_WINDOWS", "10"))
LATER_WINDOWS = int(os.environ.get("GPU_LAB_NOISE_LATER_WINDOWS", "6"))
VARIANT = os.environ.get("GPU_LAB_NOISE_VARIANT", "flush")
VARIANT_WINDOWS = int(os.environ.get("GPU_LAB_NOISE_VARIANT_WINDOWS", "3"))
# The variant runs after the fixed windows of this start (the second: the first start's
# windows and the second's, the start-to-start spread, come first), or of the last one.
VARIANT_START = int(os.environ.get("GPU_LAB_NOISE_VARIANT_START", "2"))
SETTLE_S = float(os.environ.get("GPU_LAB_NOISE_SETTLE_S", "4"))
MAX_STARTS = int(os.environ.get("GPU_LAB_NOISE_MAX_STARTS", "3"))
START_WAIT_S = float(os.environ.get("GPU_LAB_NOISE_START_WAIT_S", "260"))
IDLE_WAIT_S = 60.0  # a flush waits this long at most for the engine to empty
STOP_S = 30.0
VARIANTS = ("flush", "count", "none")


def _window(base_url: str, kind: str, index: int, seconds: float | None = None,
            requests: int | None = None) -> dict:  # fmt: skip
    """One window: the counters at both ends, over `seconds` or until `requests` more
    requests have finished (bounded by 6 x WINDOW_S)."""
    first, began = read_counters(base_url, {}), time.time()
    if requests is None:
        time.sleep(seconds or WINDOW_S)
        last = read_counters(base_url, {})
    else:
        bound = time.monotonic() + 6 * WINDOW_S
        while True:
            time.sleep(0.2)
            last = read_counters(base_url, {})
            done = last.sample.completed - first.sample.completed
            if done >= requests or time.monotonic() > bound:
                break
    window = CounterWindow.between(first, last)
    return {"kind": kind, "index": index, "began_unix": round(began, 3),
            "ended_unix": round(time.time(), 3), **window.to_dict()}  # fmt: skip


def _wait_idle(base_url: str, bound_s: float) -> float:
    """Until the engine runs and queues nothing (the load stopped); the seconds it took."""
    began = time.monotonic()
    while time.monotonic() - began < bound_s:
        sample = read_counters(base_url, {}).sample
        if sample.running + sample.queued == 0:
            break
        time.sleep(0.2)
    return round(time.monotonic() - began, 2)


class _Loads:
    """The start's load, replaced by a fresh one after a flush; pacing() reads the current."""

    def __init__(self, base_url: str, shape: LoadShape, seed: int):
        self.base_url, self.shape, self.seed = base_url, shape, seed
        self.made = 0
        self.current = self._new()
        self.finished: list[dict] = []

    def _new(self) -> ContinuousLoad:
        self.made += 1
        load = ContinuousLoad(self.base_url, {}, self.shape, seed=self.seed + self.made)
        load.start()
        return load

    def pacing(self):
        return self.current.pacing()

    def stop(self) -> None:
        counts = self.current.stop()
        self.finished.append({"sent": counts.sent, "completed": counts.completed,
                              "failed": counts.failed, "errors": counts.errors})  # fmt: skip

    def restart(self) -> None:
        self.current = self._new()


def _variant(base_url: str, loads: _Loads, variant: str, count: int, fits, measured: list) -> None:
    for index in range(VARIANT_WINDOWS if variant != "none" else 0):
        if variant == "flush" and fits(WINDOW_S + SETTLE_S + IDLE_WAIT_S / 4):
            loads.stop()
            idle_s = _wait_idle(base_url, IDLE_WAIT_S)
            flush_s = flush_radix_cache(base_url, {})
            loads.restart()
            time.sleep(SETTLE_S)
            window = _window(base_url, "flush", index)
            measured.append(dict(window, idle_wait_s=idle_s, flush_s=round(flush_s, 2)))
        elif variant == "count" and count > 0 and fits(2 * WINDOW_S):
            measured.append(dict(_window(base_url, "count", index, requests=count), requests=count))


def measure_start(number: int, argv, launch_env, recorded: Path, deadline: Deadline,
                  windows: int, variant: str) -> dict:  # fmt: skip
    server, start = fire_up(number, argv, launch_env, recorded, deadline, START_WAIT_S)
    if "error" in start:
        return start
    base_url = f"http://127.0.0.1:{BARE_PORT}"
    shape = testbed_shape()
    loads = _Loads(base_url, shape, seed=number * 7919)
    folder = recorded / f"start{number}"
    recorder = SecondsRecorder(base_url, {}, folder / SECONDS_FILE, loads.pacing).start()
    measured: list[dict] = []
    start["nvml_absent"] = recorder.nvml_absent

    def fits(seconds: float) -> bool:
        return deadline.left() > seconds + STOP_S + 5

    try:
        for index in range(WARMUP):
            if fits(WINDOW_S):
                measured.append(_window(base_url, "warmup", index))
        for index in range(windows):
            if fits(WINDOW_S):
                measured.append(_window(base_url, "time", index))
        timed = [w["completed"] for w in measured if w["kind"] == "time"]
        count = int(os.environ.get("GPU_LAB_NOISE_COUNT_REQUESTS", "0")) or (
            int(statistics.median(timed)) if timed else 0
        )
        try:
            _variant(base_url, loads, variant, count, fits, measured)
        except (SteadyRefused, FetchError, MetricsTextError) as exc:
            # The fixed windows stand; the next start still runs.
            start["variant_error"] = f"{type(exc).__name__}: {exc}"
    finally:
        start["seconds_lines"] = recorder.stop()
        loads.stop()
        start["loads"] = loads.finished
        start["windows"] = [{k: w[k] for k in ("kind", "index", "throughput",
                                               "output_throughput", "duration_s")}
                            for w in measured]  # fmt: skip
        (recorded / f"start{number}-windows.json").write_text(
            json.dumps({"fired_up_s": start["fired_up_s"], "windows": measured}, indent=1)
        )
        start["stop"] = stop_gracefully(server, STOP_S)
    return start


def run(out: Path, env: dict[str, str], deadline: Deadline, results: dict, model: Path) -> None:
    if VARIANT not in VARIANTS:
        raise ValueError(f"GPU_LAB_NOISE_VARIANT={VARIANT!r}: one of {', '.join(VARIANTS)}")
    recorded = out / "recorded" / "noise"
    recorded.mkdir(parents=True, exist_ok=True)
    config = write_tune_config(out / "noise.yaml", model, out / "noise-results", "defaults")
    mapping = yaml.safe_load(config.read_text())
    mapping["tuning"].update(max_running_requests=CAP, cuda_graph=True)
    config.write_text(yaml.safe_dump(mapping, sort_keys=False))
    (recorded / "noise.yaml").write_text(config.read_text())
    argv, launch_env = plan_launch(config, env, BARE_PORT)
    results.update(argv=argv, cap=CAP, concurrency=CONCURRENCY, window_s=WINDOW_S,
                   warmup=WARMUP, windows=WINDOWS, later_windows=LATER_WINDOWS,
                   variant=VARIANT, variant_windows=VARIANT_WINDOWS)  # fmt: skip
    starts: list[dict] = []
    results["starts"] = starts
    for number in range(1, MAX_STARTS + 1):
        windows = WINDOWS if number == 1 else LATER_WINDOWS
        # A later start needs its start-up (the quickest so far), its warm-up and at least
        # half its windows, or it measures too little to be worth the start.
        ready_s = min([70.0] + [s["fired_up_s"] for s in starts if s.get("fired_up_s")])
        need = ready_s + (WARMUP + max(2, windows // 2)) * WINDOW_S + STOP_S
        if number > 1 and deadline.left() < need:
            log(f"noise: {deadline.left():.0f} s left, no start {number}")
            break
        variant = VARIANT if number == min(VARIANT_START, MAX_STARTS) else "none"
        start = measure_start(number, argv, launch_env, recorded, deadline, windows, variant)
        starts.append(start)
        shown = [round(w["throughput"]) for w in start.get("windows", [])]
        log(f"noise: start {number}: fired up {start.get('fired_up_s')} s, windows {shown}")
        if start.get("error"):
            break
