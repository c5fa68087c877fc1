"""The supervision loop: start the server, follow its phases, tell systemd, stop it cleanly.

Discipline (TGI's launcher): one server process group; if it exits, tear everything
down and exit non-zero with a diagnosis (restarting is systemd's job). One loop owns
the state: the output reader, the probe threads and the post-start hook report on a
queue and only this loop decides and writes `SupervisorState`. Loading times out on
*stalls*, not on total time (Ollama's rule). READY=1 only after our own child printed
its ready line (or, at log levels that hide it, passed /health_generate), holds the engine
port and returns text from one real generation. WATCHDOG=1 comes from this loop and stops
when the engine is dead or wedged. Every way out of `run()` ends the engine's process group.

Stopping is sglang's own drain (glm5svc.serve.drain): SIGTERM to the launcher only. A
SIGTERM to the whole group instead kills the scheduler at once and sglang cuts every
request in flight. The group is SIGKILLed only after `service.drain_timeout_s`. How the
run ended is recorded for the next start, preflight and tune (glm5svc.records LastRun).

What the threads run is in serve/reporters.py, the events they report in serve/events.py,
start-up's stall clock in serve/startup.py, the drain's bookkeeping in serve/drain.py.

Longer than 400 lines: one loop owns the state and makes every decision; its transitions
(start, phases, readiness, health, watchdog, stop, endings) are one state machine, read
together.
"""

from __future__ import annotations

import os
import queue
import signal
import threading
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from glm5svc.atomic_file import write_atomic
from glm5svc.config import Config
from glm5svc.errors import EXIT_CONFIG
from glm5svc.json_output import now_utc
from glm5svc.port_owners import holders
from glm5svc.records import LAST_RUN_FILE, BenchmarkStatus, LastRun, PlanSummary, RecordError
from glm5svc.redaction import Redactor
from glm5svc.serve.diagnosis import EXIT_ENGINE_FAILED, diagnose, exit_status_for
from glm5svc.serve.drain import Drain, DrainStep, drain_seconds, in_flight
from glm5svc.serve.events import (
    DrainCounters,
    EngineLine,
    Event,
    HealthPassed,
    HealthProbed,
    HookFinished,
    OutputClosed,
    ReadinessChecked,
    SignalReceived,
)
from glm5svc.serve.notify import Notifier, child_environment
from glm5svc.serve.phases import (
    PRIORITY_ERR,
    PRIORITY_INFO,
    PRIORITY_WARNING,
    Phase,
    later_startup_phase,
    parse_line,
)
from glm5svc.serve.probes import EngineClient, ProbeResult
from glm5svc.serve.process import EngineProcess, become_subreaper
from glm5svc.serve.relay import OutputReader
from glm5svc.serve.reporters import (
    IGNORED_SIGNALS,
    PostReadyContext,
    PostReadyHook,
    Reporters,
)
from glm5svc.serve.startup import StartupClock
from glm5svc.serve.state import SupervisorState

LOOP_TICK_S = 0.1
# Probes failing this many times in a row with no engine progress: out of rotation.
UNRESPONSIVE_AFTER_FAILURES = 3
DRAIN_FIRST_READ_S = 1.0
LAUNCHER_REAP_WAIT_S = 5.0  # after its group emptied; a live launcher would still be in it
# sglang logs the ready line at INFO: with a quieter --log-level it never appears.
LOG_LEVELS_WITH_READY_LINE = ("debug", "info")


@dataclass(frozen=True)
class Launch:
    """What the supervisor starts: the launch plan's argv and environment, its summary and
    warnings (for /status and the post-start benchmark's record), and the API key the
    probes send."""

    argv: list[str]
    env: dict[str, str]
    summary: PlanSummary | None = None
    warnings: tuple[str, ...] = ()
    api_key: str | None = None


@dataclass
class _Timers:
    next_probe: float = 0.0
    next_watchdog: float = 0.0
    next_frozen_check: float = 0.0
    probe_thread: threading.Thread | None = None


