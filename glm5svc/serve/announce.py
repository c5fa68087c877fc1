"""What the supervision loop tells the journal and systemd: its log lines (redacted), each
new phase as a message of its own, READY=1, STATUS=, STOPPING=1 and WATCHDOG=1.

It only says what the loop has decided; it neither reads the engine nor writes the state.
"""

from __future__ import annotations

from glm5svc.port_owners import holders
from glm5svc.redaction import Redactor
from glm5svc.serve.diagnosis import Diagnosis
from glm5svc.serve.events import ReadinessChecked
from glm5svc.serve.notify import Notifier
from glm5svc.serve.phases import PRIORITY_ERR, PRIORITY_INFO, Phase


class Announcer:
    def __init__(self, sink, notifier: Notifier, redactor: Redactor):
        self.sink = sink
        self.notifier = notifier
        self.redactor = redactor

    def log(self, text: str, priority: int = PRIORITY_INFO) -> None:
        self.sink.message(self.redactor.redact(text), priority)

    def started(self, pid: int, argv: list[str]) -> None:
        command = " ".join(self.redactor.redact(token) for token in argv)
        self.log(f"started the server, pid {pid} (process group {pid}): {command}")

    def phase(self, phase: Phase, text: str | None) -> None:
        """Each new phase as a message of its own, so `journalctl -u glm5` shows it."""
        detail = f" — {text}" if text and text != phase.value else ""
        self.sink.message(f"phase: {phase.value}{detail}", PRIORITY_INFO, glm5_phase=phase.value)

    def status(self, text: str) -> None:
        self.notifier.status(text)

    def ready(self, startup_seconds: float, checked: ReadinessChecked) -> None:
        """READY=1, and which checks passed."""
        self.notifier.ready(f"serving (ready after {startup_seconds:.1f} s)")
        checks = f"{checked.port.detail}; {checked.health.detail}; {checked.generation.detail}"
        self.log(f"ready after {startup_seconds:.1f} s: {checks}")

    def stopping(self, text: str) -> None:
        self.notifier.stopping(text)

    def watchdog(self) -> None:
        self.notifier.watchdog()

    def alarm(self, message: str) -> None:
        """Something is wrong with the engine: the journal at ERR, and systemd's STATUS."""
        self.log(message, PRIORITY_ERR)
        self.notifier.status(message)

    def frozen(self, stopped: list[int]) -> None:
        self.alarm(f"engine frozen: process(es) {stopped} stopped (SIGSTOP); not ready")

    def unresponsive(self, failures: int, last_error: str | None) -> None:
        self.alarm(
            f"engine unresponsive: {failures} probes failed with no "
            f"progress ({last_error}); /readyz 503 until it recovers"
        )

    def wedged(self, window_s: float, last_error: str | None) -> None:
        self.alarm(
            f"engine wedged: probes failing and no progress for "
            f"{window_s:g} s ({last_error}); withholding watchdog pings"
        )

    def failure(self, message: str, diagnoses: list[Diagnosis], leftover: str) -> None:
        """Why the service gives up: the message, each known signature's cause and fix,
        what was left of the server's group."""
        self.log(message, PRIORITY_ERR)
        for diagnosis in diagnoses:
            self.log(diagnosis.render(), PRIORITY_ERR)
        if not diagnoses:
            self.log(
                "diagnosis: no known failure signature in the server log; see the lines above",
                PRIORITY_ERR,
            )
        if leftover != "empty":
            self.log(f"server process group: {leftover}")

    def port_holders(self, port: int) -> None:
        for holder in holders(port):
            self.log(f"port {port} is held by pid {holder.pid}: {holder.command}", PRIORITY_ERR)
