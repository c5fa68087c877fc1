"""The regression gate's verdict on a run against a baseline, judged as the tune judges
settings: on the replicated figures each side measured, with an interval, against the
minimum effect, or not at all, saying why.

The replication is a level's steady windows (glm5svc/bench/measure.py): each gives the
engine's own total and output tok/s while it held the concurrency. Figures are compared as
logs, so a change is a ratio and the spread a share; a level's spread is pooled over the
windows of both runs (a two-sample t interval, n_a + n_b - 2 degrees of freedom).

For each level and judged figure, with d the mean log ratio (run / baseline) and h the
one-sided half-width at 1 - FALSE_FAILURE / comparisons (Bonferroni over the judged rows, so
an unchanged engine fails the whole gate in at most FALSE_FAILURE of runs):
- regressed: d + h < 0 (a drop beyond the noise) and the drop exceeds half the minimum
  effect (a real but tiny drop is not a regression of a 5 % gate);
- not judged: fewer than two windows on a side, or h over half the minimum effect: the
  windows vary too much to tell a drop of the minimum effect from noise (a drop of the
  minimum effect fails whenever the gate judges, in about 95 % of runs or more);
- within, otherwise.
The gate passes when no judged figure regressed and at least one was judged; figures not
judged are marked with the reason, and with none judged the gate says it cannot judge.
req/s and peak output tok/s are bench_serving's whole-run figures (ramps included; peak in
one-second buckets, which overcount): shown beside the judged ones, marked not judged.
"""

from __future__ import annotations

import math
from typing import Any

from glm5svc.student_t import t_quantile

FALSE_FAILURE = 0.05  # of the whole gate, on an unchanged engine
# Judged figures: the summary's metric and the window's figure for it.
JUDGED = {"total_throughput": "throughput", "output_throughput": "output_throughput"}
SHOWN_ONLY = {
    "request_throughput": "bench_serving's whole-run figure (ramps included): shown, not judged",
    "peak_output_throughput": "one-second buckets overcount: shown, not judged",
}
MIN_WINDOWS = 2  # per side and level: a spread needs two
# Without windows on a side, a drop is still a regression when it is beyond any run-to-run
# spread seen: the H200's start-to-start spread (glm5svc/tune/start_model.py's prior), two
# single figures, Student's t with the prior's degrees of freedom at the gate's level.
RUN_TO_RUN_PRIOR = 0.15
RUN_TO_RUN_DOF = 4


def window_figures(steady: Any) -> dict[str, list[float]]:
    """{metric: [one figure per measured window]} of a level's steady record (unflagged
    windows only); empty lists for a single-wave level."""
    found: dict[str, list[float]] = {metric: [] for metric in JUDGED}
    runs = steady.get("windows") if isinstance(steady, dict) else None
    for run in runs if isinstance(runs, list) else []:
        if not isinstance(run, dict) or run.get("flag") or not _usable(run.get("throughput")):
            continue
        window = run.get("window") if isinstance(run.get("window"), dict) else {}
        for metric, key in JUDGED.items():
            value = run.get("throughput") if key == "throughput" else window.get(key)
            if _usable(value):
                found[metric].append(float(value))
    return found


def _usable(value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value) and value > 0


def pooled_spread(samples: list[list[float]]) -> tuple[float, int]:
    """The standard deviation of one window's log figure, pooled over the samples (a level
    of each run), and its degrees of freedom."""
    squares, dof = 0.0, 0
    for values in samples:
        if len(values) < 2:
            continue
        logs = [math.log(v) for v in values]
        mean = sum(logs) / len(logs)
        squares += sum((x - mean) ** 2 for x in logs)
        dof += len(logs) - 1
    return (math.sqrt(squares / dof) if dof else math.nan), dof


def judge_rows(
    rows: list[dict[str, Any]],
    current: dict[str, dict[str, list[float]]],
    baseline: dict[str, dict[str, list[float]]],
    threshold_pct: float,
) -> None:
    """Fills each row's verdict ("judged", "regressed", "why_not_judged", and for judged
    figures "interval_pct" and "windows"), in place. `current` and `baseline` are
    {"<concurrency>": {metric: [window figures]}}."""
    effect = threshold_pct / 100
    candidates = [
        r
        for r in rows
        if r["metric"] in JUDGED and min(_count(current, r), _count(baseline, r)) >= MIN_WINDOWS
    ]
    for row in rows:
        row.update(judged=False, regressed=False, interval_pct=None, windows=None)
        if row["metric"] in SHOWN_ONLY:
            row["why_not_judged"] = SHOWN_ONLY[row["metric"]]
            continue
        if row not in candidates:
            why = (
                f"fewer than {MIN_WINDOWS} steady windows on a side "
                f"({_count(current, row)} vs {_count(baseline, row)}): no spread to judge by"
            )
            if row["metric"] in JUDGED and _beyond_any_run_to_run_spread(row, effect):
                row.update(judged=True, regressed=True, why_not_judged=None,
                           judged_by=f"{why}; judged against {RUN_TO_RUN_PRIOR:.0%} from run "
                           "to run instead")  # fmt: skip
                continue
            row["why_not_judged"] = why
            continue
        a = [math.log(v) for v in _values(current, row)]
        b = [math.log(v) for v in _values(baseline, row)]
        sigma, dof = pooled_spread([_values(current, row), _values(baseline, row)])
        quantile = t_quantile(1 - FALSE_FAILURE / len(candidates), dof)
        d = sum(a) / len(a) - sum(b) / len(b)
        half = quantile * sigma * math.sqrt(1 / len(a) + 1 / len(b))
        row["change_pct"] = math.expm1(d) * 100
        row["interval_pct"] = [math.expm1(d - half) * 100, math.expm1(d + half) * 100]
        row["windows"] = [len(a), len(b)]
        if half > math.log1p(effect / 2):
            row["why_not_judged"] = (
                f"the windows vary too much (+/-{math.expm1(half) * 100:.1f}% over "
                f"{len(a)} + {len(b)} windows) to tell a drop of {threshold_pct:g}% from noise: "
                "measure more or longer windows (benchmark.windows, benchmark.window_s)"
            )
            continue
        row["judged"] = True
        row["why_not_judged"] = None
        row["regressed"] = d + half < 0 and d < math.log1p(-effect / 2)


def _beyond_any_run_to_run_spread(row: dict[str, Any], effect: float) -> bool:
    """The single figures' drop exceeds the minimum effect by more than a run-to-run spread
    of RUN_TO_RUN_PRIOR allows (one-sided at the gate's whole level)."""
    now, then = row.get("current"), row.get("baseline")
    if not (_usable(now) and _usable(then)):
        return False
    d = math.log(now) - math.log(then)
    half = t_quantile(1 - FALSE_FAILURE, RUN_TO_RUN_DOF) * RUN_TO_RUN_PRIOR * math.sqrt(2)
    return d + half < 0 and d < math.log1p(-effect / 2)


def _values(side: dict[str, dict[str, list[float]]], row: dict[str, Any]) -> list[float]:
    return side.get(str(row["concurrency"]), {}).get(row["metric"], [])


def _count(side: dict[str, dict[str, list[float]]], row: dict[str, Any]) -> int:
    return len(_values(side, row))


def describe(row: dict[str, Any]) -> str:
    """A row's change in words: judged with its interval, or marked not judged."""
    change = f"{row['label']} at concurrency {row['concurrency']}: {row['change_pct']:+.1f}%"
    if row.get("interval_pct"):
        low, high = row["interval_pct"]
        change += f" [{low:+.1f}%, {high:+.1f}%]"
    return change if row.get("judged") else f"{change} (not judged)"
