"""The time a tune has spent of its budget, kept in the run directory as it runs
(budget.json, written atomically at every step), so that a resume gets what was left of
the budget it was given, not a new one (unless `--budget` is given with `--resume`)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from glm5svc.atomic_file import write_atomic
from glm5svc.errors import ConfigError
from glm5svc.json_output import now_utc

BUDGET_FILE = "budget.json"
# Less than this left: no start could begin (the stop and the outputs are kept inside
# the budget, glm5svc/tune/session.py): a resume needs a new --budget.
MIN_LEFT_S = 30.0


@dataclass(frozen=True)
class Left:
    budget_s: float  # what this run may spend
    spent_s: float  # what the earlier runs of this study spent, all together
    note: str  # where the figure comes from, for the plan's lines


def budget_left(run_dir: Path, saved_budget_s: float, given_s: float | None) -> Left:
    """The budget of a resumed run: `given_s` (--budget with --resume), else what the
    last run left of its own. ConfigError when nothing worth a start is left."""
    record = read_budget(run_dir)
    spent = float(record.get("spent_total_s") or 0.0)
    if given_s is not None:
        return Left(given_s, spent, f"the budget given with --resume, {_clock(given_s)}")
    if not record:
        return Left(saved_budget_s, spent, f"no record of the time spent ({BUDGET_FILE}): "
                    f"the whole budget the run was given, {_clock(saved_budget_s)}")  # fmt: skip
    left = float(record["budget_s"]) - float(record["spent_s"])
    if left < MIN_LEFT_S:
        raise ConfigError(
            f"--resume {run_dir}: its budget of {_clock(float(record['budget_s']))} is spent "
            f"({_clock(float(record['spent_s']))} used, {_clock(max(0.0, left))} left): give "
            "a new one with --resume, e.g. `glm5svc tune run --resume "
            f"{run_dir} --budget 30m`"
        )
    return Left(left, spent, f"what the last run left of its {_clock(record['budget_s'])}, "
                f"{_clock(left)}")  # fmt: skip


def read_budget(run_dir: Path) -> dict[str, Any]:
    """budget.json's figures, or {} when there is none (a run before it was kept) or it
    cannot be read as one."""
    try:
        record = json.loads((Path(run_dir) / BUDGET_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    numbers = ("budget_s", "spent_s", "spent_total_s")
    if not isinstance(record, dict) or not all(
        isinstance(record.get(k), int | float) and not isinstance(record.get(k), bool)
        for k in numbers
    ):
        return {}
    return record


class BudgetLedger:
    """This run's spending, written as it goes: `budget_s` this run may spend, `spent_s`
    spent so far since `started` (time.monotonic()), `spent_total_s` with the earlier
    runs' (`spent_before_s`)."""

    def __init__(self, run_dir: Path, budget_s: float, started: float, spent_before_s: float):
        self.path = Path(run_dir) / BUDGET_FILE
        self.budget_s = budget_s
        self.started = started
        self.spent_before_s = spent_before_s

    def record(self) -> None:
        spent = time.monotonic() - self.started
        figures = {
            "budget_s": round(self.budget_s, 1),
            "spent_s": round(spent, 1),
            "spent_total_s": round(self.spent_before_s + spent, 1),
            "updated_at": now_utc(),
        }
        try:
            write_atomic(self.path, json.dumps(figures, indent=2) + "\n")
        except OSError:
            pass  # the run goes on; a resume then gets the whole budget, and says so


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"
