"""The head lines of a finished tune, the same where the run ends and in `tune show`: the
best, its gain, the confirmation, the knobs the overlay leaves at the start's value and
why, how it stopped, where its files are, and what comes next (apply it; or why nothing
is applied, in `tune apply`'s words, and what would confirm it; or the resume of a
stopped run)."""

from __future__ import annotations

from typing import Any

from glm5svc.tune.confirmation import CONFIRMED, NO_CHANGE, STATUSES, headline, refusal
from glm5svc.tune.outputs import confidence_label

STOPPED_BY_SIGNAL = "stopped by a signal"  # Search.run's stopped_by (glm5svc/tune/search.py)


def result_lines(summary: dict[str, Any]) -> list[str]:
    lines = []
    best, gain = summary.get("best"), summary.get("gain")
    if isinstance(best, dict):
        mean = best.get("throughput_mean")
        figure = f": {mean:,.0f} tok/s" if _number(mean) else ""
        lines.append(f"best: trial {best.get('trial')} ({best.get('setting')}){figure}")
    if isinstance(gain, dict) and all(_number(gain.get(k)) for k in ("mean", "low", "high")):
        lines.append(
            f"gain over the start: {gain['mean']:.2f}x ({confidence_label(summary)} interval "
            f"{gain['low']:.2f}-{gain['high']:.2f})"
        )
    status, detail = summary.get("confirmation"), summary.get("confirmation_detail")
    if status == NO_CHANGE:
        pass  # said by the last line: nothing to apply
    elif status == CONFIRMED and detail:
        lines.append(f"confirmation: {detail}")
    elif status in STATUSES:
        lines.append(f"confirmation: {status}: {detail or headline(status)}")
    elif status:
        lines.append(f"confirmation: {status}")  # the words of an older glm5svc
    lines += [f"not written: {line}" for line in summary.get("left_at_start") or []]
    lines += [str(line) for line in summary.get("service") or []]
    lines.append(f"stopped: {summary.get('stopped_by')}")
    run_dir = summary.get("run_dir")
    lines.append(f"run directory: {run_dir} (tuned.yaml, host_vars.yml, trials.md, plot.png)")
    why = refusal(summary, str(run_dir))
    if why is None:
        lines.append(
            f"apply it: glm5svc tune apply {run_dir}"
            if summary.get("overlay")
            else "nothing to apply: no setting measured better than the start"
        )
    else:
        lines.append(f"not applied: {why}")
    if stopped_by_signal(summary) and not summary.get("confirmation_command"):
        lines.append(f"resume it: glm5svc tune run --resume {run_dir}")
    return lines


def stopped_by_signal(summary: dict[str, Any]) -> bool:
    return bool(summary.get("interrupted_by")) or str(summary.get("stopped_by")).startswith(
        STOPPED_BY_SIGNAL
    )


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
