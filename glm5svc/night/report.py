"""The morning report: report.json and report.md in the night's folder, and the last night's
record (records.LastNight) that `glm5svc status` and /metrics show.

What ran (each step, when, what it said), what changed (the overlay applied, or nothing),
the evidence (the tune's folder, its confirmation, what its plan dropped), the before and
after figures with their intervals, and the rollback if there was one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from glm5svc.atomic_file import write_atomic
from glm5svc.config import Config
from glm5svc.json_output import now_utc
from glm5svc.records import LAST_NIGHT_FILE, LastNight
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


def report_document(state) -> dict[str, Any]:
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
    if doc["outcome"] != "tuned":
        lines.append("- glm5.service serves the evening's configuration")
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


def write_report(state, config: Config) -> Path:
    """report.json, report.md and the last night's record; returns report.md's path."""
    state.ended_at = state.ended_at or now_utc()
    doc = report_document(state)
    write_atomic(state.night_dir / REPORT_JSON, json.dumps(doc, indent=2, default=str) + "\n")
    write_atomic(state.night_dir / REPORT_MD, report_markdown(doc))
    comparison = doc["comparison"] or {}
    ratio = comparison.get("ratio") or {}
    record = LastNight(
        night_outcome=state.outcome or "failed",
        night_dir=str(state.night_dir),
        night_began_at=state.began_at,
        night_ended_at=state.ended_at,
        night_headline=state.headline or "",
        evening_tok_s=(doc["evening"] or {}).get("mean"),
        morning_tok_s=(doc["morning"] or {}).get("mean"),
        night_ratio=ratio.get("mean"),
        night_ratio_low=ratio.get("low"),
        night_ratio_high=ratio.get("high"),
    )
    # Read by glm5.service's /metrics, which runs as its own user (the night runs as root).
    last = Path(config.service.results_dir) / LAST_NIGHT_FILE
    write_atomic(last, record.to_json() + "\n", mode=0o644)
    state.save()
    return state.night_dir / REPORT_MD
