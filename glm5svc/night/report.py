"""The morning report: report.json and report.md in the night's folder, and the last night's
record (records.LastNight) that `glm5svc status` and /metrics show.

What ran (each step, when, what it said), what changed (the overlay applied, or nothing),
the evidence (the tune's folder, its confirmation, what its plan dropped), the before and
after figures with their intervals, the rollback if there was one, and what serves now
(looked at when the report is written, never assumed).

The night's figures also go to a textfile for node_exporter (service.night_textfile): the
same families glm5.service's /metrics serves from the last night's record, plus whether a
night is in progress and its deadline, so that the alerts see a night that failed with
glm5.service down, and one that never ended.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from glm5svc.atomic_file import write_atomic
from glm5svc.json_output import now_utc
from glm5svc.records import LAST_NIGHT_FILE, LastNight, RecordError
from glm5svc.serve.metrics import night_textfile
from glm5svc.tune.stats import mean_interval

REPORT_SCHEMA = "glm5svc.night.report/1"
REPORT_JSON, REPORT_MD = "report.json", "report.md"


def figures(state, side: str) -> dict[str, Any] | None:
    """One side's windows and their mean with its interval (None when not measured)."""
    windows = state.data(side).get("throughputs") if side in state.steps else None
    if not windows:
        return None
    interval = mean_interval(windows) if len(windows) > 1 else None
    return {
        "windows": windows,
        "starts": len(state.data(side).get("starts") or [windows]),
        "mean": sum(windows) / len(windows),
        "low": interval.low if interval else None,
        "high": interval.high if interval else None,
    }


def report_document(state, serving: str | None = None) -> dict[str, Any]:
    tune = state.data("tune") if "tune" in state.steps else {}
    applied = state.data("apply") if "apply" in state.steps else {}
    comparison = state.data("compare") if state.status_of("compare") == "done" else None
    rollback = state.data("rollback") if "rollback" in state.steps else None
    return {
        "schema": REPORT_SCHEMA,
        "outcome": state.outcome,
        "headline": state.headline,
        "night_dir": str(state.night_dir),
        "config": state.config_path,
        "began_at": state.began_at,
        "ended_at": state.ended_at,
        "budget_s": state.budget_s,
        "deadline_at": state.deadline_at,
        "workload": state.workload,
        "plan": state.plan,
        "dropped": tune.get("dropped") or (state.plan.get("tune") or {}).get("dropped") or [],
        "steps": {
            name: {k: v for k, v in entry.items() if k != "data"}
            for name, entry in state.steps.items()
            if name != "report"  # being written
        },
        "evening": figures(state, "baseline"),
        "morning": figures(state, "morning"),
        "comparison": comparison,
        "tune": tune,
        "changed": applied.get("changed") if applied.get("applied") else None,
        "config_backup": applied.get("backup"),
        "rollback": rollback,
        "serving": serving,
        "events": state.events,
    }


def _figure(side: dict[str, Any] | None) -> str:
    if not side:
        return "not measured"
    bounds = ""
    if side["low"] is not None:
        bounds = f" (the windows' 95 % interval {side['low']:,.1f}-{side['high']:,.1f})"
    starts = side.get("starts") or 1
    return f"{side['mean']:,.1f} tok/s{bounds}, {len(side['windows'])} windows of {starts} start(s)"


