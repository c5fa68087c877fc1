"""The tune's progress on stderr and in the run's log (tune.log).

On a terminal: a live table of every trial so far, the one running, the best and the ETA.
Otherwise (nohup, systemd-run, a log file): one line at each phase change and at least
every PROGRESS_EVERY_S seconds, so a redirected tune is never silent. tune.log gets the
same lines either way.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from glm5svc.tune.report import STOPPED_BY_SIGNAL
from glm5svc.tune.search import describe_candidate

PROGRESS_EVERY_S = 30.0
LOG_FILE = "tune.log"


class Progress:
    def __init__(self, live_table: bool, stream: TextIO | None = None,
                 every_s: float = PROGRESS_EVERY_S):  # fmt: skip
        self.live_table = live_table
        self.stream = stream or sys.stderr
        self.every_s = every_s
        self.search = None
        self.rows: dict[int, dict[str, Any]] = {}
        self.current: int | None = None
        self.phase = "reading the host"
        self.started = time.monotonic()
        self.live: Live | None = None
        self.run_dir = ""
        self.log: TextIO | None = None
        self.pending: list[str] = []  # lines from before the run directory was known
        self.last_line = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, name="tune-progress", daemon=True)

    def __enter__(self) -> Progress:
        if self.live_table:
            self.live = Live(
                self._render(), console=Console(stderr=True), refresh_per_second=2, transient=False
            )
            self.live.start()
        self._ticker.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._ticker.join(5)
        if self.live is not None:
            self.live.update(self._render())
            self.live.stop()
        if self.log is not None:
            self.log.close()

    # ----- events ------------------------------------------------------------------

    def update(self, event: str, data: dict[str, Any]) -> None:
        with self._lock:
            self._update(event, data)
            if self.live is not None:
                self.live.update(self._render())

    def _update(self, event: str, data: dict[str, Any]) -> None:
        if data.get("run_dir") and self.log is None:
            self._open_log(Path(data["run_dir"]))
        if event == "plan":
            self.run_dir = data.get("run_dir") or self.run_dir
            for line in data["lines"]:
                self._say(line, echo=not self.live_table)
            if self.live is not None:
                for line in data["lines"]:
                    self.live.console.print(line, highlight=False, markup=False)
        elif event == "begin":
            self.search = data["search"]
            self.run_dir = data["run_dir"]
            for record in self.search.records:
                self._record(record)
            self._say(f"begin: {len(self.search.records)} trial(s) from before")
        elif event == "trial-start":
            self.current = data["number"]
            self.rows[data["number"]] = {
                "setting": self._describe(data["candidate"]),
                "status": "starting",
                "runs": "",
                "mean": "",
                "verdict": "",
            }
            self._say(self._status_line())
        elif event == "trial-phase":
            # The executor numbers by engine start; the rows are trials (a start's live
            # values are several): the phase is the running start's, its first row's.
            number = self.current if self.current is not None else data["number"]
            self.rows.setdefault(number, {})["status"] = data["phase"]
            self._say(self._status_line())
        elif event == "trial-run":
            by_value = data.get("by_value") or {"": data["samples"]}
            row = self.rows.setdefault(data["number"], {})
            row["runs"] = str(len(data["samples"]))
            row["mean"] = ", ".join(
                (f"{value}: " if value != "" else "") + f"{sum(v) / len(v):,.0f}"
                for value, v in by_value.items()
            )
        elif event == "trial-end":
            record = data["record"]
            self._record(record)
            self.current = None
            self._say(f"trial {record.number} ended: {_ended(record)}")
        elif event == "done":
            self.phase = f"done: {data.get('stopped_by')}"
            self._say(self.phase)
            if str(data.get("stopped_by")).startswith(STOPPED_BY_SIGNAL) and self.run_dir:
                self._say(f"stopped: resume it with glm5svc tune run --resume {self.run_dir}")

    def _tick(self) -> None:
        while not self._stop.wait(1.0):
            with self._lock:
                if time.monotonic() - self.last_line >= self.every_s:
                    self._say(self._status_line())

    def _open_log(self, run_dir: Path) -> None:
        try:
            self.log = open(run_dir / LOG_FILE, "a", encoding="utf-8")  # noqa: SIM115
        except OSError:
            return
        for line in self.pending:
            self.log.write(line + "\n")
        self.log.flush()
        self.pending.clear()

    def _say(self, text: str, echo: bool | None = None) -> None:
        line = f"tune {_clock(time.monotonic() - self.started)} {text}"
        self.last_line = time.monotonic()
        if echo if echo is not None else not self.live_table:
            print(line, file=self.stream, flush=True)
        if self.log is not None:
            self.log.write(line + "\n")
            self.log.flush()
        else:
            self.pending.append(line)

    def _status_line(self) -> str:
        parts = []
        if self.current is not None:
            row = self.rows.get(self.current, {})
            parts.append(f"trial {self.current} ({row.get('setting', '')}): "
                         f"{row.get('status', '')}")  # fmt: skip
            if row.get("runs"):
                parts.append(f"{row['runs']} window(s), {row['mean']} tok/s")
        else:
            parts.append(self.phase)
        best = getattr(self.search, "best", None)
        if best is not None and best.samples:
            parts.append(f"best: trial {best.number}, "
                         f"{sum(best.samples) / len(best.samples):,.0f} tok/s")  # fmt: skip
        parts.append(self._eta())
        return "; ".join(p for p in parts if p)

    def _eta(self) -> str:
        if self.search is None:
            return ""
        eta = self.search.eta_s()
        text = f"first pass left: {self.search.planned_left()} trial(s)"
        text += f", ETA {_clock(eta)}" if eta is not None else ", ETA after the first trial"
        return text + f"; budget left {_clock(max(0.0, self.search.time_left()))}"

    # ----- the table ---------------------------------------------------------------

    def _describe(self, candidate) -> str:
        start = self.search.start if self.search else {}
        return describe_candidate(candidate, start)

    def _record(self, record) -> None:
        samples = record.samples
        self.rows[record.number] = {
            "setting": self._describe(record.candidate),
            "status": record.status,
            "runs": str(len(samples)),
            "mean": f"{sum(samples) / len(samples):,.0f}" if samples else "-",
            "verdict": record.verdict + (" (best)" if record.became_best else ""),
        }

    def _render(self):
        table = Table(title=f"glm5svc tune {self.run_dir}", expand=False)
        for name in ("trial", "setting", "status", "runs", "tok/s", "verdict"):
            table.add_column(name)
        for number in sorted(self.rows):
            row = self.rows[number]
            table.add_row(
                str(number),
                row.get("setting", ""),
                row.get("status", ""),
                row.get("runs", ""),
                row.get("mean", ""),
                row.get("verdict", ""),
            )
        footer = f"elapsed {_clock(time.monotonic() - self.started)}"
        if self.search is not None:
            footer += "; " + self._eta()
        return Group(table, Text(footer))


def _ended(record) -> str:
    """How a trial ended: its status, and its verdict where that says more."""
    if record.status == "interrupted":
        why = record.outcome.get("failure")
        cut = f"interrupted ({why})" if why else "interrupted"
        return cut + ": its start was cut; a resume measures it again"
    verdict = record.verdict
    return record.status + (f", {verdict}" if verdict and verdict != record.status else "")


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
