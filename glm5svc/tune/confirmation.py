"""Whether a tune's best was confirmed by a fresh engine start, as summary.json records it
and `tune apply` reads it: an overlay is written, and applied, only for a confirmed best.

summary.json keys: `confirmed` (true/false), `confirmation` (one of STATUSES),
`confirmation_detail` (what the confirming start showed, or why there was none) and
`confirmation_command` (the command that would make the confirming start, or null).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from glm5svc.tune.evidence import setting_key

CONFIRMED = "confirmed"  # a fresh start of the best reproduced its gain
FAILED = "failed"  # the confirming start ran: the gain was not reproduced, or it failed
CUT = "cut"  # the confirming start was interrupted: a signal, or the budget's deadline
NOT_RUN = "not-run"  # owed, never started: the budget or --max-trials spent, or a signal
UNCONFIRMED = "unconfirmed"  # no start confirmed the best, and the search owed it none
NO_CHANGE = "no-change"  # nothing measured better than the start: nothing to confirm
STATUSES = (CONFIRMED, FAILED, CUT, NOT_RUN, UNCONFIRMED, NO_CHANGE)
# A resume makes the owed confirming start (glm5svc/tune/search.py, Search.run).
RESUMABLE = (CUT, NOT_RUN)
STUDY_ATTR = "confirmation"  # the study's record of its last verdict on the best
BUDGET_MARGIN_S = 15.0  # the stop and the outputs, within the budget (glm5svc/tune/session.py)


@dataclass(frozen=True)
class Confirmation:
    status: str
    detail: str
    command: str | None = None

    @property
    def confirmed(self) -> bool:
        return self.status == CONFIRMED

    def to_summary(self) -> dict[str, Any]:
        return {
            "confirmed": self.confirmed,
            "confirmation": self.status,
            "confirmation_detail": self.detail,
            "confirmation_command": self.command,
        }


def of_run(search: Any, run_dir: str, recalled: dict[str, Any] | None) -> Confirmation:
    """The verdict on a Search's best once its run ended, with the command that would
    confirm it; `recalled`: what an earlier run of this study found (read_recalled)."""
    found = of_search(search, recalled)
    walls = {r.start: r.outcome.get("wall_s") or 0.0 for r in search.records
             if r.status == "measured" and r.start is not None}  # fmt: skip
    return with_command(found, run_dir, list(walls.values()))


def of_search(search: Any, recalled: dict[str, Any] | None) -> Confirmation:
    best = search.best
    if best is None:
        return Confirmation(NO_CHANGE, "nothing was measured: there is no best")
    if setting_key(best.candidate) == setting_key(search.start):
        return Confirmation(NO_CHANGE, "no setting measured better than the start")
    said = search.confirmation
    if search.confirmed is True:
        return Confirmation(CONFIRMED, said or "confirmed by a fresh start")
    if search.confirmed is False:
        later = [r for r in search.records
                 if r.start is not None and best.start is not None and r.start > best.start
                 and search.combo_key(r.candidate) == search.combo_key(best.candidate)]  # fmt: skip
        confirming = later[-1] if later else None
        if confirming is not None and confirming.status == "interrupted":
            return Confirmation(CUT, f"its confirming start was cut ({search.stopped_by})")
        if confirming is not None and confirming.status != "measured":
            return Confirmation(
                FAILED, f"its confirming start did not measure ({confirming.status}): {said}"
            )
        return Confirmation(FAILED, f"its gain was not reproduced by a fresh engine start: {said}")
    if recalled and recalled.get("best") == best.number:
        if recalled.get("status") in (CONFIRMED, FAILED):
            return Confirmation(recalled["status"], f"{recalled.get('detail')} (an earlier run)")
    if search.confirmation_owed():
        why = said or f"no confirming start was made: {search.stopped_by}"
        return Confirmation(NOT_RUN, why)
    return Confirmation(
        UNCONFIRMED,
        said
        or "no fresh start confirmed the best: the search started its combination again "
        "before it was owed a confirmation",
    )


def with_command(confirmation: Confirmation, run_dir: str, walls: list[float]) -> Confirmation:
    """The command that makes the owed confirming start, for a confirmation a resume makes."""
    if confirmation.status not in RESUMABLE:
        return confirmation
    return Confirmation(confirmation.status, confirmation.detail,
                        resume_command(run_dir, walls))  # fmt: skip


def resume_command(run_dir: str, start_walls: list[float]) -> str:
    """`tune run --resume` with a budget for a confirming start: twice a start's mean wall
    time, as measured, and the stop and outputs, in whole minutes (1 h when none is known)."""
    walls = [w for w in start_walls if w]
    if walls:
        minutes = math.ceil((2 * sum(walls) / len(walls) + BUDGET_MARGIN_S) / 60)
        budget = f"{minutes}m"
    else:
        budget = "1h"
    return f"glm5svc tune run --resume {run_dir} --budget {budget}"


def start_walls(trials: list[dict[str, Any]]) -> list[float]:
    """Each measured engine start's wall time, from summary.json's trial rows."""
    walls: dict[int, float] = {}
    for row in trials:
        if row.get("status") == "measured" and isinstance(row.get("start"), int):
            wall = row.get("wall_s")
            if isinstance(wall, int | float) and not isinstance(wall, bool):
                walls[row["start"]] = float(wall)
    return list(walls.values())


def remembered(confirmation: Confirmation, best_number: int | None) -> dict[str, Any] | None:
    """What the study keeps for a later run's recall (None: nothing worth keeping)."""
    if best_number is None or confirmation.status not in (CONFIRMED, FAILED):
        return None
    return {"best": best_number, "status": confirmation.status, "detail": confirmation.detail}


def read_recalled(user_attrs: dict[str, Any]) -> dict[str, Any] | None:
    recalled = user_attrs.get(STUDY_ATTR)
    return recalled if isinstance(recalled, dict) else None


HEADLINES = {
    CONFIRMED: "confirmed by a fresh engine start",
    FAILED: "the confirmation failed",
    CUT: "the confirmation was interrupted",
    NOT_RUN: "the confirmation never ran",
    UNCONFIRMED: "the best is not confirmed",
    NO_CHANGE: "no setting measured better than the start",
}
OLDER = (
    "its summary.json records no confirmation (written by an older glm5svc, or the tune has "
    "not finished)"
)


def headline(status: Any) -> str:
    return HEADLINES.get(status, OLDER) if isinstance(status, str) else OLDER


def next_step(status: Any, command: str | None) -> str:
    """What would confirm a best that is not confirmed."""
    if status == FAILED:
        return "keep the current settings, or tune again (`glm5svc tune run`)"
    if status == UNCONFIRMED:
        return "tune again (`glm5svc tune run`) to measure it afresh"
    return f"to confirm it: `{command}`"


def refusal(summary: dict[str, Any], run_dir: str) -> str | None:
    """Why `tune apply` must not apply this run (None: it may): what happened, and what
    would confirm it."""
    status = summary.get("confirmation")
    if (status == CONFIRMED and summary.get("confirmed") is True) or status == NO_CHANGE:
        return None
    command = summary.get("confirmation_command") or resume_command(
        run_dir, start_walls(summary.get("trials") or [])
    )
    said = headline(status)
    if status in STATUSES:
        said += f": {summary.get('confirmation_detail') or 'no reason recorded'}"
    step = next_step(status, command)
    return f"{said}. The tune wrote no overlay, so nothing is applied. {step[:1].upper()}{step[1:]}"
