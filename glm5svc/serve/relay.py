"""Relay the server's output line by line to the journal (or stderr), with fields."""

from __future__ import annotations

import os
import re
import sys
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path

from glm5svc.serve.phases import PRIORITY_ERR, PRIORITY_INFO, LineInfo

try:
    from systemd import journal as _journal
except ImportError:  # pragma: no cover
    _journal = None

JOURNAL_SOCKET = Path("/run/systemd/journal/socket")
_LINE_BREAK = re.compile(rb"\r\n|\r|\n")


class StderrSink:
    def __init__(self, stream=None):
        self.stream = stream or sys.stderr
        self.lock = threading.Lock()

    def engine_line(self, info: LineInfo, phase: str) -> None:
        self._write(info.text)

    def message(self, text: str, priority: int = PRIORITY_INFO, **fields: str) -> None:
        self._write(f"glm5svc: {text}")

    def _write(self, text: str) -> None:
        with self.lock:
            try:
                self.stream.write(text + "\n")
                self.stream.flush()
            except (OSError, ValueError):
                pass


class JournalSink:
    """journal.send with structured fields: GLM5_PHASE, GLM5_RANK, PRIORITY from the level."""

    def __init__(self, engine_pid_getter: Callable[[], int | None]):
        self.engine_pid = engine_pid_getter

    def engine_line(self, info: LineInfo, phase: str) -> None:
        fields = {
            "PRIORITY": str(info.priority),
            "SYSLOG_IDENTIFIER": "sglang",
            "GLM5_PHASE": phase,
        }
        if info.rank is not None:
            fields["GLM5_RANK"] = str(info.rank)
        pid = self.engine_pid()
        if pid:
            fields["GLM5_ENGINE_PID"] = str(pid)
        _journal.send(info.text, **fields)

    def message(self, text: str, priority: int = PRIORITY_INFO, **fields: str) -> None:
        _journal.send(
            text,
            PRIORITY=str(priority),
            SYSLOG_IDENTIFIER="glm5svc",
            **{k.upper(): str(v) for k, v in fields.items()},
        )


def choose_sink(engine_pid_getter: Callable[[], int | None]):
    """The journal when journald is there (as under systemd), else plain stderr.

    $GLM5SVC_LOG_TARGET=stderr|journal overrides the choice.
    """
    target = os.environ.get("GLM5SVC_LOG_TARGET")
    if target == "stderr":
        return StderrSink()
    if target == "journal" and _journal is not None:
        return JournalSink(engine_pid_getter)
    if _journal is not None and (os.environ.get("JOURNAL_STREAM") or JOURNAL_SOCKET.exists()):
        return JournalSink(engine_pid_getter)
    return StderrSink()


class OutputReader:
    """Reads the server's merged stdout/stderr; tqdm's carriage returns end lines too."""

    def __init__(
        self,
        fd: int,
        on_line: Callable[[str], None],
        on_eof: Callable[[], None],
        keep_lines: int = 4000,
    ):
        self.fd = fd
        self.on_line = on_line
        self.on_eof = on_eof
        self.tail: deque[str] = deque(maxlen=keep_lines)
        self.thread = threading.Thread(target=self._run, name="engine-output", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        pending = b""
        previous = None
        try:
            while True:
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                parts = _LINE_BREAK.split(pending + chunk)
                pending = parts.pop()
                for raw in parts:
                    line = raw.decode("utf-8", "replace").rstrip()
                    if line and line != previous:  # tqdm repeats the same bar
                        previous = line
                        self.tail.append(line)
                        self.on_line(line)
            if pending.strip():
                line = pending.decode("utf-8", "replace").rstrip()
                self.tail.append(line)
                self.on_line(line)
        finally:
            self.on_eof()


ERROR_PRIORITY = PRIORITY_ERR
