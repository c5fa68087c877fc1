"""Baselines to compare a run with: a shipped name, a results directory, or a JSON file.

A baseline is {"name", "source", "levels": {"<concurrency>": {metric: value}}, ...}; a
level with no figure is absent (never zero). A glm5svc summary.json reads as a baseline
made of its completed levels.
"""

from __future__ import annotations

import json
import math
from importlib import resources
from pathlib import Path
from typing import Any

from glm5svc.bench.regression import window_figures
from glm5svc.bench.results import SUMMARY_SCHEMA, BenchSummary
from glm5svc.bench.verdicts import COMPARED_METRICS
from glm5svc.errors import ConfigError

BASELINE_SCHEMA = "glm5svc.bench.baseline/1"
SUMMARY_FILE = "summary.json"


def shipped_baselines() -> list[str]:
    folder = resources.files("glm5svc") / "data" / "baselines"
    names = (p.name for p in folder.iterdir())
    return sorted(name.removesuffix(".json") for name in names if name.endswith(".json"))


def load_baseline(ref: str | Path) -> dict[str, Any]:
    """A shipped baseline's name, a run's directory, its summary.json, or a baseline file."""
    text = str(ref)
    if text in shipped_baselines():
        shipped = resources.files("glm5svc") / "data" / "baselines" / f"{text}.json"
        return _from_data(json.loads(shipped.read_text(encoding="utf-8")), f"shipped:{text}")
    path = Path(text)
    if path.is_dir():
        path = path / SUMMARY_FILE
    if not path.is_file():
        raise ConfigError(
            f"baseline {text!r}: not a shipped baseline ({', '.join(shipped_baselines())}), "
            "a results directory with summary.json, or a JSON file"
        )
    try:
        data = json.loads(path.read_bytes())
    except OSError as exc:
        raise ConfigError(f"baseline {path}: cannot read: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ConfigError(
            f"baseline {path}: not JSON ({_json_problem(exc)}); give a summary.json "
            "written by glm5svc bench, or a baseline file"
        ) from None
    return _from_data(data, str(path))


def load_summary(ref: str | Path) -> BenchSummary:
    path = Path(ref)
    if path.is_dir():
        path = path / SUMMARY_FILE
    try:
        return BenchSummary.from_dict(json.loads(path.read_bytes()))
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
        raise ConfigError(f"{ref}: not a readable glm5svc bench summary: {exc}") from None


def _json_problem(exc: Exception) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"line {exc.lineno}, column {exc.colno}: {exc.msg}"
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8: byte 0x{exc.object[exc.start]:02x} at offset {exc.start}"
    return "nested too deeply"


def baseline_from_summary(summary: BenchSummary, source: str) -> dict[str, Any]:
    """Its completed levels' figures, and their steady windows (the gate's replication)."""
    levels, windows = {}, {}
    for level in summary.levels:
        if not level.ok or level.metrics is None:
            continue
        figures = {k: getattr(level.metrics, k) for k, _ in COMPARED_METRICS}
        levels[str(level.concurrency)] = {k: v for k, v in figures.items() if usable_figure(v)}
        windows[str(level.concurrency)] = window_figures(level.steady)
    return {
        "name": f"run {summary.run_id}",
        "source": source,
        "description": f"glm5svc bench run {summary.run_id} ({summary.kind})",
        "plan": summary.plan,
        "levels": levels,
        "windows": windows,
    }


def usable_figure(value: Any) -> bool:
    """A figure to compare with: a finite positive number (NaN would pass every check)."""
    return type(value) in (int, float) and math.isfinite(value) and value > 0


def _from_data(data: Any, source: str) -> dict[str, Any]:
    if isinstance(data, dict) and data.get("schema") == SUMMARY_SCHEMA:
        try:
            return baseline_from_summary(BenchSummary.from_dict(data), source)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            what = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
            raise ConfigError(
                f"{source}: a glm5svc bench summary with a missing or mistyped field "
                f"({type(exc).__name__}: {what}); compare runs written by glm5svc bench"
            ) from None
    if not isinstance(data, dict) or not isinstance(data.get("levels"), dict):
        raise ConfigError(f"baseline {source}: expected a bench summary or a baseline file")
    problems = []
    for key, figures in data["levels"].items():
        if not key.isdigit() or not isinstance(figures, dict):
            problems.append(f"levels.{key}: must be a concurrency mapping to figures")
            continue
        for metric, _ in COMPARED_METRICS:
            value = figures.get(metric)
            if value is not None and not usable_figure(value):
                problems.append(
                    f"levels.{key}.{metric}: must be a finite positive number (got {value!r})"
                )
    if problems:
        raise ConfigError(f"baseline {source}: not valid", problems=problems)
    return {**data, "name": data.get("name") or Path(source).stem, "source": source}
