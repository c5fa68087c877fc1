"""What a ladder means: the knee, whether the GPUs are under-used, and any regression."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from glm5svc.bench.regression import JUDGED, describe, judge_rows, window_figures
from glm5svc.bench.results import LevelResult

# Compared with a baseline, in this order; a drop beyond the threshold is a regression.
COMPARED_METRICS = (
    ("total_throughput", "total tok/s"),
    ("output_throughput", "output tok/s"),
    ("request_throughput", "req/s"),
    ("peak_output_throughput", "peak output tok/s"),
)


def _measured(levels: list[LevelResult]) -> list[LevelResult]:
    return sorted(
        (lv for lv in levels if lv.metrics and lv.metrics.total_throughput),
        key=lambda lv: lv.concurrency,
    )


def _latency(level: LevelResult) -> float | None:
    m = level.metrics
    if m is None:
        return None
    # The mean, not the median: queueing past the knee shows first in the slower requests.
    return m.latency("e2e_latency", "mean") or m.latency("e2e_latency", "median")


def find_knee(levels: list[LevelResult], knee_gain_pct: float) -> dict[str, Any]:
    """The first level after which more concurrency adds < knee_gain_pct throughput while
    mean end-to-end latency still rises: past it, load only buys queueing."""
    measured = _measured(levels)
    steps = []
    for low, high in zip(measured, measured[1:], strict=False):
        t_low, t_high = low.metrics.total_throughput, high.metrics.total_throughput  # type: ignore[union-attr]
        gain = (t_high / t_low - 1) * 100
        lat_low, lat_high = _latency(low), _latency(high)
        latency_change = (lat_high / lat_low - 1) * 100 if lat_low and lat_high else None
        steps.append(
            {
                "from": low.concurrency,
                "to": high.concurrency,
                "throughput_gain_pct": gain,
                "latency_change_pct": latency_change,
            }
        )
        if gain < knee_gain_pct and latency_change is not None and latency_change > 0:
            return {
                "found": True,
                "concurrency": low.concurrency,
                "total_throughput": t_low,
                "next_concurrency": high.concurrency,
                "throughput_gain_pct": gain,
                "latency_change_pct": latency_change,
                "knee_gain_pct": knee_gain_pct,
                "steps": steps,
                "text": (
                    f"knee at concurrency {low.concurrency}: going to {high.concurrency} adds "
                    f"{gain:+.1f}% throughput (< {knee_gain_pct:g}%) while mean E2E latency "
                    f"changes {latency_change:+.1f}%"
                ),
            }
    if len(measured) < 2:
        text = "no knee: fewer than two measured levels"
    else:
        text = (
            f"no knee within the ladder: throughput still gains >= {knee_gain_pct:g}% "
            f"per step up to concurrency {measured[-1].concurrency} (or latency stopped rising)"
        )
    return {
        "found": False,
        "concurrency": None,
        "knee_gain_pct": knee_gain_pct,
        "steps": steps,
        "text": text,
    }


def best_level(levels: list[LevelResult]) -> LevelResult | None:
    measured = _measured(levels)
    return max(measured, key=lambda lv: lv.metrics.total_throughput) if measured else None  # type: ignore[union-attr]


def gpus_underused(levels: list[LevelResult], threshold_share: float) -> dict[str, Any]:
    """At the best level, is average power well under the limit? (The reference operator's
    signal: 83-250 W of 600 W at 3,740 tok/s meant the hardware was not the bottleneck.)"""
    best = best_level(levels)
    base = {"threshold_share": threshold_share, "underused": None}
    if best is None:
        return {**base, "best_concurrency": None, "text": "unknown: no measured level"}
    share = best.telemetry.mean_power_share
    peak_gpu_share = best.telemetry.max_power_share
    found = {**base, "best_concurrency": best.concurrency, "mean_power_share": share}
    if share is None:
        why = best.telemetry.reason or "no power figures"
        return {**found, "text": f"unknown: no GPU power at the best level ({why})"}
    underused = share < threshold_share
    verdict = "GPUs under-used" if underused else "GPUs busy"
    return {
        **found,
        "underused": underused,
        "max_gpu_power_share": peak_gpu_share,
        "text": (
            f"{verdict}: at the best level (concurrency {best.concurrency}) the GPUs averaged "
            f"{share:.0%} of their power limit (threshold {threshold_share:.0%})"
        ),
    }


def level_figures(levels: list[LevelResult]) -> dict[str, dict[str, float]]:
    """{"<concurrency>": {metric: value}} of the levels that have a result."""
    figures = {}
    for level in levels:
        if level.metrics is None:
            continue
        values = {key: getattr(level.metrics, key) for key, _ in COMPARED_METRICS}
        figures[str(level.concurrency)] = {k: v for k, v in values.items() if v is not None}
    return figures


def level_windows(levels: list[LevelResult]) -> dict[str, dict[str, list[float]]]:
    """{"<concurrency>": {metric: [window figures]}} of the levels measured in steady windows."""
    return {str(level.concurrency): window_figures(level.steady) for level in levels}


def compare_with_baseline(
    levels: list[LevelResult],
    baseline: dict[str, Any],
    threshold_pct: float,
    not_judged: str | None = None,
) -> dict[str, Any]:
    """Per level and metric present on both sides: the change and its verdict
    (glm5svc/bench/regression.py). Levels the baseline has no figure for are listed, not failed."""
    return compare_figures(
        level_figures(levels), baseline, threshold_pct, not_judged, level_windows(levels)
    )


def compare_figures(
    current: dict[str, dict[str, float]],
    baseline: dict[str, Any],
    threshold_pct: float,
    not_judged: str | None = None,
    current_windows: dict[str, dict[str, list[float]]] | None = None,
) -> dict[str, Any]:
    """`not_judged`: why the two workloads are not like for like; the changes are shown,
    and nothing is called a regression or "within" the threshold. Each row is judged on the
    steady windows of both sides (`current_windows`, the baseline's "windows") or marked not
    judged with the reason."""
    rows = []
    base_levels: dict[str, dict[str, float]] = baseline.get("levels", {})
    missing = []
    for concurrency in sorted(current, key=int):
        reference = base_levels.get(concurrency)
        if not reference:
            missing.append(int(concurrency))
            continue
        for key, label in COMPARED_METRICS:
            value, expected = current[concurrency].get(key), reference.get(key)
            if value is None or not expected:
                continue
            rows.append(
                {
                    "concurrency": int(concurrency),
                    "metric": key,
                    "label": label,
                    "current": value,
                    "baseline": expected,
                    "change_pct": (value / expected - 1) * 100,
                }
            )
    if not_judged is None:
        judge_rows(rows, current_windows or {}, baseline.get("windows") or {}, threshold_pct)
    else:
        for row in rows:
            row.update(judged=False, regressed=False, interval_pct=None, windows=None,
                       why_not_judged=not_judged)  # fmt: skip
    regressed_rows = [r for r in rows if r["regressed"]]
    judged_rows = [r for r in rows if r["judged"]]
    undecided = [r for r in rows if r["metric"] in JUDGED and not r["judged"]]
    name = baseline.get("name")
    if not_judged is not None:
        text = f"no verdict against baseline {name!r}: {not_judged}"
    elif not rows:
        text = f"nothing to compare with baseline {name!r} (no common level)"
    elif regressed_rows:
        worst = min(regressed_rows, key=lambda r: r["change_pct"])
        text = (
            f"below baseline {name!r}: {len(regressed_rows)} figure(s) dropped beyond the "
            f"windows' noise and more than half of {threshold_pct:g}%, worst {describe(worst)}"
        )
    elif not judged_rows:
        text = (
            f"cannot judge against baseline {name!r}: {describe(undecided[0])}: "
            f"{undecided[0]['why_not_judged']}"
        )
    else:
        worst = min(judged_rows, key=lambda r: r["change_pct"])
        text = (
            f"no regression against baseline {name!r} (a drop of {threshold_pct:g}% would "
            f"show): {len(judged_rows)} figure(s) judged on steady windows, lowest "
            f"{describe(worst)}; req/s and peak output tok/s shown, not judged"
        )
        if undecided:
            text += (
                f"; {len(undecided)} figure(s) not judged, e.g. {describe(undecided[0])}: "
                f"{undecided[0]['why_not_judged']}"
            )
    return {
        "name": name,
        "source": baseline.get("source"),
        "threshold_pct": threshold_pct,
        "regressed": bool(regressed_rows),
        # Whether the gate could judge: at least one figure judged on both sides' windows.
        "judged": not_judged is None and bool(judged_rows),
        "not_judged": not_judged,
        "compared_levels": sorted({r["concurrency"] for r in rows}),
        "levels_without_baseline": missing,
        "rows": rows,
        "text": text,
    }


def all_verdicts(
    levels: list[LevelResult],
    knee_gain_pct: float,
    underused_share: float,
    baseline: dict[str, Any] | None,
    regression_threshold_pct: float,
    plan: dict[str, Any] | None = None,
) -> dict[str, Any]:
    verdicts: dict[str, Any] = {
        "knee": find_knee(levels, knee_gain_pct),
        "underused": gpus_underused(levels, underused_share),
    }
    best = best_level(levels)
    verdicts["best"] = (
        {"concurrency": best.concurrency, "total_throughput": best.metrics.total_throughput}  # type: ignore[union-attr]
        if best
        else None
    )
    if baseline is not None:
        not_judged = workload_difference({"name": "this run", "plan": plan or {}}, baseline)
        verdicts["baseline"] = compare_with_baseline(
            levels, baseline, regression_threshold_pct, not_judged
        )
    return verdicts


WORKLOAD_FIELDS = ("input_len", "output_len")


def workload_difference(current: dict[str, Any], baseline: dict[str, Any]) -> str | None:
    """Why the two runs' figures cannot be judged against each other, or None when both sent
    the same workload (the same request file, by its SHA-256, or the same recorded input and
    output lengths) and both measured the same way (steady windows or one wave). A baseline
    that did not record its lengths (the shipped reference's were not written down) gives no
    verdict either."""
    plans = (current.get("plan") or {}, baseline.get("plan") or {})
    if not all(isinstance(plan, dict) for plan in plans):
        return "a run's plan is not a mapping"
    names = (current.get("name") or "A", baseline.get("name") or "B")
    files = [plan.get("request_file") for plan in plans]
    for name, recorded in zip(names, files, strict=True):
        if recorded is not None and not (
            isinstance(recorded, dict) and isinstance(recorded.get("sha256"), str)
        ):
            return f"{name!r} recorded its request file without its SHA-256"
    if files[0] is not None or files[1] is not None:
        if files[0] is None or files[1] is None or files[0]["sha256"] != files[1]["sha256"]:
            return f"the workloads differ: {workload_text(plans[0])} vs {workload_text(plans[1])}"
    else:
        unknown = [
            name
            for name, plan in zip(names, plans, strict=True)
            if not all(field in plan for field in WORKLOAD_FIELDS)
        ]
        if unknown:
            return f"{' and '.join(map(repr, unknown))} did not record its input and output lengths"
        differing = [
            f"{field} {plans[0][field]} vs {plans[1][field]}"
            for field in WORKLOAD_FIELDS
            if plans[0][field] != plans[1][field]
        ]
        if differing:
            return "the workloads differ: " + ", ".join(differing)
    methods = [measurement_method(plan) for plan in plans]
    if methods[0] != methods[1]:
        return (
            f"the measurements differ: {methods[0]} vs {methods[1]} (benchmark.steady); "
            "measure both the same way"
        )
    return None


def workload_text(plan: dict[str, Any]) -> str:
    """A run's workload in words: its request file, or its fixed lengths."""
    recorded = plan.get("request_file")
    if isinstance(recorded, dict):
        name = Path(str(recorded.get("path") or "?")).name
        return (
            f"request file {name} (sha256 {str(recorded.get('sha256'))[:12]}, "
            f"{recorded.get('requests')} requests, mean {recorded.get('mean_input_len')} in / "
            f"{recorded.get('mean_output_len')} out)"
        )
    if all(field in plan for field in WORKLOAD_FIELDS):
        return f"fixed lengths {plan['input_len']} in / {plan['output_len']} out"
    return "lengths not recorded"


def measurement_method(plan: dict[str, Any]) -> str:
    """How a run measured; a plan without the key is from before steady windows (one wave)."""
    return "steady windows" if plan.get("steady", False) is True else "one wave per level"
