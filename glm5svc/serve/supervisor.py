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

The threads run serve/reporters.py and serve/post_ready.py and report serve/events.py;
start-up's clock and what a log line changes are in serve/startup.py, the drain's
bookkeeping in serve/drain.py; the loop speaks through serve/announce.py (journal,
systemd) and records the run through serve/run_record.py. Each computes; the loop applies.

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

from glm5svc.config import Config
from glm5svc.errors import EXIT_CONFIG
from glm5svc.records import BenchmarkStatus
from glm5svc.redaction import Redactor
from glm5svc.serve.announce import Announcer
from glm5svc.serve.diagnosis import EXIT_ENGINE_FAILED, cannot_start, diagnose, exit_status_for
from glm5svc.serve.drain import LAUNCHER_REAP_WAIT_S, Drain, DrainStep
from glm5svc.serve.events import (
    DrainCounters,
    EngineLine,
    Event,
    HealthPassed,
    HealthProbed,
    HookFinished,
    ReadinessChecked,
    SignalReceived,
)
from glm5svc.serve.notify import Notifier, child_environment
from glm5svc.serve.phases import PRIORITY_ERR, PRIORITY_WARNING, Phase
from glm5svc.serve.post_ready import PostReadyContext, PostReadyHook, start_post_ready
from glm5svc.serve.probes import EngineClient
from glm5svc.serve.process import EngineProcess, Launch, become_subreaper
from glm5svc.serve.relay import OutputReader
from glm5svc.serve.reporters import IGNORED_SIGNALS, Reporters
from glm5svc.serve.run_record import RunRecord
from glm5svc.serve.startup import NO_CHANGE, StartupClock
from glm5svc.serve.state import SupervisorState

