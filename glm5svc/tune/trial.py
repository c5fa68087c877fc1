"""One trial: the engine with a candidate's settings under `glm5svc serve`, benchmarked, drained.

The trial runs the service's own command (`python -m glm5svc --config TRIAL serve`) in
its own process group, so the candidate is supervised exactly as `glm5.service` would
supervise it: READY after one real generation, sglang's own drain on SIGTERM, the
diagnosis of a failed start in its last-run file. The benchmark is `sglang.bench_serving`
through glm5svc's bench runner, with a GPU telemetry window per run and sglang's
scheduler gauges sampled beside it for the diagnosis. With benchmark.steady, each run is
one steady window of fresh prompts into a flushed cache (glm5svc/bench/measure.py), after a
warm-up that waits for the plateau.

Longer than 400 lines: a trial's whole life (start, readiness, warm-up, runs or steady
windows, stop, the serve log's figures) stays in one place.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from glm5svc.bench.engine_sampler import SteadyRefused
from glm5svc.bench.measure import Measurement, Measurer
from glm5svc.bench.plan import BenchPlan
from glm5svc.bench.runner import run_level
from glm5svc.child_group import ChildGroup, spawn
from glm5svc.config import Config, connect_host, read_api_key
from glm5svc.http_fetch import FetchError, bearer, fetch_bytes
from glm5svc.records import LastRun, RecordError, StatusDocument
from glm5svc.serve.phases import parse_line
from glm5svc.serve.probes import EngineClient
from glm5svc.tune.diagnosis import GaugeSample, diagnose_run
from glm5svc.tune.live_knobs import LiveSetError, set_live

READY_POLL_S = 0.5
GAUGE_POLL_S = 0.5
STOP_MARGIN_S = 30.0  # beyond the service's own drain limit, before the group is killed
# systemd's variables are for the tune process, never for a trial's serve.
NOT_FOR_TRIALS = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "GLM5SVC_CONFIG")

LEVEL_FILE = "level.json"
WINDOW_FILE = "window.json"  # the steady window, its seed and cached share
MAX_FLAGGED_RUNS = 3  # runs of a start whose window cannot be counted: the trial fails
CONTINUE, STOP, PRUNE = "continue", "stop", "prune"
Decide = Callable[[list["RunFigures"]], str]


@dataclass(frozen=True)
class RunFigures:
    """One benchmark run of a trial, as the search compares it."""

    throughput: float  # total (input + output) tokens/s
    output_throughput: float | None
    ttft_p99_ms: float | None
    itl_p99_ms: float | None
    ttft_median_ms: float | None
    power_share: float | None  # mean share of the power limit over the GPUs
    running_max: float | None
    queue_mean: float | None
    token_usage_max: float | None
    wall_s: float
    completed: int
    requested: int
    name: str = ""  # the run's folder under the trial's runs/
    live_value: int | None = None  # the live knob's value it ran at (TrialRequest.live_knob)
    round: int = 0  # rounds pair runs: round i of every setting sends seed + i

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunFigures:
        return cls(**data)


@dataclass
class TrialOutcome:
    status: str  # measured | failed | pruned | interrupted
    runs: list[RunFigures] = field(default_factory=list)
    warmup: RunFigures | None = None
    kv_pool_tokens: int | None = None
    ready_after_s: float | None = None
    failure: str | None = None
    diagnosis: list[str] = field(default_factory=list)
    stop: dict[str, Any] = field(default_factory=dict)
    serve_log: str | None = None
    wall_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["runs"] = [r.to_dict() for r in self.runs]
        data["warmup"] = self.warmup.to_dict() if self.warmup else None
        return data


@dataclass
class TrialRequest:
    number: int
    config: Config  # the trial's configuration, validated
    config_path: Path  # where it was written
    trial_dir: Path
    bench: BenchPlan  # one level: the target concurrency
    decide: Decide
    deadline: float  # time.monotonic() by which the trial must have ended
    sampler: Any = None  # a telemetry WindowSampler, or None
    should_stop: Callable[[], bool] = lambda: False
    warmup_prompts: int = 0
    on_progress: Callable[[str], None] = lambda text: None
    # Measured within this start, interleaved (A B B A ...): each round runs every value.
    live_knob: str | None = None
    live_values: tuple[int, ...] = ()


def run_trial(request: TrialRequest) -> TrialOutcome:
    started = time.monotonic()
    request.trial_dir.mkdir(parents=True, exist_ok=True)
    log_path = request.trial_dir / "serve.log"
    serve = _start_serve(request, log_path)
    outcome = TrialOutcome("measured", serve_log=str(log_path))
    try:
        _measure(request, serve, outcome, started)
    finally:
        outcome.stop = _stop_serve(serve, request.config)
        if outcome.kv_pool_tokens is None:
            outcome.kv_pool_tokens = _kv_pool_from_log(log_path)
        if outcome.status == "failed" and not outcome.diagnosis:
            outcome.diagnosis = _serve_diagnosis(request.config)
        outcome.wall_s = round(time.monotonic() - started, 1)
    return outcome


def _measure(request: TrialRequest, serve: ChildGroup, outcome: TrialOutcome, t0: float):
    request.on_progress("starting the engine")
    ready = _wait_ready(request, serve)
    if ready is not None:
        outcome.status, outcome.failure = ready
        return
    outcome.ready_after_s = round(time.monotonic() - t0, 1)
    outcome.kv_pool_tokens = _kv_pool_from_status(request.config)
    client = EngineClient(
        request.config.server.host,
        request.config.server.port,
        read_api_key(request.config.server.api_key_file),
    )
    cap = request.config.tuning.max_running_requests
    concurrency = request.bench.ladder[0]
    measurer = None
    if request.bench.steady:
        # Fresh prompts into a flushed cache, a warm-up until two windows agree, then one
        # steady window per run (glm5svc/bench/measure.py).
        measurer = Measurer(
            request.bench, concurrency, request.trial_dir / "runs", request.sampler,
            request.should_stop, request.on_progress,
        )  # fmt: skip
        warm = Measurement(concurrency)
        try:
            measurer.warm_up(warm, request.bench.seed)
        except SteadyRefused as exc:
            outcome.status, outcome.failure = "failed", str(exc)
            return
        if warm.error:
            outcome.status, outcome.failure = _run_failed(serve, warm.error)
            return
        outcome.diagnosis.append(
            f"warm-up: {len(warm.warmup)} run(s), "
            + ("two windows agreed" if warm.warmup_settled else "no plateau within the bound")
        )
    elif request.warmup_prompts:
        request.on_progress("warm-up run (discarded)")
        warm = _bench_run(request, client, "warmup", request.warmup_prompts)
        if isinstance(warm, str):
            outcome.status, outcome.failure = _run_failed(serve, warm)
            return
        outcome.warmup = warm
    flagged = 0
    values: tuple[int | None, ...] = request.live_values or (None,)
    round_index = 0
    while True:
        # ABBA: the order turns every round, so a drift within the start favours no value.
        order = values if round_index % 2 == 0 else tuple(reversed(values))
        for value in order:
            if request.should_stop():
                outcome.status = "interrupted"
                return
            if time.monotonic() >= request.deadline:
                outcome.diagnosis.append("the trial's time ran out; measured runs kept")
                return _diagnose(request, outcome, cap, concurrency)
            if value is not None and request.live_knob:
                try:
                    set_live(client.base_url, bearer(client.api_key), request.live_knob, value)
                except LiveSetError as exc:
                    outcome.status, outcome.failure = "failed", str(exc)
                    return
            request.on_progress(f"run {len(outcome.runs) + 1}")
            name = f"r{round_index + 1:02d}" + (f"-v{value}" if value is not None else "")
            while True:
                if measurer is not None:
                    figures = _window_run(request, client, measurer, name, round_index)
                    if isinstance(figures, _Flagged):
                        flagged += 1
                        outcome.diagnosis.append(f"{name} not counted: {figures.why}")
                        if flagged < MAX_FLAGGED_RUNS:
                            name += "-again"
                            continue
                        figures = f"{flagged} runs could not be counted: {figures.why}"
                else:
                    figures = _bench_run(request, client, name)
                break
            if isinstance(figures, str):
                if request.should_stop():
                    outcome.status = "interrupted"
                    return
                outcome.status, outcome.failure = _run_failed(serve, figures)
                return
            outcome.runs.append(replace(figures, name=name, live_value=value, round=round_index))
        round_index += 1
        verdict = request.decide(outcome.runs)
        if verdict == PRUNE:
            outcome.status = "pruned"
            break
        if verdict == STOP:
            break
    _diagnose(request, outcome, cap, concurrency)


def _diagnose(request: TrialRequest, outcome: TrialOutcome, cap: int, concurrency: int) -> None:
    for value in request.live_values or (None,):
        runs = [r for r in outcome.runs if r.live_value == value]
        found = diagnose_run(runs, value or cap, concurrency, request.config)
        prefix = f"{request.live_knob}={value}: " if value is not None else ""
        outcome.diagnosis += [prefix + line for line in found]


def _run_failed(serve: ChildGroup, error: str) -> tuple[str, str]:
    if serve.poll() is not None:
        return "failed", f"the engine stopped during the benchmark (serve exit {serve.returncode})"
    return "failed", f"benchmark run failed: {error}"


def _bench_run(
    request: TrialRequest, client: EngineClient, name: str, prompts: int | None = None
) -> RunFigures | str:
    plan = request.bench.with_overrides(num_prompts=prompts) if prompts else request.bench
    concurrency = plan.ladder[0]
    run_dir = request.trial_dir / "runs" / name
    gauges = _GaugePoller(client)
    gauges.start()
    try:
        level, _ = run_level(
            plan, concurrency, run_dir, sampler=request.sampler, should_stop=request.should_stop
        )
    finally:
        samples = gauges.stop()
    # The chosen trial's last run becomes the baseline for `glm5svc bench compare`.
    (run_dir / LEVEL_FILE).write_text(json.dumps(level.to_dict(), indent=2), encoding="utf-8")
    if not level.ok or level.metrics is None or not level.metrics.total_throughput:
        return level.error or f"{level.completed} of {level.requested} requests completed"
    return _figures(level, samples, level.metrics.total_throughput, level.metrics.output_throughput)


def _figures(level, samples, throughput: float, output_throughput: float | None) -> RunFigures:
    metrics = level.metrics
    # Only while requests were in the engine: bench_serving's own start-up is idle time.
    samples = [s for s in samples if (s.running or 0) + (s.queued or 0) > 0]
    running = [s.running for s in samples if s.running is not None]
    queued = [s.queued for s in samples if s.queued is not None]
    usage = [s.token_usage for s in samples if s.token_usage is not None]
    return RunFigures(
        throughput=throughput,
        output_throughput=output_throughput,
        ttft_p99_ms=metrics.latency("ttft", "p99"),
        itl_p99_ms=metrics.latency("itl", "p99"),
        ttft_median_ms=metrics.latency("ttft", "median"),
        power_share=level.telemetry.mean_power_share if level.telemetry.available else None,
        running_max=max(running) if running else None,
        queue_mean=sum(queued) / len(queued) if queued else None,
        token_usage_max=max(usage) if usage else None,
        wall_s=round(level.wall_s, 2),
        completed=level.completed,
        requested=level.requested,
    )


@dataclass(frozen=True)
class _Flagged:
    why: str


def _window_run(
    request: TrialRequest, client: EngineClient, measurer: Measurer, name: str, index: int
) -> RunFigures | _Flagged | str:
    """One steady window: run `index` of every trial sends seed + index (runs pair)."""
    gauges = _GaugePoller(client)
    gauges.start()
    try:
        run = measurer.run(name, request.bench.seed + index)
    except SteadyRefused as exc:
        return str(exc)
    finally:
        samples = gauges.stop()
    level = run.level
    run_dir = request.trial_dir / "runs" / name
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / LEVEL_FILE).write_text(json.dumps(level.to_dict(), indent=2), encoding="utf-8")
    (run_dir / WINDOW_FILE).write_text(json.dumps(run.to_dict(), indent=2), encoding="utf-8")
    if not level.ok or level.metrics is None:
        return level.error or f"{level.completed} of {level.requested} requests completed"
    if run.throughput is None:
        return _Flagged(run.flag or "no steady window")
    return _figures(level, samples, run.throughput, run.window.output_throughput)


class _GaugePoller:
    """sglang's scheduler gauges (running, queued, KV usage) every half second."""

    def __init__(self, client: EngineClient):
        self.client = client
        self.samples: list[GaugeSample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tune-gauges", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(GAUGE_POLL_S):
            values = self.client.scheduler_gauges(timeout=2.0)
            if values is not None:
                self.samples.append(GaugeSample.from_gauges(values))

    def stop(self) -> list[GaugeSample]:
        self._stop.set()
        self._thread.join(5)
        return list(self.samples)


def _start_serve(request: TrialRequest, log_path: Path) -> ChildGroup:
    env = {k: v for k, v in os.environ.items() if k not in NOT_FOR_TRIALS}
    env["PYTHONUNBUFFERED"] = "1"
    command = [sys.executable, "-m", "glm5svc", "--config", str(request.config_path), "serve"]
    with open(log_path, "wb") as log:  # the child keeps its own descriptor
        return spawn(
            command,
            # If tune dies, serve drains and ends its engine (its own SIGTERM handling).
            death_signal=signal.SIGTERM,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )


def _listener_url(config: Config, path: str) -> str:
    host = connect_host(config.service.listen_host)
    return f"http://{host}:{config.service.listen_port}{path}"


def _wait_ready(request: TrialRequest, serve: ChildGroup) -> tuple[str, str] | None:
    """None once the trial's serve says READY; else (status, why not)."""
    url = _listener_url(request.config, "/readyz")
    while True:
        if serve.poll() is not None:
            return "failed", f"the engine did not start: serve exited with {serve.returncode}"
        if request.should_stop():
            return "interrupted", "stopped while the engine was starting"
        if time.monotonic() >= request.deadline:
            return "failed", "not ready within the trial's time limit (--trial-timeout)"
        try:
            if fetch_bytes(url, timeout_s=2)[0] == 200:
                return None
        except FetchError:
            pass
        time.sleep(READY_POLL_S)


def _kv_pool_from_status(config: Config) -> int | None:
    try:
        _, raw = fetch_bytes(_listener_url(config, "/status"), timeout_s=5)
        return StatusDocument.from_json(raw).kv_pool_tokens
    except (FetchError, ValueError):  # RecordError is a ValueError
        return None


def _kv_pool_from_log(path: Path) -> int | None:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    pools = [p for line in text.splitlines() if (p := parse_line(line).kv_pool_tokens)]
    return min(pools) if pools else None  # each rank prints its own


def _stop_serve(serve: ChildGroup, config: Config) -> dict[str, Any]:
    """SIGTERM to serve (it drains the engine as glm5.service's stop does); the group is
    killed only past the drain limit."""
    outcome = serve.stop(config.service.drain_timeout_s + STOP_MARGIN_S)
    return {
        "serve_exit": outcome.returncode,
        "stop_s": round(outcome.waited_s, 1),
        "killed": outcome.needed_kill,
        "outcome": outcome.describe(),
    }


def _serve_diagnosis(config: Config) -> list[str]:
    try:
        record = LastRun.read(config.service.results_dir)
    except RecordError as exc:
        return [str(exc)]
    if record is None:
        return []
    lines = [record.message]
    lines += [f"{d.title}: {d.fix}" if d.fix else d.title for d in record.diagnosis]
    return [line for line in lines if line]
