"""The supervision loop: start the server, follow its phases, tell systemd, stop it cleanly.

Discipline (TGI's launcher): one server process group; if it exits, tear everything
down and exit non-zero with a diagnosis (restarting is systemd's job). Loading times
out on *stalls*, not on total time (Ollama's rule). READY=1 only after
/health_generate passes and one real generation returns text. WATCHDOG=1 comes from
this loop and stops when the engine is dead or wedged.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from glm5svc.atomic_file import write_atomic
from glm5svc.config import Config
from glm5svc.serve.diagnosis import EXIT_ENGINE_FAILED, diagnose, exit_status_for
from glm5svc.serve.notify import Notifier, child_environment
from glm5svc.serve.phases import (
    PRIORITY_ERR,
    PRIORITY_WARNING,
    Phase,
    later_startup_phase,
    parse_line,
)
from glm5svc.serve.probes import EngineClient
from glm5svc.serve.process import EngineProcess, become_subreaper
from glm5svc.serve.relay import OutputReader
from glm5svc.serve.state import SupervisorState

LAST_RUN_FILE = "serve-last-run.json"
# systemd gets a little more than our own stall limit, so our clear message comes first.
EXTEND_MARGIN_S = 30.0
EXTEND_MIN_INTERVAL_S = 1.0
LOOP_TICK_S = 0.1


@dataclass
class PostReadyContext:
    """What a post-READY hook (the post-start benchmark) gets."""

    config: Config
    engine_url: str
    state: SupervisorState
    stop_requested: threading.Event
    log: Callable[[str], None]
    sampler: object | None = None  # the service's GPU telemetry sampler, shared


# hook(context) -> JSON-able dict shown in /status "benchmark" and exported on /metrics
# (glm5svc.benchmark_gauges.bench_metrics_families); "degraded": true marks the service
# degraded, not unready. Exceptions are reported, never fatal.
PostReadyHook = Callable[[PostReadyContext], dict | None]


@dataclass
class _Timers:
    last_progress: float
    last_extend: float = 0.0
    next_probe: float = 0.0
    next_watchdog: float = 0.0
    probe_thread: threading.Thread | None = None
    progress_percents: dict[str, int] = field(default_factory=dict)


class Supervisor:
    def __init__(
        self,
        config: Config,
        argv: list[str],
        plan_env: dict[str, str],
        sink,
        notifier: Notifier | None = None,
        plan_summary: dict | None = None,
        plan_warnings: list[str] | None = None,
        post_ready_hook: PostReadyHook | None = None,
        api_key: str | None = None,
        telemetry_sampler: object | None = None,
    ):
        self.config = config
        self.service = config.service
        self.notifier = notifier or Notifier()
        self.sink = sink
        self.state = SupervisorState(self.service.wedge_window_s)
        self.state.launch_plan = plan_summary
        self.state.plan_warnings = list(plan_warnings or [])
        self.engine = EngineProcess(argv, child_environment(dict(os.environ), plan_env))
        self.client = EngineClient(config.server.host, config.server.port, api_key)
        self.post_ready_hook = post_ready_hook
        self.telemetry_sampler = telemetry_sampler
        self.wake = threading.Event()
        self.stop_requested = threading.Event()
        self.stop_signal: int | None = None
        self.fired_up = threading.Event()
        self.output_closed = threading.Event()
        self.reader: OutputReader | None = None
        self.listener = None
        self._timers = _Timers(last_progress=time.monotonic())
        self._lock = threading.Lock()

    # ----- entry point -------------------------------------------------------------

    def run(self) -> int:
        self.state.previous_run = self._read_last_run()
        self._install_signal_handlers()
        become_subreaper()
        try:
            return self._supervise()
        finally:
            self.notifier.status(self.state.status_text)

    def _supervise(self) -> int:
        pid = self.engine.start()
        now = time.monotonic()
        with self.state.lock:
            self.state.engine_pid = pid
            self.state.engine_started_mono = now
            self.state.engine_starts += 1
        command = " ".join(self.engine.argv)
        self.log(f"started the server, pid {pid} (process group {pid}): {command}")
        self._progress(now, "starting the server", force=True)
        self.reader = OutputReader(self.engine.stdout_fd, self._on_line, self._on_eof)
        self.reader.start()
        interval = self.notifier.watchdog_interval_s
        while True:
            self.wake.wait(LOOP_TICK_S)
            self.wake.clear()
            now = time.monotonic()
            if self.listener is not None:
                self.listener.beat()
            if self.stop_requested.is_set():
                return self._shutdown()
            if self.engine.poll() is not None:
                return self._engine_exited()
            if not self.state.ready:
                failure = self._startup_step(now)
                if failure:
                    return self._give_up(failure)
            else:
                self._serving_step(now)
            if interval and now >= self._timers.next_watchdog and not self.state.wedged:
                self.notifier.watchdog()
                self._timers.next_watchdog = now + interval

    # ----- start-up ----------------------------------------------------------------

    def _startup_step(self, now: float) -> str | None:
        stalled_for = now - self._timers.last_progress
        if stalled_for > self.service.load_stall_timeout_s:
            return (
                f"start-up made no progress for {stalled_for:.0f} s "
                f"(service.load_stall_timeout_s = {self.service.load_stall_timeout_s:g}) in phase "
                f"'{self.state.phase.value}'; last status: {self.state.status_text}"
            )
        started = self.state.engine_started_mono or now
        if now - started > self.service.startup_timeout_s:
            return (
                f"the server was not ready after {now - started:.0f} s "
                f"(service.startup_timeout_s = {self.service.startup_timeout_s:g})"
            )
        due = self.fired_up.is_set() or now >= self._timers.next_probe
        if due and not self._probe_in_flight():
            self.fired_up.clear()
            self._timers.next_probe = now + self.service.probe_interval_s
            self._start_probe(self._readiness_check)
        return None

    def _readiness_check(self) -> None:
        timeout = self.service.probe_timeout_s
        health = self.client.health_generate(timeout)
        if not health.ok:
            with self.state.lock:
                self.state.last_error = health.detail
            return
        if self.state.phase in (Phase.STARTING, Phase.LOADING, Phase.AUTOTUNE, Phase.WARMUP):
            self._set_phase(Phase.CHECKING, "checking one real generation")
            self.notifier.status("checking one real generation")
        generation = self.client.generation_check(timeout)
        now = time.monotonic()
        if not generation.ok:
            with self.state.lock:
                self.state.last_error = generation.detail
            self.log(f"not ready yet: {generation.detail}", PRIORITY_WARNING)
            return
        if self.stop_requested.is_set() or self.engine.poll() is not None:
            return
        with self.state.lock:
            self.state.health.record_probe(True, generation.detail, now)
            self.state.startup_seconds = round(now - (self.state.engine_started_mono or now), 3)
            self.state.ready = True
            self.state.last_error = None
        self._set_phase(Phase.SERVING, "serving")
        self.notifier.ready(f"serving (ready after {self.state.startup_seconds:.1f} s)")
        checks = f"{health.detail}; {generation.detail}"
        self.log(f"ready after {self.state.startup_seconds:.1f} s: {checks}")
        self._timers.next_probe = now + self.service.probe_interval_s
        if self.post_ready_hook is not None:
            hook = threading.Thread(
                target=self._run_post_ready_hook, name="post-ready", daemon=True
            )
            hook.start()

    # ----- serving -----------------------------------------------------------------

    def _serving_step(self, now: float) -> None:
        wedged = self.state.health.wedged(now)
        if wedged != self.state.wedged:
            with self.state.lock:
                self.state.wedged = wedged
            if wedged:
                message = (
                    f"engine wedged: probes failing and no progress for "
                    f"{self.service.wedge_window_s:g} s ({self.state.health.last_probe_error}); "
                    "withholding watchdog pings"
                )
                self.log(message, PRIORITY_ERR)
                self.notifier.status(message)
            else:
                self.log("engine progressing again")
                self.notifier.status(self.state.status_text)
        if now >= self._timers.next_probe and not self._probe_in_flight():
            self._timers.next_probe = now + self.service.probe_interval_s
            self._start_probe(self._health_probe)

    def _health_probe(self) -> None:
        timeout = self.service.probe_timeout_s
        counters = self.client.progress_counters(min(timeout, 5.0))
        result = self.client.health_generate(timeout)
        counters_after = self.client.progress_counters(min(timeout, 5.0)) if not result.ok else None
        now = time.monotonic()
        with self.state.lock:
            self.state.health.record_counters(counters, now)
            self.state.health.record_probe(result.ok, result.detail, now)
            self.state.health.record_counters(counters_after, now)
        self.wake.set()

    def _run_post_ready_hook(self) -> None:
        with self.state.lock:
            self.state.benchmark_running = True
        self._set_phase(Phase.BENCHMARKING, "benchmarking (post-start)")
        self.notifier.status("benchmarking (post-start)")
        context = PostReadyContext(
            self.config,
            self.client.base_url,
            self.state,
            self.stop_requested,
            self.log,
            self.telemetry_sampler,
        )
        try:
            result = self.post_ready_hook(context)
        except Exception as exc:  # a failed benchmark must not take the service down
            result = {"error": f"{type(exc).__name__}: {exc}"}
            self.log(f"post-start benchmark failed: {exc}", PRIORITY_WARNING)
        with self.state.lock:
            self.state.benchmark = result
            self.state.benchmark_running = False
        if not self.stop_requested.is_set():
            text = "serving" + (f" ({self.state.degraded_reason()})" if self.state.degraded else "")
            self._set_phase(Phase.SERVING, text)
            self.notifier.status(text)

    # ----- log lines ---------------------------------------------------------------

    def _on_line(self, line: str) -> None:
        info = parse_line(line)
        now = time.monotonic()
        text = None
        force = False
        with self.state.lock:
            phase = self.state.phase
            if not self.state.ready:
                if info.phase and later_startup_phase(phase, info.phase):
                    self.state.set_phase(info.phase)
                    phase, text, force = info.phase, info.phase.value, True
                if info.load_percent is not None and info.load_percent != self.state.load_percent:
                    self.state.load_percent = info.load_percent
                    text = f"loading weights {info.load_percent}%"
                    self.state.status_text = text
                elif info.progress_label and self._bar_moved(info):
                    text = f"{phase.value}: {info.progress_label} {info.progress_percent}%"
                    self.state.status_text = text
                elif info.startup_step or info.fired_up:
                    text = text or self.state.status_text
        self.sink.engine_line(info, phase.value)
        if text is not None:
            self._progress(now, text, force=force)
        if info.fired_up:
            self.fired_up.set()
            self.wake.set()

    def _bar_moved(self, info) -> bool:
        previous = self._timers.progress_percents.get(info.progress_label)
        self._timers.progress_percents[info.progress_label] = info.progress_percent
        return previous != info.progress_percent

    def _progress(self, now: float, text: str, force: bool = False) -> None:
        """Start-up moved: reset the stall clock, tell systemd (EXTEND_TIMEOUT_USEC)."""
        self._timers.last_progress = now
        if force or now - self._timers.last_extend >= EXTEND_MIN_INTERVAL_S:
            self._timers.last_extend = now
            self.notifier.extend_timeout(self.service.load_stall_timeout_s + EXTEND_MARGIN_S, text)

    def _on_eof(self) -> None:
        self.output_closed.set()
        self.wake.set()

    # ----- endings -----------------------------------------------------------------

    def _engine_exited(self) -> int:
        code = self.engine.poll()
        self.output_closed.wait(2.0)  # let the reader pass on the last lines
        diagnoses = diagnose(self.reader.tail if self.reader else [])
        how = f"exit status {code}" if code is not None and code >= 0 else f"signal {-code}"
        message = f"the server exited ({how}) while {self.state.phase.value}"
        status = exit_status_for(diagnoses) if diagnoses else EXIT_ENGINE_FAILED
        return self._fail(message, diagnoses, status, code)

    def _give_up(self, reason: str) -> int:
        result = self.engine.kill_now()
        diagnoses = diagnose(self.reader.tail if self.reader else [])
        return self._fail(
            f"giving up: {reason} (server {result})",
            diagnoses,
            exit_status_for(diagnoses) if diagnoses else EXIT_ENGINE_FAILED,
            self.engine.poll(),
        )

    def _fail(self, message: str, diagnoses, status: int, engine_code) -> int:
        leftover = self.engine.kill_now()  # TGI's rule: one part gone, tear down all
        with self.state.lock:
            self.state.engine_exit_status = engine_code
            self.state.ready = False
            self.state.diagnosis = [d.to_dict() for d in diagnoses]
            self.state.last_error = message
        summary = diagnoses[0].signature.title if diagnoses else "no known failure signature"
        self._set_phase(Phase.FAILED, f"failed: {message}; {summary}")
        self.log(message, PRIORITY_ERR)
        for d in diagnoses:
            self.log(d.render(), PRIORITY_ERR)
        if not diagnoses:
            self.log(
                "diagnosis: no known failure signature in the server log; see the lines above",
                PRIORITY_ERR,
            )
        if leftover != "drained":
            self.log(f"server process group: {leftover}")
        self._write_last_run(status, message)
        self.log(f"exiting with status {status}")
        return status

    def _shutdown(self) -> int:
        sig = self.stop_signal or signal.SIGTERM
        watchdog_abort = sig == signal.SIGABRT
        drain = 2.0 if watchdog_abort else self.service.drain_timeout_s
        with self.state.lock:
            self.state.draining = True
            self.state.ready = False
        self._set_phase(Phase.DRAINING, f"draining (up to {drain:g} s)")
        self.notifier.stopping(f"draining (up to {drain:g} s)")
        self.log(
            f"received {signal.Signals(sig).name}: stopping the server "
            f"(SIGTERM to its group, SIGKILL after {drain:g} s)"
        )
        result = self.engine.stop(drain)
        self.output_closed.wait(2.0)
        code = self.engine.poll()
        with self.state.lock:
            self.state.engine_exit_status = code
        self._set_phase(Phase.STOPPED, f"stopped (server {result})")
        self.log(f"server stopped: {result}")
        status = EXIT_ENGINE_FAILED if watchdog_abort or result.startswith("survivors") else 0
        self._write_last_run(status, f"stopped by {signal.Signals(sig).name}: {result}")
        return status

    # ----- helpers -----------------------------------------------------------------

    def _start_probe(self, target) -> None:
        thread = threading.Thread(target=target, name="engine-probe", daemon=True)
        self._timers.probe_thread = thread
        thread.start()

    def _probe_in_flight(self) -> bool:
        thread = self._timers.probe_thread
        return thread is not None and thread.is_alive()

    def _set_phase(self, phase: Phase, text: str) -> None:
        self.state.set_phase(phase, text)

    def log(self, text: str, priority: int = 6) -> None:
        self.sink.message(text, priority)

    def _install_signal_handlers(self) -> None:
        def request_stop(signum, frame):
            if self.stop_signal is None:
                self.stop_signal = signum
            self.stop_requested.set()
            self.wake.set()

        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGABRT):
            signal.signal(sig, request_stop)

    def _last_run_path(self) -> Path:
        return Path(self.service.results_dir) / LAST_RUN_FILE

    def _read_last_run(self) -> dict | None:
        try:
            return json.loads(self._last_run_path().read_text())
        except (OSError, ValueError):
            return None

    def _write_last_run(self, status: int, message: str) -> None:
        previous = self.state.previous_run or {}
        failures = previous.get("failed_runs_in_a_row", 0) + 1 if status else 0
        record: dict[str, Any] = {
            "ended_at": time.time(),
            "exit_status": status,
            "message": message,
            "diagnosis": self.state.diagnosis,
            "failed_runs_in_a_row": failures,
        }
        path = self._last_run_path()
        try:
            write_atomic(path, json.dumps(record, indent=2))
        except OSError as exc:
            self.log(f"cannot record this run in {path}: {exc.strerror}", PRIORITY_WARNING)
