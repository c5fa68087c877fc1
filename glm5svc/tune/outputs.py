"""What a tune leaves: the trials table, the tuned overlay with its evidence, an Ansible
host_vars snippet, a throughput-latency plot, the chosen setting's benchmark as a
baseline for `glm5svc bench compare`, and summary.json (what `--json` prints)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from glm5svc.atomic_file import write_atomic
from glm5svc.config_yaml import read_regular_bytes
from glm5svc.errors import ConfigError, Glm5Error
from glm5svc.tune.confirmation import confirmation_for, headline, next_step
from glm5svc.tune.evidence import TrialRecord, gain
from glm5svc.tune.host_figures import read_start, start_dirs
from glm5svc.tune.search import describe_candidate
from glm5svc.tune.settings import SearchSettings
from glm5svc.tune.space import Value, overlay_of

TUNED_FILE = "tuned.yaml"
HOST_VARS_FILE = "host_vars.yml"
SUMMARY_FILE = "summary.json"

STUDY_FILE = "tune.json"  # written by glm5svc/tune/session.py when a tune begins
BASELINE_DIR = "baseline"
# The container role merges this variable into /etc/glm5/glm5.yaml (roles/glm5_service).
HOST_VARS_KEY = "glm5_service_config_extra"


ROW_KINDS: dict[str, tuple[type, ...]] = {
    "trial": (int,),
    "setting": (str,),
    "status": (str,),
    "runs": (int,),
    "verdict": (str,),
    "best": (bool,),
    "diagnosis": (str,),
}
NUMBER_OR_NULL = (
    "throughput_mean",
    "throughput_low",
    "throughput_high",
    "ttft_p99_ms",
    "power_share",
    "kv_pool_tokens",
)


def checked_summary(run_dir: Path) -> dict[str, Any]:
    """summary.json of a finished tune, its shape checked (what `tune show` prints from
    it); ConfigError naming the file, the key, the cause and the fix."""
    path = Path(run_dir) / SUMMARY_FILE
    fix = "give the run directory of a finished `glm5svc tune run` (it writes summary.json)"

    def refused(key: str, cause: str) -> ConfigError:
        return ConfigError(f"{path}: {key}: {cause}. Fix: {fix}")

    try:
        summary = json.loads(read_regular_bytes(path).decode("utf-8"))
    except FileNotFoundError:
        raise refused("(file)", "no such file") from None
    except OSError as exc:
        raise refused("(file)", f"cannot read: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise refused("(file)", f"not JSON ({str(exc).splitlines()[0]})") from None
    if not isinstance(summary, dict):
        raise refused("(top level)", f"a JSON {type(summary).__name__}, not an object")
    trials = summary.setdefault("trials", [])
    if not isinstance(trials, list):
        raise refused("trials", f"a {type(trials).__name__}, not a list: not a tune's summary")
    for index, row in enumerate(trials):
        if not isinstance(row, dict):
            raise refused(f"trials[{index}]", "not an object")
        for key, kinds in ROW_KINDS.items():
            if not isinstance(row.get(key), kinds):
                raise refused(
                    f"trials[{index}].{key}", f"{row.get(key)!r} is not a {kinds[0].__name__}"
                )
        for key in NUMBER_OR_NULL:
            value = row.get(key)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float)
            ):
                raise refused(f"trials[{index}].{key}", f"{value!r} is not a number or null")
    return summary


def own_diagnosis(record: TrialRecord) -> list[str]:
    """The start's findings that concern this record: those of another live value (a line
    that begins `knob=value: `) are that value's row's."""
    kept = []
    for line in record.outcome.get("diagnosis") or []:
        head, sep, _ = line.partition(": ")
        knob, equals, value = head.partition("=")
        if sep and equals and knob in record.candidate and str(record.candidate[knob]) != value:
            continue
        kept.append(line)
    return kept


def trial_row(
    record: TrialRecord, start: dict[str, Value], confidence: float, best: bool = False
) -> dict:
    interval = record.interval(confidence)
    runs = record.runs
    outcome = record.outcome

    def mean_of(name: str) -> float | None:
        values = [getattr(r, name) for r in runs if getattr(r, name) is not None]
        return sum(values) / len(values) if values else None

    return {
        "trial": record.number,
        "start": record.start,
        "setting": describe_candidate(record.candidate, start),
        "status": record.status,
        "runs": len(runs),
        "throughput_mean": round(interval.mean, 1) if interval else None,
        "throughput_low": _finite(interval.low) if interval else None,
        "throughput_high": _finite(interval.high) if interval else None,
        "ttft_p99_ms": _round(mean_of("ttft_p99_ms")),
        "itl_p99_ms": _round(mean_of("itl_p99_ms")),
        "power_share": _round(mean_of("power_share"), 3),
        "kv_pool_tokens": outcome.get("kv_pool_tokens"),
        "ready_after_s": outcome.get("ready_after_s"),
        "wall_s": outcome.get("wall_s"),
        "verdict": record.verdict,
        "best": best,
        "was_best": record.became_best,
        "diagnosis": "; ".join(own_diagnosis(record)),
    }


def _finite(value: float) -> float | None:
    return round(value, 1) if value not in (float("inf"), float("-inf")) else None


def _round(value: float | None, digits: int = 1) -> float | None:
    return round(value, digits) if value is not None else None


def trials_csv(rows: list[dict]) -> str:
    out = io.StringIO()
    if rows:
        writer = csv.DictWriter(out, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return out.getvalue()


def confidence_label(summary: dict) -> str:
    """ "95 %" for the tune's --confidence 0.95."""
    confidence = (summary.get("settings") or {}).get("confidence") or 0.95
    return f"{confidence * 100:g} %"


