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
# Longer lines are cut: journald keeps at most 48 KiB of a stream line anyway.
MAX_LINE_BYTES = 32 * 1024


class StderrSink:
    def __init__(self, stream=None):
        self.stream = stream or sys.stderr
        self.lock = threading.Lock()

    def engine_line(self, info: LineInfo, phase: str, engine_pid: int | None = None) -> None:
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
    """journal.send with structured fields: GLM5_PHASE, GLM5_RANK, GLM5_ENGINE_PID, PRIORITY
    from the level."""

    def engine_line(self, info: LineInfo, phase: str, engine_pid: int | None = None) -> None:
        fields = {
            "PRIORITY": str(info.priority),
            "SYSLOG_IDENTIFIER": "sglang",
            "GLM5_PHASE": phase,
        }
        if info.rank is not None:
            fields["GLM5_RANK"] = str(info.rank)
        if engine_pid:
            fields["GLM5_ENGINE_PID"] = str(engine_pid)
        _journal.send(info.text, **fields)

    def message(self, text: str, priority: int = PRIORITY_INFO, **fields: str) -> None:
        _journal.send(
            text,
            PRIORITY=str(priority),
            SYSLOG_IDENTIFIER="glm5svc",
            **{k.upper(): str(v) for k, v in fields.items()},
        )


def choose_sink():
    """The journal when journald is there (as under systemd), else plain stderr.

    $GLM5SVC_LOG_TARGET=stderr|journal overrides the choice.
    """
    target = os.environ.get("GLM5SVC_LOG_TARGET")
    if target == "stderr":
        return StderrSink()
    if target == "journal" and _journal is not None:
        return JournalSink()
    if _journal is not None and (os.environ.get("JOURNAL_STREAM") or JOURNAL_SOCKET.exists()):
        return JournalSink()
    return StderrSink()


class OutputReader:
    """Reads the server's merged stdout/stderr; tqdm's carriage returns end lines too.

    Linear in the output: only each new chunk is searched for line ends, and a line
    longer than `max_line_bytes` is cut (its remainder counted, not kept). Every line
    passes through `redact` before it is kept, relayed or parsed.
    """

    def __init__(
        self,
        fd: int,
        on_line: Callable[[str], None],
        on_eof: Callable[[], None],
        keep_lines: int = 4000,
        redact: Callable[[str], str] | None = None,
        redact_cut: Callable[[str], str] | None = None,
        max_line_bytes: int = MAX_LINE_BYTES,
    ):
        self.fd = fd
        self.on_line = on_line
        self.on_eof = on_eof
        self.redact = redact or (lambda text: text)
        self.redact_cut = redact_cut or self.redact
        self.max_line_bytes = max_line_bytes
        self.tail: deque[str] = deque(maxlen=keep_lines)
        self.thread = threading.Thread(target=self._run, name="engine-output", daemon=True)
        self._previous: str | None = None

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        pending: list[bytes] = []
        pending_len = 0
        dropped = 0
        try:
            while True:
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                start = 0
                for match in _LINE_BREAK.finditer(chunk):
                    piece = chunk[start : match.start()]
                    start = match.end()
                    if pending:
                        pending.append(piece)
                        piece, pending, pending_len = b"".join(pending), [], 0
                    self._emit(piece, dropped)
                    dropped = 0
                rest = chunk[start:]
                room = self.max_line_bytes - pending_len
                if len(rest) > room:
                    dropped += len(rest) - max(room, 0)
                    rest = rest[: max(room, 0)]
                if rest:
                    pending.append(rest)
                    pending_len += len(rest)
            if pending or dropped:
                self._emit(b"".join(pending), dropped)
        finally:
            self.on_eof()

    def _emit(self, raw: bytes, dropped: int) -> None:
        if len(raw) > self.max_line_bytes:
            dropped += len(raw) - self.max_line_bytes
            raw = raw[: self.max_line_bytes]
        text = raw.decode("utf-8", "replace").rstrip()
        if dropped:
            line = self.redact_cut(text) + f" [... {dropped} more bytes cut by glm5svc]"
        else:
            line = self.redact(text)
        if line and line != self._previous:  # tqdm repeats the same bar
            self._previous = line
            self.tail.append(line)
            self.on_line(line)


ERROR_PRIORITY = PRIORITY_ERR
