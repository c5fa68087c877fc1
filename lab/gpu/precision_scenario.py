"""How precise a window is on the real engine: the spread of windows against their length at
a running-request cap below the concurrency and above it, and of one setting's mean from
engine start to engine start.

The qwen3-moe testbed is started bare with the tune scenario's configuration
(tune_scenario.write_tune_config: CUDA graphs on, started at cap 1024) under the tune's own
continuous load (glm5svc.bench.load: concurrency 256, lengths uniform in [half, full] of
512 in / 128 out, LATENCY_PROBES workers streaming). From READY to the start's end the
engine's /metrics is read every READ_EVERY_S, and the live cap moves through the start's
schedule (its first phase is the warm-up). Every read comes back
(recorded/precision/start{N}-reads.json), so windows of any length are cut from the same
reads afterwards (lab/gpu/precision_figures.py), and the CPU stand-in engine resamples them.
Starts follow one another until the deadline: the first runs FIRST_SCHEDULE, the others
LATER_SCHEDULE (the setting every start measures comes first after the warm-up).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import yaml

from glm5svc.bench.engine_sampler import read_counters
from glm5svc.bench.load import ContinuousLoad, LoadShape
from glm5svc.tune.live_knobs import set_live
from lab.gpu.common import (
    BARE_PORT,
    FIRED_UP,
    Deadline,
    Process,
    log,
    plan_launch,
    stop_gracefully,
)
from lab.gpu.models import TESTBED_VOCAB_SIZE
from lab.gpu.tune_scenario import (
    CONCURRENCY,
    INPUT_LEN,
    LENGTH_RATIO,
    OUTPUT_LEN,
    write_tune_config,
)

CAP_KNOB = "tuning.max_running_requests"
STARTED_CAP = 1024
READ_EVERY_S = float(os.environ.get("GPU_LAB_PRECISION_READ_S", "1"))
LATENCY_PROBES = 8


def _schedule(text: str) -> list[tuple[int, float]]:
    """'cap:seconds,...' -> [(cap, seconds), ...]"""
    return [(int(cap), float(s)) for cap, s in (p.split(":") for p in text.split(","))]


FIRST_SCHEDULE = _schedule(
    os.environ.get("GPU_LAB_PRECISION_FIRST", "1024:40,1024:80,64:40,192:30")
)
LATER_SCHEDULE = _schedule(os.environ.get("GPU_LAB_PRECISION_LATER", "1024:30,1024:50,192:25"))
START_WAIT_S = float(os.environ.get("GPU_LAB_PRECISION_START_WAIT_S", "260"))
MAX_STARTS = int(os.environ.get("GPU_LAB_PRECISION_MAX_STARTS", "100"))  # a rehearsal's bound
STOP_S = 30.0


def _read_dict(read, phase: int, cap: int) -> dict:
    s = read.sample
    return {
        "t": round(s.t, 3), "phase": phase, "cap": cap, "running": s.running,
        "queued": s.queued, "completed": s.completed, "prefill_compute": s.prefill_compute,
        "prefill_cache": s.prefill_cache, "decode": s.decode,
        "ttft": [list(b) for b in read.ttft], "itl": [list(b) for b in read.itl],
    }  # fmt: skip


class Reader:
    """Reads /metrics every READ_EVERY_S on a thread, labelled with the phase running."""

    def __init__(self, base_url: str):
        self.base_url = base_url
        self.reads: list[dict] = []
        self.errors: list[str] = []
        self.phase, self.cap = 0, STARTED_CAP
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            try:
                self.reads.append(
                    _read_dict(read_counters(self.base_url, {}), self.phase, self.cap)
                )
            except Exception as err:  # noqa: BLE001 - recorded; the reads go on
                if len(self.errors) < 20:
                    self.errors.append(f"{time.monotonic():.1f}: {err}")
            next_at += READ_EVERY_S
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def fire_up(number: int, argv, launch_env, recorded: Path, deadline: Deadline,
            wait_s: float = START_WAIT_S) -> tuple[Process, dict]:  # fmt: skip
    """Start `number` of the bare testbed server, and its record so far: with `error` (the
    server stopped again) where it never fired up within `wait_s`."""
    server = Process(f"start{number}", argv, launch_env, recorded)
    ready = server.wait_for(FIRED_UP, Deadline(min(wait_s, deadline.left())))
    start: dict = {"number": number, "fired_up_s": ready and round(ready - server.started, 1)}
    if ready is None:
        start["error"] = "not fired up"
        start["stop"] = stop_gracefully(server, STOP_S)
    return server, start


def testbed_shape() -> LoadShape:
    """The tune's load on the testbed (concurrency 256, 512 in, 128 out, streamed probes)."""
    return LoadShape(
        concurrency=CONCURRENCY, input_len=INPUT_LEN, output_len=OUTPUT_LEN,
        range_ratio=LENGTH_RATIO, vocab_size=TESTBED_VOCAB_SIZE, latency_probes=LATENCY_PROBES,
    )  # fmt: skip


