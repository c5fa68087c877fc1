"""The commands a night runs on the box (`glm5svc bench`, `glm5svc tune run`, `tune apply`),
each a child in its own process group that dies with the night (a SIGKILL of the night's
unit leaves nothing behind), its stdout (the `--json` document) and stderr kept in the
night's folder, and stopped with SIGTERM when the night is told to stop.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from glm5svc.child_group import spawn

POLL_S = 1.0


class Stopped(Exception):
    """The night was told to stop (SIGTERM: `systemctl stop glm5-tune`, `glm5svc night stop`)."""


@dataclass(frozen=True)
class Finished:
    returncode: int
    document: dict[str, Any] | None  # the --json document on stdout, when it printed one
    log: Path

    def error(self) -> str:
        if self.document and self.document.get("error"):
            return str(self.document["error"]).splitlines()[0]
        try:
            lines = self.log.read_text(encoding="utf-8", errors="replace").strip().splitlines()
        except OSError:
            lines = []
        return lines[-1] if lines else f"exit status {self.returncode}"


def glm5svc_argv(config_path: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "glm5svc", "--config", config_path, *args]


def run_child(argv: list[str], name: str, folder: Path, stop: threading.Event) -> Finished:
    """Run argv to its end; on `stop`, SIGTERM to it (its own clean stop) and wait for it."""
    folder.mkdir(parents=True, exist_ok=True)
    out, log = folder / f"{name}.json", folder / f"{name}.log"
    with out.open("wb") as stdout, log.open("ab") as stderr:
        group = spawn(argv, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr)
        signalled = False
        while group.wait(POLL_S) is None:
            if stop.is_set() and not signalled:
                group.signal_leader(signal.SIGTERM)
                signalled = True
        returncode = group.returncode
    try:
        document = json.loads(out.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        document = None
    if stop.is_set():
        raise Stopped(f"{name} stopped (exit status {returncode})")
    return Finished(int(returncode if returncode is not None else -1), document, log)
