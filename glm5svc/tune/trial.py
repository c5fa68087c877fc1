"""One trial: the engine with a candidate's settings under `glm5svc serve`, measured, drained.

The trial runs the service's own command (`python -m glm5svc --config TRIAL serve`) in
its own process group, so the candidate is supervised exactly as `glm5.service` would
supervise it: READY after one real generation, sglang's own drain on SIGTERM, the
diagnosis of a failed start in its last-run file. Once READY, one continuous load
(glm5svc/bench/load.py: fresh random prompts, lengths that vary) holds the target
concurrency until the start's last window; every window is the engine's own counters'
advance over `window_s` (glm5svc/bench/counter_window.py), with a GPU telemetry window
and sglang's scheduler gauges beside it. A warm-up runs until two windows agree; then each
round measures one window per live value (the cap switched between windows, a settle
period left out), in A B B A order, and the search's decider is asked after every whole
block.

Longer than 400 lines: a trial's whole life (start, readiness, the load, warm-up, windows,
stop, the serve log's figures) stays in one place.
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

from glm5svc.bench.counter_window import CounterRead, CounterWindow, read_counters
from glm5svc.bench.engine_sampler import SteadyRefused
from glm5svc.bench.load import ContinuousLoad, LoadShape, StreamedLatency
from glm5svc.bench.plan import BenchPlan
from glm5svc.bench.seconds import SECONDS_FILE, SecondsRecorder
from glm5svc.bench.steady import cached_share_flag, windows_agree
from glm5svc.child_group import ChildGroup, spawn
from glm5svc.config import Config, connect_host, read_api_key
from glm5svc.http_fetch import FetchError, bearer, fetch_bytes
from glm5svc.metrics_text import MetricsTextError
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

WAIT_STEP_S = 0.25  # how often a window's wait looks at the engine, the load and a stop
SETTLE_BOUND_S = 60.0  # the longest wait for the running requests to come down to a cap
MAX_FLAGGED_RUNS = 3  # windows of a start that cannot be counted: the trial fails
CONTINUE, STOP, PRUNE = "continue", "stop", "prune"
Decide = Callable[[list["RunFigures"]], str]


@dataclass(frozen=True)
class RunFigures:
    """One benchmark run of a trial, as the search compares it."""

    throughput: float  # the objective's tokens/s (TrialRequest.objective)
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
    round: int = 0  # round i of every live value forms a pair (same start, adjacent windows)
    cached_share: float | None = None  # of the window's prompt tokens, from the radix cache
    total_throughput: float | None = None  # uncached input + output tokens/s
    latency_probes: int = 0  # streamed requests that ended in the window (their TTFT)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunFigures:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class TrialOutcome:
    status: str  # measured | failed | pruned | interrupted
    runs: list[RunFigures] = field(default_factory=list)
    warmup_windows: list[dict[str, Any]] = field(default_factory=list)
    load: dict[str, Any] = field(default_factory=dict)  # what the start's load sent
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
        return data


@dataclass
class TrialRequest:
    number: int
    config: Config  # the trial's configuration, validated
    config_path: Path  # where it was written
    trial_dir: Path
    bench: BenchPlan  # the window, warm-up, seed and declared prefix sharing
    load: LoadShape  # the start's one load
    decide: Decide
    deadline: float  # time.monotonic() by which the engine must be ready and warm
    sampler: Any = None  # a telemetry WindowSampler, or None
    should_stop: Callable[[], bool] = lambda: False
    settle_s: float = 0.0  # after a live change, before the window
    on_progress: Callable[[str], None] = lambda text: None
    # Measured within this start, interleaved (A B B A ...): each round runs every value.
    live_knob: str | None = None
    live_values: tuple[int, ...] = ()
    objective: str = "output_tokens"  # benchmark.objective: a window's figure
    # By which the measured rounds end (default: `deadline`): a start that measures may go on
    # past the trial's time limit while its decider asks for rounds and the budget allows.
    measure_deadline: float | None = None


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
    headers = bearer(client.api_key)
    cap = request.config.tuning.max_running_requests
    concurrency = request.load.concurrency
    load = ContinuousLoad(client.base_url, headers, request.load, request.bench.seed)
    window = _Windows(request, serve, client, load)
    # Every second beside the windows: clocks, power, the engine's gauges, the load's pacing.
    seconds = SecondsRecorder(client.base_url, headers, request.trial_dir / SECONDS_FILE,
                              load.pacing)  # fmt: skip
    load.start()
    try:
        seconds.start()
        failure = window.warm_up(outcome)
        if failure is not None:
            outcome.status, outcome.failure = failure
            return
        _rounds(request, window, client, outcome)
    finally:
        seconds.stop()
        counts = load.stop()
        outcome.load = {
            "shape": request.load.describe(),
            "sent": counts.sent,
            "completed": counts.completed,
            "failed": counts.failed,
            "errors": counts.errors,
            "started_after_ready_s": round(load.started_at - t0 - outcome.ready_after_s, 2)
            if load.started_at
            else None,
        }
    _diagnose(request, outcome, cap, concurrency)


def _rounds(request: TrialRequest, window: _Windows, client: EngineClient, outcome: TrialOutcome):
    """Rounds of one window per live value, in A B B A order, until the decider stops them
    (it is asked after every round)."""
    values: tuple[int | None, ...] = request.live_values or (None,)
    round_index = 0
    flagged = 0
    while True:
        order = values if round_index % 2 == 0 else tuple(reversed(values))
        for value in order:
            if request.should_stop():
                outcome.status = "interrupted"
                return
            if time.monotonic() + window.cost_s >= (request.measure_deadline or request.deadline):
                outcome.diagnosis.append("the trial's time ran out; measured windows kept")
                return
            if value is not None and request.live_knob:
                try:
                    set_live(client.base_url, bearer(client.api_key), request.live_knob, value)
                except LiveSetError as exc:
                    outcome.status, outcome.failure = "failed", str(exc)
                    return
            name = f"r{round_index + 1:02d}" + (f"-v{value}" if value is not None else "")
            request.on_progress(f"window {len(outcome.runs) + 1} ({name})")
            while True:
                figures = window.measure(name, settle=value)
                if isinstance(figures, _Flagged):
                    flagged += 1
                    outcome.diagnosis.append(f"{name} not counted: {figures.why}")
                    if flagged < MAX_FLAGGED_RUNS:
                        name += "-again"
                        continue
                    figures = f"{flagged} windows could not be counted: {figures.why}"
                break
            if isinstance(figures, str):
                if request.should_stop():
                    outcome.status = "interrupted"
                    return
                outcome.status, outcome.failure = "failed", figures
                return
            outcome.runs.append(replace(figures, name=name, live_value=value, round=round_index))
        round_index += 1
        verdict = request.decide(outcome.runs)
        if verdict == PRUNE:
            outcome.status = "pruned"
            return
        if verdict == STOP:
            return


def _diagnose(request: TrialRequest, outcome: TrialOutcome, cap: int, concurrency: int) -> None:
    for value in request.live_values or (None,):
        runs = [r for r in outcome.runs if r.live_value == value]
        found = diagnose_run(runs, value or cap, concurrency, request.config)
        prefix = f"{request.live_knob}={value}: " if value is not None else ""
        outcome.diagnosis += [prefix + line for line in found]


@dataclass(frozen=True)
class _Flagged:
    why: str


class _Windows:
    """Windows read from the engine's counters while the start's one load runs."""

    def __init__(self, request: TrialRequest, serve: ChildGroup, client: EngineClient,
                 load: ContinuousLoad):  # fmt: skip
        self.request = request
        self.serve = serve
        self.client = client
        self.load = load
        self.headers = bearer(client.api_key)
        self.window_s = request.bench.window_s
        self.settle_s = request.settle_s
        self.cost_s = self.window_s + self.settle_s

    def _wait(self, seconds: float) -> str | None:
        """Sleep through a settle period or a window, watching the engine and the load."""
        until = time.monotonic() + seconds
        while (left := until - time.monotonic()) > 0:
            if self.request.should_stop():
                return "stopped"
            if self.serve.poll() is not None:
                code = self.serve.returncode
                return f"the engine stopped during the measurement (serve exit {code})"
            counts = self.load.counts
            if counts.failed >= self.request.load.concurrency and counts.completed == 0:
                return "the engine answered no request of the load: " + "; ".join(counts.errors)
            time.sleep(min(left, WAIT_STEP_S))
        return None

    def _read(self) -> CounterRead | str:
        try:
            return read_counters(self.client.base_url, self.headers)
        except SteadyRefused as exc:
            return str(exc)
        except (FetchError, MetricsTextError) as exc:
            return f"the engine's /metrics could not be read: {exc}"

    def window(self, seconds: float) -> tuple[CounterWindow, list[GaugeSample], Any] | str:
        first = self._read()
        if isinstance(first, str):
            return first
        gauges = _GaugePoller(self.client)
        gauges.start()
        telemetry = self.request.sampler.open_window("tune") if self.request.sampler else None
        try:
            stopped = self._wait(seconds)
        finally:
            samples = gauges.stop()
            stats = self.request.sampler.close_window(telemetry) if telemetry else None
        if stopped is not None:
            return stopped
        last = self._read()
        if isinstance(last, str):
            return last
        return CounterWindow.between(first, last), samples, stats

    def warm_up(self, outcome: TrialOutcome) -> tuple[str, str] | None:
        """Windows until two in a row agree (benchmark.warmup_tolerance_pct), bounded by
        benchmark.warmup_max_s: a fresh engine compiles kernels per shape, its first
        windows come in low."""
        bench = self.request.bench
        bound = time.monotonic() + bench.warmup_max_s
        previous: float | None = None
        while bench.warmup_max_s > 0 and time.monotonic() + self.window_s <= bound:
            self.request.on_progress(f"warm-up window {len(outcome.warmup_windows) + 1}")
            read = self.window(self.window_s)
            if isinstance(read, str):
                if self.request.should_stop():
                    return "interrupted", "stopped during the warm-up"
                return "failed", read
            current = objective_figure(read[0], self.request.objective)
            outcome.warmup_windows.append(read[0].to_dict())
            tolerance = bench.warmup_tolerance_pct / 100
            if previous is not None and windows_agree(previous, current, tolerance):
                outcome.diagnosis.append(
                    f"warm-up: {len(outcome.warmup_windows)} window(s), two agreed"
                )
                return None
            previous = current
        outcome.diagnosis.append(
            f"warm-up: {len(outcome.warmup_windows)} window(s), no plateau within "
            f"benchmark.warmup_max_s ({bench.warmup_max_s:g} s)"
        )
        return None

    def settle(self, cap: int) -> str | None:
        """After the cap moved: wait until the engine runs at most `cap` requests (lowering
        the cap admits no new request, but those running finish first: seconds at a long
        TTFT), bounded by SETTLE_BOUND_S, then the settle period."""
        bound = time.monotonic() + max(SETTLE_BOUND_S, 10 * self.settle_s)
        while time.monotonic() < bound:
            gauges = self.client.scheduler_gauges(timeout=2.0) or {}
            running = gauges.get("sglang:num_running_reqs")
            if running is None or running <= cap:
                break
            stopped = self._wait(WAIT_STEP_S)
            if stopped is not None:
                return stopped
        return self._wait(self.settle_s) if self.settle_s > 0 else None

    def measure(self, name: str, settle: int | None) -> RunFigures | _Flagged | str:
        if settle is not None:
            stopped = self.settle(settle)
            if stopped is not None:
                return stopped
        began = time.monotonic()
        read = self.window(self.window_s)
        if isinstance(read, str):
            return read
        counted, gauges, stats = read
        streamed = self.load.counts.streamed_between(began, time.monotonic())
        run_dir = self.request.trial_dir / "runs"
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / f"{name}.json").write_text(
            json.dumps(counted.to_dict(), indent=2), encoding="utf-8"
        )
        flag = cached_share_flag(counted.tokens, self.request.bench.prefix_sharing)
        if flag is not None:
            return _Flagged(flag)
        if counted.throughput <= 0:
            return _Flagged("the engine computed no tokens in the window")
        return _figures(counted, gauges, stats, self.request.objective, streamed)


def _quantile(ordered: list[float], q: float) -> float:
    """The q quantile of sorted values, by linear interpolation."""
    at = q * (len(ordered) - 1)
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def objective_figure(window: CounterWindow, objective: str) -> float:
    """The window's tokens/s as benchmark.objective counts them."""
    return window.output_throughput if objective == "output_tokens" else window.throughput


