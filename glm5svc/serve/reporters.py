"""What the supervisor's threads and signal handlers run: each reads, then reports on the
loop's queue (glm5svc.serve.events). None decides anything or writes the state; the
supervision loop (glm5svc.serve.supervisor) does both.
"""

from __future__ import annotations

import queue
import signal
import threading
import time
from collections.abc import Callable

from glm5svc.child_group import live_group_members
from glm5svc.config import Config
from glm5svc.port_owners import holders
from glm5svc.redaction import Redactor
from glm5svc.serve.events import (
    DrainCounters,
    EngineLine,
    HealthPassed,
    HealthProbed,
    OutputClosed,
    ReadinessChecked,
    SignalReceived,
)
from glm5svc.serve.phases import later_startup_phase, parse_line
from glm5svc.serve.probes import EngineClient, ProbeResult
from glm5svc.serve.process import EngineProcess
from glm5svc.serve.relay import OutputReader
from glm5svc.serve.state import SupervisorState

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGABRT)
IGNORED_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2)


class Reporters:
    def __init__(
        self,
        events: queue.SimpleQueue,
        client: EngineClient,
        engine: EngineProcess,
        config: Config,
        sink,
        state: SupervisorState,
    ):
        self.events = events
        self.client = client
        self.engine = engine
        self.config = config
        self.sink = sink
        self.state = state  # read only
        self.output_closed = threading.Event()

    @staticmethod
    def start(target: Callable[[], None], name: str) -> threading.Thread:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        return thread

    def output_reader(self, redactor: Redactor) -> OutputReader:
        """The thread that reads the engine's output (redacted) into `engine_line`."""
        return OutputReader(
            self.engine.stdout_fd,
            self.engine_line,
            self.output_ended,
            redact=redactor.redact,
            redact_cut=redactor.redact_cut,
        )

    def engine_line(self, line: str) -> None:
        """The output reader's thread: relay the line to the journal, then report it."""
        info = parse_line(line)
        phase = self.state.phase
        if not self.state.ready and info.phase and later_startup_phase(phase, info.phase):
            phase = info.phase
        self.sink.engine_line(info, phase.value, self.engine.pid)
        self.events.put(EngineLine(info, time.monotonic()))

    def output_ended(self) -> None:
        self.output_closed.set()
        self.events.put(OutputClosed(time.monotonic()))

    def readiness_check(self, own_ready_line: bool = False) -> None:
        """Is the port ours, does it answer, does it generate?"""
        timeout = self.config.service.probe_timeout_s
        port = self.port_is_ours()
        if not port.ok:
            self.events.put(ReadinessChecked(port, at=time.monotonic()))
            return
        # Once our child printed its ready line, its HTTP server is up, and the generation
        # check comes next (the plan skips sglang's own warm-up request: this check is the
        # one real generation before READY). sglang 0.5.11 serves /health and
        # /health_generate with one handler that sleeps a whole second before looking
        # (http_server.py, health_generate): asking it would hold READY back by that second
        # (recorded on an H200, tests/fixtures/real_engine/sglang-0.5.11-h200-drain).
        if own_ready_line:
            health = ProbeResult(True, "sglang's ready line")
        else:
            health = self.client.health_generate(timeout)
        generation = None
        if health.ok:
            self.events.put(HealthPassed())
            generation = self.client.generation_check(timeout)
        self.events.put(ReadinessChecked(health, port, generation, time.monotonic()))

    def port_is_ours(self) -> ProbeResult:
        port = self.config.server.port
        pgid = self.engine.pid
        members = live_group_members(pgid) if pgid else []
        if holders(port, members):
            return ProbeResult(True, f"port {port} held by the engine's process group")
        others = holders(port)
        if others:
            who = ", ".join(f"pid {h.pid} ({h.command})" for h in others[:3])
            return ProbeResult(False, f"port {port} is held by another process: {who}")
        return ProbeResult(False, f"port {port} is not bound by the engine yet")

    def health_probe(self) -> None:
        """Counters, /health_generate, counters again on failure."""
        timeout = self.config.service.probe_timeout_s
        counters = self.client.progress_counters(min(timeout, 5.0))
        result = self.client.health_generate(timeout)
        counters_after = self.client.progress_counters(min(timeout, 5.0)) if not result.ok else None
        self.events.put(HealthProbed(counters, result, counters_after, time.monotonic()))

    def drain_counters(self) -> None:
        counters = self.client.progress_counters(min(self.config.service.probe_timeout_s, 2.0))
        self.events.put(DrainCounters(counters, time.monotonic()))

    def install_signal_handlers(self) -> None:
        def report(signum, frame):
            self.events.put(SignalReceived(signum))  # SimpleQueue.put is signal-safe

        for sig in (*STOP_SIGNALS, *IGNORED_SIGNALS, signal.SIGCHLD):
            signal.signal(sig, report)