def report_markdown(doc: dict[str, Any]) -> str:
    lines = [
        f"# The night of {doc['began_at'][:10]}: {doc['outcome']}",
        "",
        doc["headline"] or "",
        "",
        f"- folder: `{doc['night_dir']}`; configuration: `{doc['config']}`",
        f"- began {doc['began_at']}, ended {doc['ended_at']}; budget {doc['budget_s']:.0f} s "
        f"(deadline {doc['deadline_at']})",
        f"- workload: {json.dumps(doc['workload'])}",
        "",
        "## Before and after",
        "",
        f"- evening: {_figure(doc['evening'])}",
        f"- morning: {_figure(doc['morning'])}",
    ]
    if doc["comparison"]:
        lines.append(f"- {doc['comparison']['text']}")
    lines += ["", "## What changed", ""]
    if doc["changed"]:
        lines.append(
            f"- applied: `{json.dumps(doc['changed'])}` (previous file: `{doc['config_backup']}`)"
        )
    else:
        lines.append("- nothing was applied")
    rollback = doc["rollback"]
    if rollback:
        lines.append(f"- rollback: {doc['steps'].get('rollback', {}).get('detail', '')}")
    if doc.get("serving"):
        lines.append(f"- now: {doc['serving']}")
    tune = doc["tune"]
    lines += ["", "## The evidence", ""]
    if tune:
        lines += [
            f"- tune: `{tune.get('run_dir')}` (`glm5svc tune show {tune.get('run_dir')}`), "
            f"budget {tune.get('budget_s')} s, stopped by {tune.get('stopped_by')}",
            f"- best: {tune.get('best')}; gain: {json.dumps(tune.get('gain'))}",
            f"- confirmed: {tune.get('confirmed')} ({tune.get('confirmation')})",
        ]
    lines.append(
        "- dropped to fit the budget: "
        + (", ".join(map(str, doc["dropped"])) if doc["dropped"] else "nothing")
    )
    lines += ["", "## What ran", "", "| step | status | detail |", "|---|---|---|"]
    for name, step in doc["steps"].items():
        detail = str(step.get("detail") or "").replace("|", "\\|")
        lines.append(f"| {name} | {step.get('status')} | {detail} |")
    return "\n".join(lines) + "\n"


def last_night_record(state, doc: dict[str, Any] | None = None) -> LastNight:
    doc = doc or report_document(state)
    ratio = (doc["comparison"] or {}).get("ratio") or {}
    return LastNight(
        night_outcome=state.outcome or "failed",
        night_dir=str(state.night_dir),
        night_began_at=state.began_at,
        night_ended_at=state.ended_at or now_utc(),
        night_headline=state.headline or "",
        evening_tok_s=(doc["evening"] or {}).get("mean"),
        morning_tok_s=(doc["morning"] or {}).get("mean"),
        night_ratio=ratio.get("mean"),
        night_ratio_low=ratio.get("low"),
        night_ratio_high=ratio.get("high"),
    )


def write_last_night(results_dir: Path, record: LastNight) -> None:
    # Read by glm5.service's /metrics, which runs as its own user (the night runs as root).
    write_atomic(Path(results_dir) / LAST_NIGHT_FILE, record.to_json() + "\n", mode=0o644)


def write_report(state, results_dir: Path, serving: str | None = None) -> Path:
    """report.json, report.md and the last night's record; returns report.md's path.
    A folder that refuses them (full, read-only): the report goes to stderr (the journal)
    and the OSError is raised once every other place was tried."""
    state.ended_at = state.ended_at or now_utc()
    doc = report_document(state, serving)
    markdown = report_markdown(doc)
    refused: list[OSError] = []
    for write in (
        lambda: write_atomic(state.night_dir / REPORT_JSON, json.dumps(doc, indent=2, default=str)),
        lambda: write_atomic(state.night_dir / REPORT_MD, markdown),
        lambda: write_last_night(results_dir, last_night_record(state, doc)),
        state.save,
    ):
        try:
            write()
        except OSError as exc:
            refused.append(exc)
    if refused:
        print(f"glm5svc night: the report could not be written ({refused[0]}):", file=sys.stderr)
        print(markdown, file=sys.stderr, flush=True)
        raise refused[0]
    return state.night_dir / REPORT_MD


def write_textfile(path: Path | None, results_dir: Path, state=None) -> str | None:
    """The night's families for node_exporter at `path` (when its folder exists): the last
    night's record, and `state`'s deadline while that night is in progress. None, or why
    it could not be written."""
    if path is None or not Path(path).parent.is_dir():
        return None
    try:
        last = LastNight.read(results_dir)
    except RecordError:  # a broken record: the textfile says what it can
        last = None
    progress = None
    if state is not None and state.status_of("report") != "done":
        progress = datetime.fromisoformat(state.deadline_at).timestamp()
    try:
        write_atomic(Path(path), night_textfile(last, progress), mode=0o644)
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"
    return None