LOOP_TICK_S = 0.1
# Probes failing this many times in a row with no engine progress: out of rotation.
UNRESPONSIVE_AFTER_FAILURES = 3
# sglang logs the ready line at INFO: with a quieter --log-level it never appears.
LOG_LEVELS_WITH_READY_LINE = ("debug", "info")


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
        self.notifier = notifier
        self.state = SupervisorState(self.service.wedge_window_s)
        self.state.launch_plan = launch.summary
        self.state.plan_warnings = list(launch.warnings)
        self.engine = EngineProcess(launch.argv, child_environment(dict(os.environ), launch.env))
        self.client = EngineClient(config.server.host, config.server.port, launch.api_key)
        self.redactor = Redactor.for_service(
            launch.api_key, config.server.env, config.server.secret_env
        )
        self.announce = Announcer(sink, notifier, self.redactor)
        self.log = self.announce.log
        self.run_record = RunRecord(self.service.results_dir, self.log)
        self.post_ready_hook = post_ready_hook
        self.expect_ready_line = config.server.log_level in LOG_LEVELS_WITH_READY_LINE
        self.events: queue.SimpleQueue = queue.SimpleQueue()  # put() is signal-safe
        self.stop_requested = threading.Event()
        self.stop_signal: int | None = None
        self.reader: OutputReader | None = None
        self._timers = _Timers()
        self._startup = StartupClock(self.service, notifier, last_progress=time.monotonic())
        self.post_ready_context = PostReadyContext(  # the hook's, once ready
            config, self.client.base_url, self.state, self.stop_requested, self.log
        )
        self.post_ready_context.sampler = telemetry_sampler
        self.post_ready_context.launch_plan = launch.summary
        self.post_ready_context.api_key = launch.api_key
        self.reporters = Reporters(self.events, self.client, self.engine, config, sink, self.state)
        self.output_closed = self.reporters.output_closed
        self._drain: Drain | None = None
        self._drain_poll_thread: threading.Thread | None = None
        self._exit_status: int | None = None

    # ----- entry point -------------------------------------------------------------
    def run(self) -> int:
        self.state.previous_run = self.run_record.read()
        self.reporters.install_signal_handlers()
        become_subreaper()
        try:
            return self._supervise()
        finally:
            self._end_group_on_exit()
            self.announce.status(self.state.status_text)

    def _supervise(self) -> int:
        try:
            pid = self.engine.start()
        except OSError as exc:  # no interpreter or program there: restarting cannot help
            message = cannot_start(self.engine.argv[0], exc)
            self._set_phase(Phase.FAILED, f"failed: {message}")
            self.log(message, PRIORITY_ERR)
            self.run_record.write(self.state, EXIT_CONFIG, message)
            return EXIT_CONFIG
        now = time.monotonic()
        with self.state.lock:
            self.state.engine_pid = pid
            self.state.engine_started_mono = now
            self.state.engine_starts += 1
        self.announce.started(pid, self.engine.argv)
        self._startup.progress(now, "starting the server", force=True)
        self.reader = self.reporters.output_reader(self.redactor)
        self.reader.start()
        while self._exit_status is None:
            self._wait_and_handle_events()
            self._tick(time.monotonic())
        return self._exit_status

    def _wait_and_handle_events(self) -> None:
        try:
            event = self.events.get(timeout=LOOP_TICK_S)
            while True:
                self._handle(event)
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
            self.announce.watchdog()
            self._timers.next_watchdog = now + interval

    # ----- start-up ----------------------------------------------------------------
    def _startup_step(self, now: float) -> str | None:
        overdue = self._startup.overdue(now, self.state)
        # Our own child's ready line first: another server answering on the port is not ours.
        if not overdue and (self.state.engine_ready_line or not self.expect_ready_line):
            ready_line = self.state.engine_ready_line
            self._probe_when_due(now, partial(self.reporters.readiness_check, ready_line))
        return overdue

    def _on_health_passed(self) -> None:
        if self.state.phase in (Phase.STARTING, Phase.LOADING, Phase.AUTOTUNE, Phase.WARMUP):
            self._set_phase(Phase.CHECKING, "checking one real generation", status=True)

    def _on_readiness(self, event: ReadinessChecked) -> None:
        if self.state.ready or self._drain is not None or self.engine.poll() is not None:
            return
        failed = event.failure
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
        self.announce.ready(self.state.startup_seconds, event)
        self._timers.next_probe = time.monotonic() + self.service.probe_interval_s
        if self.post_ready_hook is not None:
            self._start_post_ready_hook()

    def _on_engine_line(self, event: EngineLine) -> None:
        info, change = event.info, NO_CHANGE
        with self.state.lock:
            if info.fired_up:
                self.state.engine_ready_line = True
            if info.kv_pool_tokens is not None:
                self.state.record_kv_pool(info.kv_pool_tokens)
            if not self.state.ready and self._drain is None:
                change = self._startup.line_change(info, self.state)
                if change.phase:
                    self.state.set_phase(change.phase)
                if change.load_percent is not None:
                    self.state.load_percent = change.load_percent
                if change.status_text is not None:
                    self.state.status_text = change.status_text
        if change.phase:
            self.announce.phase(change.phase, None)
        if change.progress is not None:
            self._startup.progress(event.at, change.progress, force=change.phase is not None)
        if info.fired_up and not self.state.ready:
            self._timers.next_probe = 0.0  # check readiness now

    # ----- serving -----------------------------------------------------------------
    def _check_frozen(self) -> None:
        stopped = self.engine.stopped_members()
        if stopped == self.state.stopped_pids:
            return
        with self.state.lock:
            self.state.stopped_pids = stopped
        if stopped:
            self.announce.frozen(stopped)
        else:
            self.log("engine processes running again")

    def _serving_step(self, now: float) -> None:
        health = self.state.health
        change = self.state.update_health(now, UNRESPONSIVE_AFTER_FAILURES)
        if change.unresponsive:
            self.announce.unresponsive(health.consecutive_failures, health.last_probe_error)
        if change.wedged:
            self.announce.wedged(self.service.wedge_window_s, health.last_probe_error)
        elif change.progressing:
            self.log("engine progressing again")
            self.announce.status(self.state.status_text)
        self._probe_when_due(now, self.reporters.health_probe)

    def _on_health(self, event: HealthProbed) -> None:
        if self._drain is None and self.state.record_health_probe(
            event.result.ok, event.result.detail, event.at,
            (event.counters_before, event.counters_after), UNRESPONSIVE_AFTER_FAILURES,
        ):  # fmt: skip
            self.log("engine answering again: back in rotation")
            self.announce.status(self.state.status_text)

    def _start_post_ready_hook(self) -> None:
        with self.state.lock:
            self.state.benchmark_running = True
        self._set_phase(Phase.BENCHMARKING, "benchmarking (post-start)", status=True)
        start_post_ready(self.post_ready_hook, self.post_ready_context, self.events, self.log)

    def _on_hook_finished(self, result: BenchmarkStatus | None) -> None:
        with self.state.lock:
            self.state.benchmark = result
            self.state.benchmark_running = False
        if self._drain is None and self.state.ready:
            text = "serving" + (f" ({self.state.degraded_reason()})" if self.state.degraded else "")
            self._set_phase(Phase.SERVING, text, status=True)

    # ----- endings -----------------------------------------------------------------
    def _engine_exited(self, code: int) -> int:
        with self.state.lock:  # out of rotation at once, before anything slower
            self.state.engine_exit_status = code
            self.state.ready = False
        self.output_closed.wait(2.0)  # let the reader pass on the last lines
        diagnoses = self._diagnose()
        if any(d.signature.id == "engine-port-in-use" for d in diagnoses):
            self.announce.port_holders(self.config.server.port)
        how = f"exit status {code}" if code >= 0 else f"signal {-code}"
        message = f"the server exited ({how}) while {self.state.phase.value}"
        return self._fail(message, diagnoses, code)

    def _give_up(self, reason: str) -> int:
        message = f"giving up: {reason} (server process group: {self.engine.kill_group()})"
        return self._fail(message, self._diagnose(), self.engine.poll())

    def _fail(self, message: str, diagnoses, engine_code) -> int:
        status = exit_status_for(diagnoses)
        leftover = self.engine.kill_group()  # TGI's rule: one part gone, tear down all
        with self.state.lock:
            self.state.engine_exit_status = engine_code
            self.state.ready = False
            self.state.diagnosis = [d.to_record() for d in diagnoses]
            self.state.last_error = message
        summary = diagnoses[0].signature.title if diagnoses else "no known failure signature"
        self._set_phase(Phase.FAILED, f"failed: {message}; {summary}")
        self.announce.failure(message, diagnoses, leftover)
        self.run_record.write(self.state, status, message)
        self.log(f"exiting with status {status}")
        return status

    # ----- stopping: sglang's own drain ----------------------------------------------
    def _begin_stop(self, sig: int, now: float) -> None:
        hopeless = self.state.wedged or self.state.unresponsive or bool(self.state.stopped_pids)
        read_counters = self.client.progress_counters if self.state.ready else None
        drain = self._drain = Drain.begin(
            sig, now, self.service.drain_timeout_s, hopeless=hopeless, read_counters=read_counters
        )
        with self.state.lock:
            self.state.draining = True
            self.state.ready = False
            self.state.drain = drain.report(now)
        text = f"draining (up to {drain.deadline_s:g} s)"
        self._set_phase(Phase.DRAINING, text)
        self.announce.stopping(text)
        self.log(drain.begin_text(self.engine.pid))
        if drain.deadline_s > 0:
            self.engine.signal_launcher(signal.SIGTERM)

    def _drain_step(self, now: float) -> None:
        drain = self._drain
        members = self.engine.group_members()
        match drain.step(now, not members, _alive(self._drain_poll_thread)):
            case DrainStep.DONE:
                self._exit_status = self._drained(now)
            case DrainStep.GIVE_UP:
                self._exit_status = self._drained(now, survivors=members)
            case DrainStep.KILL:
                self.log(drain.kill_text(now, members), PRIORITY_WARNING)
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
            self._set_phase(Phase.DRAINING, text, status=True)
        with self.state.lock:
            self.state.drain = drain.report(event.at)

    def _drained(self, now: float, survivors: list[int] | None = None) -> int:
        drain = self._drain
        code = self.engine.poll() if survivors else self.engine.wait(LAUNCHER_REAP_WAIT_S)
        self.output_closed.wait(2.0)
        left = len(survivors or [])
        outcome = drain.outcome(survivors)
        with self.state.lock:
            self.state.engine_exit_status = code
            self.state.drain = drain.report(now, outcome, left)
        self.log(drain.summary(now, outcome, left, code))
        self._set_phase(Phase.STOPPED, f"stopped (server {outcome})")
        self.log(f"server stopped: {outcome}")
        status = EXIT_ENGINE_FAILED if drain.watchdog_abort or survivors else 0
        self.run_record.write(self.state, status, f"stopped by {drain.signal_name}: {outcome}")
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
    def _diagnose(self):
        return diagnose(self.reader.tail if self.reader else [])

    def _probe_when_due(self, now: float, target) -> None:
        """One probe thread at a time, every service.probe_interval_s."""
        if now >= self._timers.next_probe and not _alive(self._timers.probe_thread):
            self._timers.next_probe = now + self.service.probe_interval_s
            self._timers.probe_thread = self.reporters.start(target, "engine-probe")

    def _set_phase(self, phase: Phase, text: str, status: bool = False) -> None:
        """The new phase into the state; announced when it changed, `status`: to systemd too."""
        changed = self.state.phase != phase
        self.state.set_phase(phase, text)
        if changed:
            self.announce.phase(phase, text)
        if status:
            self.announce.status(text)

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
        self.stop_signal = self.stop_signal or signum  # the first one counts
        self.stop_requested.set()


def _alive(thread: threading.Thread | None) -> bool:
    return thread is not None and thread.is_alive()