def trials_markdown(rows: list[dict], label: str = "95 %") -> str:
    head = (
        f"| trial | setting | runs | tok/s ({label} interval) | TTFT p99 ms | power | KV pool "
        "| verdict |"
    )
    lines = [head, "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        if row["throughput_mean"] is None:
            figure = "-"
        elif row["throughput_low"] is None or row["throughput_high"] is None:
            figure = f"{row['throughput_mean']:,.0f}"
        else:
            figure = (
                f"{row['throughput_mean']:,.0f} ({row['throughput_low']:,.0f}-"
                f"{row['throughput_high']:,.0f})"
            )
        power = f"{row['power_share']:.0%}" if row["power_share"] is not None else "-"
        kv = f"{row['kv_pool_tokens']:,}" if row["kv_pool_tokens"] else "-"
        ttft = f"{row['ttft_p99_ms']:,.0f}" if row["ttft_p99_ms"] is not None else "-"
        verdict = row["verdict"] + (" **(best)**" if row["best"] else "")
        if row["diagnosis"]:
            verdict += f"; {row['diagnosis']}"
        lines.append(
            f"| {row['trial']} | {row['setting']} | {row['runs']} | {figure} | {ttft} | "
            f"{power} | {kv} | {verdict} |"
        )
    return "\n".join(lines) + "\n"


def tuned_overlay(best: TrialRecord | None, start: dict[str, Value]) -> dict[str, Any]:
    """The configuration keys the best setting changes (tuning:, server.extra_args)."""
    return overlay_for(best.candidate, start) if best is not None else {}


def overlay_for(candidate: dict[str, Value], start: dict[str, Value]) -> dict[str, Any]:
    """The configuration keys `candidate` changes from the start (tuning:, extra_args)."""
    changed = overlay_of(candidate, start)
    overlay: dict[str, Any] = {}
    flags: list[str] = []
    for name, value in changed.items():
        if name.startswith("--"):
            if value is True:
                flags.append(name)
            elif value not in (None, False):
                flags += [name, str(value)]
        else:
            section, key = name.split(".", 1)
            overlay.setdefault(section, {})[key] = value
    if flags:
        overlay["server"] = {"extra_args": flags}
    return overlay


def write_outputs(
    run_dir: Path,
    records: list[TrialRecord],
    best: TrialRecord | None,
    start: dict[str, Value],
    context: dict[str, Any],
    settings: SearchSettings,
    same_start: Callable[[dict[str, Value], dict[str, Value]], bool],
    combo_key: Callable[[dict[str, Value]], str] | None = None,
) -> dict[str, Any]:
    """`same_start(a, b)`: the two settings ran in the same engine starts (only the live
    knob differs), so the gain comes from paired windows. Only a confirmed best (context
    `confirmed` True) writes its overlay, as the confirmation tested it (context
    `written_setting`: the best less the knobs whose own comparison is not better);
    otherwise tuned.yaml says why and holds none."""
    confidence = settings.confidence
    rows = [trial_row(r, start, confidence, r is best) for r in records]
    together = best is not None and same_start(best.candidate, start)
    ratio = gain(records, best, start, settings, together, *([combo_key] if combo_key else []))
    changes = tuned_overlay(best, start)
    written = context.get("written_setting")
    written_changes = overlay_for(written, start) if isinstance(written, dict) else changes
    confirmed = context.get("confirmed") is True
    overlay = written_changes if confirmed else {}
    summary = {
        **context,
        "run_dir": str(run_dir),
        "trials": rows,
        "starts": start_records(run_dir),
        "best": rows[best.number] if best is not None and best.number < len(rows) else None,
        "overlay": overlay,
        "confirmation_for": confirmation_for(overlay) if confirmed else None,
        "best_changes": changes,
        "written_changes": written_changes,
        "gain": ratio,
        "files": {},
    }
    files = summary["files"]
    write_atomic(run_dir / "trials.csv", trials_csv(rows))
    label = f"{confidence * 100:g} %"
    write_atomic(run_dir / "trials.md", trials_markdown(rows, label))
    files.update({"trials_csv": "trials.csv", "trials_md": "trials.md"})
    write_atomic(run_dir / TUNED_FILE, tuned_text(run_dir, summary))
    host_vars = {HOST_VARS_KEY: overlay} if overlay else {}
    write_atomic(
        run_dir / HOST_VARS_FILE,
        "# For inventory/<site>/host_vars/<container>.yml, so provisioning keeps the tune.\n"
        "# Merge by hand if that host already sets "
        + HOST_VARS_KEY
        + ".\n"
        + (yaml.safe_dump(host_vars) if host_vars else "{}\n"),
    )
    files.update({"tuned": TUNED_FILE, "host_vars": HOST_VARS_FILE})
    plot = _write_plot(run_dir, rows, label)
    if plot:
        files["plot"] = plot
    write_atomic(run_dir / SUMMARY_FILE, json.dumps(summary, indent=2, default=str))
    files["summary"] = SUMMARY_FILE
    return summary


def tuned_text(run_dir: Path, summary: dict[str, Any]) -> str:
    """tuned.yaml: the overlay of a confirmed best under a header that says so; else an
    empty overlay under a header that says why nothing is applied and what would confirm
    the best."""
    status = summary.get("confirmation")
    lines = [f"glm5svc tune {run_dir.name} (trials.md has the evidence)."]
    left = [str(line) for line in summary.get("left_at_start") or []]
    if summary.get("confirmed") is True:
        lines.append(f"The settings that measured best against the start, {headline(status)}.")
        lines += [f"Not written: {line}" for line in left]
        lines.append(f"Apply: glm5svc tune apply {run_dir}")
    else:
        lines.append(f"Nothing to apply: {headline(status)}.")
        detail = summary.get("confirmation_detail")
        if detail and detail != headline(status):
            lines.append(str(detail))
        would = summary.get("written_changes", summary.get("best_changes"))
        if would:
            best = summary.get("best") or {}
            named = f"trial {best.get('trial')}: {best.get('setting')}"
            lines.append(f"The best ({named}) would change:")
            lines += ["  " + line for line in yaml.safe_dump(would).splitlines()]
            lines += [f"Not written: {line}" for line in left]
            step = next_step(status, summary.get("confirmation_command"))
            lines.append(step[:1].upper() + step[1:])
    body = yaml.safe_dump(summary["overlay"]) if summary["overlay"] else "{}\n"
    return "".join(f"# {line}\n" for line in lines if line) + body


def start_records(run_dir: Path) -> list[dict[str, Any]]:
    """Each engine start broken down (its start.json, from serve's log)."""
    found = []
    for trial_dir in sorted(start_dirs(run_dir)):
        breakdown = read_start(trial_dir)
        if breakdown is not None:
            found.append({"start": int(trial_dir.name), **breakdown.to_dict(),
                          "text": breakdown.describe()})  # fmt: skip
    return found


def read_summary(run_dir: Path) -> dict[str, Any]:
    """A finished tune's summary.json (checked_summary), or, while it runs (tune.json but
    no summary.json yet), its trials so far."""
    run_dir = Path(run_dir)
    if (run_dir / SUMMARY_FILE).exists() or not (run_dir / STUDY_FILE).exists():
        return checked_summary(run_dir)
    try:
        study = json.loads(read_regular_bytes(run_dir / STUDY_FILE).decode("utf-8"))
    except (OSError, ValueError) as exc:
        raise Glm5Error(
            f"{run_dir}: not a tune's run directory (no {SUMMARY_FILE}, {STUDY_FILE}: {exc})"
        ) from None
    if not isinstance(study, dict):
        raise ConfigError(
            f"{run_dir / STUDY_FILE}: (top level): a JSON {type(study).__name__}, not an "
            "object. Fix: give the run directory `glm5svc tune run` wrote"
        )
    records = []
    for path in sorted((run_dir / "trials").glob("[0-9][0-9][0-9].json")):
        try:
            records.append(TrialRecord(**json.loads(path.read_text(encoding="utf-8"))))
        except (OSError, ValueError, TypeError):
            continue
    confidence = (study.get("settings") or {}).get("confidence", 0.95)
    start = study.get("start") or {}
    return {
        **{k: study.get(k) for k in ("config", "workload", "settings")},
        "run_dir": str(run_dir),
        "running": True,
        "trials": [trial_row(r, start, confidence) for r in records],
        "starts": start_records(run_dir),
        "stopped_by": None,
    }


def _write_plot(run_dir: Path, rows: list[dict], label: str) -> str | None:
    """Each measured setting by name, its throughput with its interval, against the start's
    (the dashed line): one row per trial, the best in green."""
    points = [r for r in rows if r["throughput_mean"] is not None]
    if not points:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    figure, axis = plt.subplots(figsize=(9, 1.2 + 0.45 * len(points)))
    for y, row in enumerate(points):
        low, high = row["throughput_low"], row["throughput_high"]
        mean = row["throughput_mean"]
        err = [[mean - low], [high - mean]] if low is not None and high is not None else None
        colour = "tab:green" if row["best"] else ("tab:blue" if row["status"] == "measured"
                                                   else "tab:grey")  # fmt: skip
        axis.errorbar(mean, y, xerr=err, fmt="o", color=colour, capsize=3)
    axis.set_yticks(range(len(points)))
    axis.set_yticklabels(
        [f"{r['trial']}: {r['setting']} (start {r['start']})" for r in points], fontsize=8
    )
    axis.invert_yaxis()
    start = next((r for r in points if r["setting"] == "(the start)"), None)
    if start is not None:
        axis.axvline(start["throughput_mean"], color="tab:grey", linestyle="--", linewidth=1)
    axis.set_xlabel(f"total throughput (tok/s), {label} interval; dashed: the start")
    axis.set_title(f"glm5svc tune {run_dir.name} (green: the best)")
    axis.grid(True, axis="x", alpha=0.3)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    plt.close(figure)
    write_atomic(run_dir / "plot.png", buffer.getvalue())
    return "plot.png"
