"""The night's plan, printed at its start: what the budget holds.

The night's budget = the evening's starts and benches + the tune + the apply's restart +
the morning's starts and benches + a rollback's restart, kept in reserve. Each side has
`verdict_starts` engine starts, each benched (compare.py: the starts are the verdict's
replicates); the evening's first is a restart too, so both sides are fresh starts. The
benches and the restarts are set aside first; the tune gets the rest, and its own plan
(`glm5svc tune run --plan`, the tune's cost model: glm5svc/tune/estimate.py) says what fits
in that and what it drops. When the night runs, the tune's budget is worked out again from
what the evening's starts and benches took.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from glm5svc.config import Config
from glm5svc.errors import ConfigError
from glm5svc.night.children import glm5svc_argv, run_child
from glm5svc.night.compare import MISS, REGRESSION_MARGIN, Spread, share, starts_needed

# A bench run adds ramps around its steady window (about two request lifetimes): a window
# of measured time costs about twice that in wall time.
RUN_PER_WINDOW = 2.0
WARMUP_WINDOWS = 6  # the tune's plan counts the same warm-up (glm5svc/tune/estimate.py)


def bench_estimate_s(config: Config, windows: int) -> float:
    bench = config.benchmark
    warmup = min(bench.warmup_max_s, WARMUP_WINDOWS * bench.window_s)
    return warmup + windows * RUN_PER_WINDOW * bench.window_s


def clock(seconds: float) -> str:
    """8 h 00 min, 14 min 32 s, 9 s."""
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    if hours:
        return f"{hours} h {rest // 60:02d} min"
    return f"{rest // 60} min {rest % 60:02d} s" if rest >= 60 else f"{rest} s"


def night_plan(
    config: Config,
    config_path: str,
    workload_args: list[str],
    tune_args: list[str],
    windows: int,
    budget_s: float,
    folder: Path,
    verdict_starts: int = 1,
) -> dict[str, Any]:
    """The plan: the benches, the restarts and the tune's own plan for what is left."""

    def tune_plan_for(tune_budget_s: float) -> dict[str, Any]:
        return _tune_plan(config_path, workload_args, tune_args, tune_budget_s, folder)

    bench_s = bench_estimate_s(config, windows)
    return split(budget_s, bench_s, tune_plan_for, verdict_starts)


def split(
    budget_s: float,
    bench_s: float,
    tune_plan_for: Callable[[float], dict[str, Any]],
    verdict_starts: int = 1,
) -> dict[str, Any]:
    """The night's budget split: each side's `verdict_starts` starts, each a restart (as
    long as the tune's plan says a start is) and a bench, and a rollback's restart set
    aside; the tune's plan (`tune run --plan --json`'s document, for a budget) for the
    rest."""
    restart_s = float(tune_plan_for(budget_s).get("start_s") or 0)
    # Each side: its starts' benches and restarts; then the rollback's restart in reserve.
    side_s = verdict_starts * (bench_s + restart_s)
    tune_budget_s = budget_s - 2 * side_s - restart_s
    if tune_budget_s < restart_s:
        raise ConfigError(
            f"the night's budget {clock(budget_s)} holds no tune: {verdict_starts} start(s) a "
            f"side, each a restart ({clock(restart_s)}) and a bench ({clock(bench_s)}), and "
            "a rollback's restart take it all; give a longer --budget, fewer --verdict-starts "
            "or --windows, or a shorter benchmark.window_s"
        )
    planned = tune_plan_for(tune_budget_s)
    return {
        "budget_s": budget_s,
        "bench_s": round(bench_s),
        "restart_s": round(restart_s),
        "verdict_starts": verdict_starts,
        "tune_budget_s": round(tune_budget_s),
        "tune": planned,
        "dropped": planned.get("dropped") or [],
    }


def verdict_line(verdict_starts: int, spread: Spread | None = None) -> str:
    """What the morning's verdict can tell with this many starts a side, at the spread the
    tune assumes before it measures its own (compare.py)."""
    spread = spread or Spread.prior()
    needed = starts_needed(spread)
    margin = f"{share(REGRESSION_MARGIN)}"
    at = f"at the tune's prior start-to-start spread ({share(spread.sigma)})"
    if needed is not None and verdict_starts >= needed:
        return f"  verdict: {verdict_starts} start(s) a side hold its rates {at}"
    more = f"{needed} would" if needed else "no night's number of starts would"
    return (
        f"  verdict: {verdict_starts} start(s) a side {at} cannot hold both its rates ({more}): "
        f"the evening is kept unless the morning is shown within {margin} (a {margin} "
        f"regression kept in at most {share(MISS)} of nights); the tune's own measured spread "
        "decides in the morning"
    )


def plan_lines(plan: dict[str, Any], windows: int) -> list[str]:
    tune = plan["tune"]
    starts = int(plan.get("verdict_starts") or 1)
    lines = [
        f"night plan: budget {clock(plan['budget_s'])}",
        f"  evening: glm5.service up; {starts} fresh start(s) (about {clock(plan['restart_s'])}"
        f" each), each benched: {windows} windows, about {clock(plan['bench_s'])}",
        f"  tune: {clock(plan['tune_budget_s'])} of it; its plan: {tune.get('starts')} engine "
        f"start(s), {clock(tune.get('total_s') or 0)}, "
        + ("fits" if tune.get("fits") else "the best may stay unconfirmed"),
    ]
    for dropped in plan["dropped"]:
        lines.append(f"  dropped to fit: {dropped.get('knob', dropped)}")
    if tune.get("start_basis"):  # what a start (and so each restart) counts, and leaves out
        lines.append(f"  a start: {tune['start_basis']}")
    lines.append(
        f"  morning: apply and restart, the same {starts} start(s) and benches, and a "
        "rollback's restart kept in reserve"
    )
    lines.append(verdict_line(starts))
    return lines


def _tune_plan(
    config_path: str, workload_args: list[str], tune_args: list[str], budget_s: float, folder: Path
) -> dict[str, Any]:
    argv = glm5svc_argv(
        config_path,
        "tune",
        "run",
        "--plan",
        "--json",
        "--budget",
        f"{max(budget_s, 1):.0f}s",
        *workload_args,
        *tune_args,
    )
    done = run_child(argv, "tune-plan", folder, threading.Event())
    if done.returncode != 0 or not done.document:
        raise ConfigError(f"glm5svc tune run --plan refused the night's tune: {done.error()}")
    return done.document
