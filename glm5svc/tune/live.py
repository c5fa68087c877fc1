"""The tune's live table on stderr: every trial so far, the one running, the best, the ETA."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from glm5svc.tune.search import describe_candidate


class LiveTable:
    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.search = None
        self.rows: dict[int, dict[str, Any]] = {}
        self.phase = "reading the host"
        self.started = time.monotonic()
        self.live: Live | None = None
        self.run_dir = ""

    def __enter__(self) -> LiveTable:
        if self.enabled:
            self.live = Live(
                self._render(), console=Console(stderr=True), refresh_per_second=2, transient=False
            )
            self.live.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.live is not None:
            self.live.update(self._render())
            self.live.stop()

    def update(self, event: str, data: dict[str, Any]) -> None:
        if event == "begin":
            self.search = data["search"]
            self.run_dir = data["run_dir"]
            for record in self.search.records:
                self._record(record)
        elif event == "trial-start":
            self.rows[data["number"]] = {
                "setting": self._describe(data["candidate"]),
                "status": "starting",
                "runs": "",
                "mean": "",
                "verdict": "",
            }
        elif event == "trial-phase":
            self.rows.setdefault(data["number"], {})["status"] = data["phase"]
        elif event == "trial-run":
            samples = data["samples"]
            row = self.rows.setdefault(data["number"], {})
            row["runs"] = str(len(samples))
            row["mean"] = f"{sum(samples) / len(samples):,.0f}"
        elif event == "trial-end":
            self._record(data["record"])
        elif event == "done":
            self.phase = f"done: {data.get('stopped_by')}"
        if self.live is not None:
            self.live.update(self._render())

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
        elapsed = time.monotonic() - self.started
        footer = f"elapsed {_clock(elapsed)}"
        if self.search is not None:
            eta = self.search.eta_s()
            footer += f"; first pass left: {self.search.planned_left()} trial(s)"
            footer += f", ETA {_clock(eta)}" if eta is not None else ", ETA after the first trial"
            footer += f"; budget left {_clock(max(0.0, self.search.time_left()))}"
        return Group(table, Text(footer))


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
