"""Whether a tune's best was confirmed by a fresh engine start, as summary.json records it
and `tune apply` reads it: an overlay is written, and applied, only for a confirmed best.

summary.json keys: `confirmed` (true/false), `confirmation` (one of STATUSES),
`confirmation_detail` (what the confirming start showed, or why there was none),
`confirmation_command` (the command that would make the confirming start, or null),
`written_setting` (the configuration the overlay holds and the confirmation tested: the
best, less the knobs whose own comparison is not better), `left_at_start` (why each of
those stays at the start's value) and, once confirmed, `confirmation_for` (the overlay the
confirmation tested and its SHA-256): a confirmation is of exactly one configuration, and
`tune apply` refuses a tuned.yaml whose overlay is not it.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field, replace
from typing import Any

from glm5svc.tune.evidence import setting_key

CONFIRMED = "confirmed"  # a fresh test of the overlay as written bore its gain out
FAILED = "failed"  # the fresh test ran: the gain was not reproduced, or its start failed
CUT = "cut"  # the fresh test began and was interrupted: a signal, or the budget's deadline
NOT_RUN = "not-run"  # owed, never begun: the budget or --max-trials spent, or a signal
NO_CHANGE = "no-change"  # nothing measured better than the start: nothing to confirm
STATUSES = (CONFIRMED, FAILED, CUT, NOT_RUN, NO_CHANGE)
# A resume makes the owed confirmation (glm5svc/tune/search.py, Search.run).
RESUMABLE = (CUT, NOT_RUN)
# The fewest starts a confirmation by starts takes (the start's and the overlay's), and
# two more when those leave it open (glm5svc/tune/search.py, Search._confirm_by_starts).
CONFIRMING_STARTS = 4
BUDGET_MARGIN_S = 15.0  # the stop and the outputs, within the budget (glm5svc/tune/session.py)
# Search.confirmation_outcome's values (glm5svc/tune/search.py).
SEARCH_CONFIRMED, SEARCH_NOT_CONFIRMED, SEARCH_CUT = "confirmed", "not confirmed", "cut"


@dataclass(frozen=True)
class Confirmation:
    status: str
    detail: str
    command: str | None = None
    setting: dict[str, Any] | None = None  # what the overlay holds (None: the best's)
    left_at_start: tuple[str, ...] = field(default=())

    @property
    def confirmed(self) -> bool:
        return self.status == CONFIRMED

    def to_summary(self) -> dict[str, Any]:
        return {
            "confirmed": self.confirmed,
            "confirmation": self.status,
            "confirmation_detail": self.detail,
            "confirmation_command": self.command,
            "written_setting": self.setting,
            "left_at_start": list(self.left_at_start),
        }


def of_run(search: Any, run_dir: str) -> Confirmation:
    """The verdict on a Search's best once its run ended, with the command that would
    confirm it."""
    found = of_search(search)
    walls = {r.start: r.outcome.get("wall_s") or 0.0 for r in search.records
             if r.status == "measured" and r.start is not None}  # fmt: skip
    return with_command(found, run_dir, list(walls.values()))


def of_search(search: Any) -> Confirmation:
    """The verdict on the overlay a Search would write (Search.written): only a
    confirmation of exactly that configuration counts."""
    best = search.best
    if best is None:
        return Confirmation(NO_CHANGE, "nothing was measured: there is no best")
    written, left = search.written()
    key = setting_key(written)
    found = _of_written(search, key)
    return Confirmation(found.status, found.detail, None, written, tuple(left))


def _of_written(search: Any, key: str) -> Confirmation:
    if key == setting_key(search.start):
        return Confirmation(NO_CHANGE, "no setting measured better than the start")
    mine = search.confirmation_for == key
    outcome = search.confirmation_outcome if mine else None
    said = (search.confirmation or "") if mine else ""
    if outcome == SEARCH_CONFIRMED:
        return Confirmation(CONFIRMED, said or "confirmed by a fresh start")
    if outcome == SEARCH_NOT_CONFIRMED:
        if "the confirming start failed" in said:
            return Confirmation(FAILED, f"its confirming start did not measure: {said}")
        return Confirmation(FAILED, f"its gain was not reproduced by a fresh engine start: {said}")
    why = (search.confirmation_cut_why if mine else None) or search.stopped_by
    why = why or "the search ended"
    made = [
        r for r in search.records
        if r.confirming and r.confirms == key and r.start is not None
        and r.number >= search.confirmation_closed_at
    ]  # fmt: skip
    if made:
        measured = search.confirmation_measured if mine else None
        so_far = f"; measured so far: {measured}" if measured else ""
        return Confirmation(CUT, f"its confirming start was cut: {why}{so_far}")
    return Confirmation(NOT_RUN, f"no confirming start was made: {why}")


def with_command(confirmation: Confirmation, run_dir: str, walls: list[float]) -> Confirmation:
    """The command that makes the owed confirming start, for a confirmation a resume makes."""
    if confirmation.status not in RESUMABLE:
        return confirmation
    return replace(confirmation, command=resume_command(run_dir, walls))


def resume_command(run_dir: str, start_walls: list[float]) -> str:
    """`tune run --resume` with a budget for the confirmation: CONFIRMING_STARTS at the
    starts' mean wall time, as measured, and the stop and outputs, in whole minutes (1 h
    when none is known)."""
    walls = [w for w in start_walls if w]
    if walls:
        mean = sum(walls) / len(walls)
        minutes = math.ceil((CONFIRMING_STARTS * mean + BUDGET_MARGIN_S) / 60)
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


HEADLINES = {
    CONFIRMED: "confirmed by a fresh engine start",
    FAILED: "the confirmation failed",
    CUT: "the confirmation was interrupted",
    NOT_RUN: "the confirmation never ran",
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
    return f"to confirm it: `{command}`"


def overlay_digest(overlay: dict[str, Any]) -> str:
    """The SHA-256 of an overlay's canonical JSON (what tuned.yaml holds, as read)."""
    text = json.dumps(overlay, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def confirmation_for(overlay: dict[str, Any]) -> dict[str, Any]:
    """summary.json's `confirmation_for`: the overlay a confirmation tested."""
    return {"overlay": overlay, "sha256": overlay_digest(overlay)}


def not_this_overlay(summary: dict[str, Any], overlay: dict[str, Any]) -> str | None:
    """Why the run's confirmation is not of `overlay` (tuned.yaml as read), or None."""
    if summary.get("confirmation") == NO_CHANGE:
        if not overlay:
            return None
        return "the tune found no change, yet tuned.yaml holds one: no confirmation tested it"
    tested = summary.get("confirmation_for")
    if not isinstance(tested, dict) or not isinstance(tested.get("sha256"), str):
        return (
            "its summary.json does not name the configuration its confirmation tested "
            "(written by an older glm5svc)"
        )
    if tested["sha256"] != overlay_digest(overlay):
        return (
            f"tuned.yaml's overlay {json.dumps(overlay, sort_keys=True)} is not the "
            f"configuration its confirmation tested "
            f"({json.dumps(tested.get('overlay'), sort_keys=True)})"
        )
    return None


def refusal(
    summary: dict[str, Any], run_dir: str, overlay: dict[str, Any] | None = None,
    exact: bool = True,
) -> str | None:  # fmt: skip
    """Why `tune apply` must not apply this run (None: it may): what happened, and what
    would confirm it. `overlay`: tuned.yaml's, as read (default: the summary's), which must
    be exactly what the confirmation tested (`exact` False: the outcome alone is judged)."""
    status = summary.get("confirmation")
    if (status == CONFIRMED and summary.get("confirmed") is True) or status == NO_CHANGE:
        if not exact:
            return None
        held = summary.get("overlay") if overlay is None else overlay
        wrong = not_this_overlay(summary, held if isinstance(held, dict) else {})
        if wrong is None:
            return None
        return (
            f"{wrong}: nothing is applied (a confirmation counts only for the configuration "
            f"it tested). To confirm this one: `glm5svc tune run --resume {run_dir}`"
        )
    command = summary.get("confirmation_command") or resume_command(
        run_dir, start_walls(summary.get("trials") or [])
    )
    said = headline(status)
    if status in STATUSES:
        said += f": {summary.get('confirmation_detail') or 'no reason recorded'}"
    step = next_step(status, command)
    return f"{said}. The tune wrote no overlay, so nothing is applied. {step[:1].upper()}{step[1:]}"