def measure_start(number: int, argv, launch_env, recorded: Path, deadline: Deadline,
                  schedule: list[tuple[int, float]]) -> dict:  # fmt: skip
    server, start = fire_up(number, argv, launch_env, recorded, deadline)
    if "error" in start:
        return start
    base_url = f"http://127.0.0.1:{BARE_PORT}"
    shape = testbed_shape()
    load = ContinuousLoad(base_url, {}, shape, seed=number * 7919)
    reader = Reader(base_url)
    load.start()
    reader.start()
    phases = []
    try:
        for index, (cap, seconds) in enumerate(schedule):
            if deadline.left() < STOP_S + 5:
                break
            if cap != reader.cap:
                read_back = set_live(base_url, {}, CAP_KNOB, cap)
                reader.cap = read_back
            reader.phase = index
            began = time.monotonic()
            time.sleep(max(0.0, min(seconds, deadline.left() - STOP_S - 5)))
            phases.append({"index": index, "cap": cap, "began": round(began, 3),
                           "seconds": round(time.monotonic() - began, 1)})  # fmt: skip
    finally:
        reader.stop()
        counts = load.stop()
        start["phases"] = phases
        start["load"] = {"sent": counts.sent, "completed": counts.completed,
                         "failed": counts.failed, "errors": counts.errors}  # fmt: skip
        start["streamed"] = [[round(s.ended_at, 3), round(s.ttft_s, 4),
                              s.itl_s and round(s.itl_s, 5)] for s in counts.streamed]  # fmt: skip
        start["reader_errors"] = reader.errors
        (recorded / f"start{number}-reads.json").write_text(
            json.dumps(
                {
                    "reads": reader.reads,
                    "streamed": start["streamed"],
                    "phases": phases,
                    "fired_up_s": start["fired_up_s"],
                }
            )  # fmt: skip
        )
        start["stop"] = stop_gracefully(server, STOP_S)
    return start


def run(out: Path, env: dict[str, str], deadline: Deadline, results: dict, model: Path) -> None:
    recorded = out / "recorded" / "precision"
    recorded.mkdir(parents=True, exist_ok=True)
    config = write_tune_config(out / "precision.yaml", model, out / "precision-results", "defaults")
    mapping = yaml.safe_load(config.read_text())
    mapping["tuning"].update(max_running_requests=STARTED_CAP, cuda_graph=True)
    config.write_text(yaml.safe_dump(mapping, sort_keys=False))
    (recorded / "precision.yaml").write_text(config.read_text())
    argv, launch_env = plan_launch(config, env, BARE_PORT)
    results.update(argv=argv, first_schedule=FIRST_SCHEDULE, later_schedule=LATER_SCHEDULE,
                   read_every_s=READ_EVERY_S, latency_probes=LATENCY_PROBES)  # fmt: skip
    starts: list[dict] = []
    results["starts"] = starts
    number = 1
    while number <= MAX_STARTS:
        schedule = FIRST_SCHEDULE if number == 1 else LATER_SCHEDULE
        # A later start needs its READY (about 70 s with warm caches on the H200), the
        # warm-up and its first measured phase; less than that measures nothing worth a start.
        ready_s = min([70.0] + [s["fired_up_s"] for s in starts if s.get("fired_up_s")])
        need = ready_s + schedule[0][1] + schedule[1][1] + STOP_S if number > 1 else 0
        if deadline.left() < need:
            log(f"precision: {deadline.left():.0f} s left, no start {number}")
            break
        start = measure_start(number, argv, launch_env, recorded, deadline, schedule)
        starts.append(start)
        completed = start.get("load", {}).get("completed")
        log(f"precision: start {number}: fired up {start.get('fired_up_s')} s, "
            f"{completed} requests, phases {start.get('phases')}")  # fmt: skip
        number += 1
        if start.get("error"):
            break