class Supervisor:
    """The one loop that decides; the threads (output reader, probes, the post-READY hook)
    and the signal handlers only report on its queue. Built by glm5svc.serve.service."""

    def __init__(
        self,
        config: Config,
        launch: Launch,
        sink,
        notifier: Notifier,
        post_ready_hook: PostReadyHook | None = None,
        telemetry_sampler: object | None = None,
    ):
        self.config = config
        self.service = config.service
        self.sink = sink
        self.notifier = notifier
        self.state = SupervisorState(self.service.wedge_window_s)
        self.state.launch_plan = launch.summary
        self.state.plan_warnings = list(launch.warnings)
        self.engine = EngineProcess(launch.argv, child_environment(dict(os.environ), launch.env))
        self.client = EngineClient(config.server.host, config.server.port, launch.api_key)
        self.redactor = Redactor.for_service(
            launch.api_key, config.server.env, config.server.secret_env
        )
        self.post_ready_hook = post_ready_hook
        self.telemetry_sampler = telemetry_sampler
        self.expect_ready_line = config.server.log_level in LOG_LEVELS_WITH_READY_LINE
        self.events: queue.SimpleQueue = queue.SimpleQueue()  # put() is signal-safe
        self.stop_requested = threading.Event()
        self.stop_signal: int | None = None
        self.output_closed = threading.Event()
        self.reader: OutputReader | None = None
        self._timers = _Timers()
        self._startup = StartupClock(self.service, notifier, last_progress=time.monotonic())
        self.reporters = Reporters(self.events, self.client, self.engine, config)
        self._drain: Drain | None = None
        self._drain_poll_thread: threading.Thread | None = None
        self._exit_status: int | None = None

    # ----- entry point -------------------------------------------------------------

    def run(self) -> int:
        self.state.previous_run = self._read_last_run()
        self.reporters.install_signal_handlers()
        become_subreaper()
        try:
            return self._supervise()
        finally:
            self._end_group_on_exit()
            self.notifier.status(self.state.status_text)

    def _supervise(self) -> int:
        try:
            pid = self.engine.start()
        except OSError as exc:  # no interpreter or program there: restarting cannot help
            message = (
                f"cannot start the server {self.engine.argv[0]}: {exc.strerror or exc}; "
                "check server.python (or server.command)"
            )
            self._set_phase(Phase.FAILED, f"failed: {message}")
            self.log(message, PRIORITY_ERR)
            self._write_last_run(EXIT_CONFIG, message)
            return EXIT_CONFIG
        now = time.monotonic()
        with self.state.lock:
            self.state.engine_pid = pid
            self.state.engine_started_mono = now
            self.state.engine_starts += 1
        command = " ".join(self.redactor.redact(token) for token in self.engine.argv)
        self.log(f"started the server, pid {pid} (process group {pid}): {command}")
        self._startup.progress(now, "starting the server", force=True)
        self.reader = OutputReader(
            self.engine.stdout_fd,
            self._on_line,
            self._on_eof,
            redact=self.redactor.redact,
            redact_cut=self.redactor.redact_cut,
        )
        self.reader.start()
        while self._exit_status is None:
            self._wait_and_handle_events()
            self._tick(time.monotonic())
        return self._exit_status

    def _wait_and_handle_events(self) -> None:
        try:
            event = self.events.get(timeout=LOOP_TICK_S)
        except queue.Empty:
            return
        while True:
            self._handle(event)
            try:
                event = self.events.get_nowait()
            except queue.Empty:
                return

    def _handle(self, event: Event) -> None:
        match event:
            case EngineLine():
                self._on_engine_line(event)
            case SignalReceived(signum):
                self._on_signal(signum)
            case ReadinessChecked():
                self._on_readiness(event)
            case HealthPassed():
                self._on_health_passed()
            case HealthProbed():
                self._on_health(event)
            case DrainCounters():
                self._on_drain_counters(event)
            case HookFinished(result):
                self._on_hook_finished(result)
            case _:  # OutputClosed only wakes the loop; _tick looks at the process.
                pass

    def _tick(self, now: float) -> None:
        self.state.beat()
        if self._exit_status is not None:
            return
        if self._drain is not None:
            self._drain_step(now)
            return
        if self.stop_requested.is_set():
            self._begin_stop(self.stop_signal or signal.SIGTERM, now)
            return
        code = self.engine.poll()
        if code is not None:
            self._exit_status = self._engine_exited(code)
            return
        if now >= self._timers.next_frozen_check:
            self._timers.next_frozen_check = now + self.service.probe_interval_s
            self._check_frozen()
        if not self.state.ready:
            failure = self._startup_step(now)
            if failure:
                self._exit_status = self._give_up(failure)
                return
        else:
            self._serving_step(now)
        interval = self.notifier.watchdog_interval_s
        if interval and now >= self._timers.next_watchdog and not self.state.wedged:
            self.notifier.watchdog()
            self._timers.next_watchdog = now + interval

    # ----- start-up ----------------------------------------------------------------

    def _startup_step(self, now: float) -> str | None:
        started = self.state.engine_started_mono or now
        overdue = self._startup.overdue(
            now, started, self.state.phase.value, self.state.status_text
        )
        if overdue:
            return overdue
        # Our own child's ready line first: another server answering on the port is not ours.
        if self.expect_ready_line and not self.state.engine_ready_line:
            return None
        if now >= self._timers.next_probe and not self._probe_in_flight():
            self._timers.next_probe = now + self.service.probe_interval_s
            self._start_probe(partial(self.reporters.readiness_check, self.state.engine_ready_line))
        return None

    def _on_health_passed(self) -> None:
        if self.state.phase in (Phase.STARTING, Phase.LOADING, Phase.AUTOTUNE, Phase.WARMUP):
            self._set_phase(Phase.CHECKING, "checking one real generation")
            self.notifier.status("checking one real generation")

    def _on_readiness(self, event: ReadinessChecked) -> None:
        if self.state.ready or self._drain is not None or self.engine.poll() is not None:
            return
        failed = next(
            (r for r in (event.health, event.port, event.generation) if r and not r.ok), None
        )
        if failed is None and event.generation is None:
            failed = ProbeResult(False, "no generation check")
        if failed is not None:
            with self.state.lock:
                self.state.last_error = failed.detail
            if event.generation is not None or (event.port and event.port.ok is False):
                self.log(f"not ready yet: {failed.detail}", PRIORITY_WARNING)
            return
        now = event.at
        with self.state.lock:
            self.state.health.record_probe(True, event.generation.detail, now)
            self.state.startup_seconds = round(now - (self.state.engine_started_mono or now), 3)
            self.state.ready = True
            self.state.last_error = None
        self._set_phase(Phase.SERVING, "serving")
        self.notifier.ready(f"serving (ready after {self.state.startup_seconds:.1f} s)")
        checks = f"{event.port.detail}; {event.health.detail}; {event.generation.detail}"
        self.log(f"ready after {self.state.startup_seconds:.1f} s: {checks}")
        self._timers.next_probe = time.monotonic() + self.service.probe_interval_s
        if self.post_ready_hook is not None:
            self._start_post_ready_hook()

    # ----- serving -----------------------------------------------------------------

    def _check_frozen(self) -> None:
        stopped = self.engine.stopped_members()
        if stopped == self.state.stopped_pids:
            return
        with self.state.lock:
            self.state.stopped_pids = stopped
        if stopped:
            message = f"engine frozen: process(es) {stopped} stopped (SIGSTOP); not ready"
            self.log(message, PRIORITY_ERR)
            self.notifier.status(message)
        else:
            self.log("engine processes running again")

    def _serving_step(self, now: float) -> None:
        health = self.state.health
        wedged = health.wedged(now)
        unresponsive = health.unresponsive(UNRESPONSIVE_AFTER_FAILURES)
        if unresponsive != self.state.unresponsive:
            with self.state.lock:
                self.state.unresponsive = unresponsive
            if unresponsive:
                message = (
                    f"engine unresponsive: {health.consecutive_failures} probes failed with no "
                    f"progress ({health.last_probe_error}); /readyz 503 until it recovers"
                )
                self.log(message, PRIORITY_ERR)
                self.notifier.status(message)
        if wedged != self.state.wedged:
            with self.state.lock:
                self.state.wedged = wedged
            if wedged:
                message = (
                    f"engine wedged: probes failing and no progress for "
                    f"{self.service.wedge_window_s:g} s ({health.last_probe_error}); "
                    "withholding watchdog pings"
                )
                self.log(message, PRIORITY_ERR)
                self.notifier.status(message)
            else:
                self.log("engine progressing again")
                self.notifier.status(self.state.status_text)
        if now >= self._timers.next_probe and not self._probe_in_flight():
            self._timers.next_probe = now + self.service.probe_interval_s
            self._start_probe(self.reporters.health_probe)

    def _on_health(self, event: HealthProbed) -> None:
        if self._drain is not None:
            return
        with self.state.lock:
            health = self.state.health
            health.record_counters(event.counters_before, event.at)
            health.record_probe(event.result.ok, event.result.detail, event.at)
            health.record_counters(event.counters_after, event.at)
            recovered = self.state.unresponsive and not health.unresponsive(
                UNRESPONSIVE_AFTER_FAILURES
            )
            if recovered:
                self.state.unresponsive = False
        if recovered:
            self.log("engine answering again: back in rotation")
            self.notifier.status(self.state.status_text)

    def _start_post_ready_hook(self) -> None:
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
            self.state.launch_plan,
            self.client.api_key,
        )
        hook = partial(self.reporters.post_ready_hook, self.post_ready_hook, context, self.log)
        self.reporters.start(hook, "post-ready")

    def _on_hook_finished(self, result: BenchmarkStatus | None) -> None:
        with self.state.lock:
            self.state.benchmark = result
            self.state.benchmark_running = False
        if self._drain is None and self.state.ready:
            text = "serving" + (f" ({self.state.degraded_reason()})" if self.state.degraded else "")
            self._set_phase(Phase.SERVING, text)
            self.notifier.status(text)

    # ----- log lines ---------------------------------------------------------------

    def _on_line(self, line: str) -> None:
        """Reader thread: relay the line, then report it to the loop."""
        info = parse_line(line)
        phase = self.state.phase
        if not self.state.ready and info.phase and later_startup_phase(phase, info.phase):
            phase = info.phase
        self.sink.engine_line(info, phase.value, self.engine.pid)
        self.events.put(EngineLine(info, time.monotonic()))

    def _on_engine_line(self, event: EngineLine) -> None:
        info, now = event.info, event.at
        text = None
        force = False
        with self.state.lock:
            phase = self.state.phase
            if info.fired_up:
                self.state.engine_ready_line = True
            if info.kv_pool_tokens is not None:
                self.state.record_kv_pool(info.kv_pool_tokens)
            if not self.state.ready and self._drain is None:
                if info.phase and later_startup_phase(phase, info.phase):
                    self.state.set_phase(info.phase)
                    phase, text, force = info.phase, info.phase.value, True
                if info.load_percent is not None and info.load_percent != self.state.load_percent:
                    self.state.load_percent = info.load_percent
                    text = f"loading weights {info.load_percent}%"
                    self.state.status_text = text
                elif info.progress_label and self._startup.bar_moved(info):
                    text = f"{phase.value}: {info.progress_label} {info.progress_percent}%"
                    self.state.status_text = text
                elif (info.startup_step or info.fired_up) and not (
                    info.batch and self.state.engine_ready_line
                ):  # after our child's ready line a batch is a readiness check's, not progress
                    text = text or self.state.status_text
        if force:
            self._announce_phase(phase, None)
        if text is not None:
            self._startup.progress(now, text, force=force)
        if info.fired_up and not self.state.ready:
            self._timers.next_probe = 0.0  # check readiness now

    def _on_eof(self) -> None:
        self.output_closed.set()
        self.events.put(OutputClosed(time.monotonic()))

    # ----- endings -----------------------------------------------------------------

    def _engine_exited(self, code: int) -> int:
        with self.state.lock:  # out of rotation at once, before anything slower
            self.state.engine_exit_status = code
            self.state.ready = False
        self.output_closed.wait(2.0)  # let the reader pass on the last lines
        diagnoses = diagnose(self.reader.tail if self.reader else [])
        if any(d.signature.id == "engine-port-in-use" for d in diagnoses):
            self._log_port_holders()
        how = f"exit status {code}" if code >= 0 else f"signal {-code}"
        message = f"the server exited ({how}) while {self.state.phase.value}"
        status = exit_status_for(diagnoses) if diagnoses else EXIT_ENGINE_FAILED
        return self._fail(message, diagnoses, status, code)

    def _log_port_holders(self) -> None:
        port = self.config.server.port
        for holder in holders(port):
            self.log(f"port {port} is held by pid {holder.pid}: {holder.command}", PRIORITY_ERR)

    def _give_up(self, reason: str) -> int:
        result = self.engine.kill_group()
        diagnoses = diagnose(self.reader.tail if self.reader else [])
        return self._fail(
            f"giving up: {reason} (server process group: {result})",
            diagnoses,
            exit_status_for(diagnoses) if diagnoses else EXIT_ENGINE_FAILED,
            self.engine.poll(),
        )

    def _fail(self, message: str, diagnoses, status: int, engine_code) -> int:
        leftover = self.engine.kill_group()  # TGI's rule: one part gone, tear down all
        with self.state.lock:
            self.state.engine_exit_status = engine_code
            self.state.ready = False
            self.state.diagnosis = [d.to_record() for d in diagnoses]
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
        if leftover != "empty":
            self.log(f"server process group: {leftover}")
        self._write_last_run(status, message)
        self.log(f"exiting with status {status}")
        return status

    # ----- stopping: sglang's own drain ----------------------------------------------

    def _begin_stop(self, sig: int, now: float) -> None:
        hopeless = self.state.wedged or self.state.unresponsive or bool(self.state.stopped_pids)
        drain_s = drain_seconds(sig, self.service.drain_timeout_s, hopeless=hopeless)
        count = None
        if self.state.ready and drain_s > 0:  # sglang's own count, before it starts draining
            count = in_flight(self.client.progress_counters(DRAIN_FIRST_READ_S))
        drain = self._drain = Drain.begin(sig, now, drain_s, count)
        with self.state.lock:
            self.state.draining = True
            self.state.ready = False
            self.state.drain = drain.report(now)
        text = f"draining (up to {drain_s:g} s)"
        self._set_phase(Phase.DRAINING, text)
        self.notifier.stopping(text)
        if drain_s > 0:
            self.log(
                f"received {drain.signal_name}: draining; SIGTERM to the server's launcher (pid "
                f"{self.engine.pid}) only, which finishes the requests in flight and ends its "
                f"own processes; SIGKILL to the group after {drain_s:g} s"
            )
            self.engine.signal_launcher(signal.SIGTERM)
        else:
            self.log(
                f"received {drain.signal_name}: stopping now, no drain (SIGKILL to the "
                "server's group)"
            )

    def _drain_step(self, now: float) -> None:
        drain = self._drain
        members = self.engine.group_members()
        match drain.step(now, not members, _alive(self._drain_poll_thread)):
            case DrainStep.DONE:
                self._exit_status = self._drained(now)
            case DrainStep.GIVE_UP:
                self._exit_status = self._drained(now, survivors=members)
            case DrainStep.KILL:
                self.log(
                    f"drain time over after {now - drain.started:.1f} s "
                    f"(service.drain_timeout_s); {_count(drain.last_in_flight)} request(s) "
                    f"still in flight; SIGKILL to the server's process group {members}",
                    PRIORITY_WARNING,
                )
                self.engine.send_kill()
            case DrainStep.POLL:
                self._drain_poll_thread = self.reporters.start(
                    self.reporters.drain_counters, "drain-probe"
                )

    def _on_drain_counters(self, event: DrainCounters) -> None:
        drain = self._drain
        if drain is None or event.counters is None:
            return
        text = drain.counters(event.counters, event.at)
        if text is not None:
            self.log(text)
            self._set_phase(Phase.DRAINING, text)
            self.notifier.status(text)
        with self.state.lock:
            self.state.drain = drain.report(event.at)

    def _drained(self, now: float, survivors: list[int] | None = None) -> int:
        drain = self._drain
        # The group can look empty a moment before the launcher can be reaped: a process's
        # main thread shows as a zombie while its other threads still tear down (sglang's
        # launcher has many), and waitpid answers only once the last one is gone.
        code = self.engine.poll() if survivors else self.engine.wait(LAUNCHER_REAP_WAIT_S)
        self.output_closed.wait(2.0)
        left = len(survivors or [])
        outcome = drain.outcome(survivors)
        with self.state.lock:
            self.state.engine_exit_status = code
            self.state.drain = drain.report(now, outcome, left)
        self.log(
            f"{drain.summary(now, outcome, left)}; {_launcher_exit(code)}; processes left: {left}"
        )
        self._set_phase(Phase.STOPPED, f"stopped (server {outcome})")
        self.log(f"server stopped: {outcome}")
        status = EXIT_ENGINE_FAILED if drain.watchdog_abort or survivors else 0
        self._write_last_run(status, f"stopped by {drain.signal_name}: {outcome}")
        return status

    def _end_group_on_exit(self) -> None:
        """Whatever ended the loop (an exception included), no engine process stays behind."""
        try:
            result = self.engine.kill_group()
        except Exception as exc:  # noqa: BLE001 - report and go on exiting
            self.log(f"could not end the server's process group: {exc}", PRIORITY_ERR)
            return
        if result != "empty":
            self.log(f"ended the server's process group on exit: {result}", PRIORITY_WARNING)

    # ----- helpers -----------------------------------------------------------------

    def _start_probe(self, target) -> None:
        self._timers.probe_thread = self.reporters.start(target, "engine-probe")

    def _probe_in_flight(self) -> bool:
        return _alive(self._timers.probe_thread)

    def _set_phase(self, phase: Phase, text: str) -> None:
        changed = self.state.phase != phase
        self.state.set_phase(phase, text)
        if changed:
            self._announce_phase(phase, text)

    def _announce_phase(self, phase: Phase, text: str | None) -> None:
        """Each new phase as a message of its own, so `journalctl -u glm5` shows it."""
        detail = f" — {text}" if text and text != phase.value else ""
        self.sink.message(f"phase: {phase.value}{detail}", PRIORITY_INFO, glm5_phase=phase.value)

    def log(self, text: str, priority: int = 6) -> None:
        self.sink.message(self.redactor.redact(text), priority)

    def _on_signal(self, signum: int) -> None:
        if signum == signal.SIGCHLD:
            return
        if signum in IGNORED_SIGNALS:
            self.log(f"received {signal.Signals(signum).name}: ignored (stop with SIGTERM)")
            return
        if self._drain is not None:
            if signum == signal.SIGQUIT:
                self._drain.cut(time.monotonic())
            return
        if self.stop_signal is None:
            self.stop_signal = signum
        self.stop_requested.set()

    def _read_last_run(self) -> LastRun | None:
        try:
            return LastRun.read(self.service.results_dir)
        except RecordError as exc:
            self.log(f"the last run's record is unreadable: {exc}", PRIORITY_WARNING)
            return None

    def _write_last_run(self, status: int, message: str) -> None:
        record = LastRun.following(
            self.state.previous_run,
            ended_at=now_utc(),
            exit_status=status,
            message=message,
            diagnosis=tuple(self.state.diagnosis),
            drain=self.state.drain,
            kv_pool_tokens=self.state.kv_pool_tokens,
        )
        path = Path(self.service.results_dir) / LAST_RUN_FILE
        try:
            write_atomic(path, record.to_json(), mode=0o600)
        except OSError as exc:
            self.log(f"cannot record this run in {path}: {exc.strerror}", PRIORITY_WARNING)


def _alive(thread: threading.Thread | None) -> bool:
    return thread is not None and thread.is_alive()


def _count(value: int | None) -> str:
    return "unknown" if value is None else str(value)


def _launcher_exit(code: int | None) -> str:
    if code is None:
        return f"the launcher's exit status unknown (not reaped within {LAUNCHER_REAP_WAIT_S:g} s)"
    if code < 0:
        return f"the launcher ended by signal {-code}"
    return f"the launcher exited with status {code}"