def _figures(window: CounterWindow, samples: list[GaugeSample], stats, objective: str,
             streamed: list[StreamedLatency]) -> RunFigures:  # fmt: skip
    """A window's figures. TTFT is what the load's streaming probes saw (sglang's TTFT
    histogram records a non-streamed request's output when it finishes: its whole latency);
    inter-token latency is sglang's histogram, which matched the probes within 1 % on the
    H200 (docs/performance-tune.md)."""
    ttfts = sorted(s.ttft_s for s in streamed)
    samples = [s for s in samples if (s.running or 0) + (s.queued or 0) > 0]
    running = [s.running for s in samples if s.running is not None]
    queued = [s.queued for s in samples if s.queued is not None]
    usage = [s.token_usage for s in samples if s.token_usage is not None]
    shares = [g.power_share_of_limit for g in stats.gpus if g.power_share_of_limit is not None] \
        if stats is not None else []  # fmt: skip
    return RunFigures(
        throughput=round(objective_figure(window, objective), 1),
        total_throughput=round(window.throughput, 1),
        output_throughput=round(window.output_throughput, 1),
        ttft_p99_ms=round(1000 * _quantile(ttfts, 0.99), 2) if ttfts else None,
        itl_p99_ms=window.itl_p99_ms,
        ttft_median_ms=round(1000 * _quantile(ttfts, 0.5), 2) if ttfts else None,
        latency_probes=len(ttfts),
        power_share=sum(shares) / len(shares) if shares else None,
        running_max=max(running) if running else None,
        queue_mean=sum(queued) / len(queued) if queued else None,
        token_usage_max=max(usage) if usage else None,
        wall_s=window.duration_s,
        completed=int(window.completed),
        requested=int(window.completed),
        cached_share=window.tokens.cached_share,
    )


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
