"""The noise study's figures, from a recorded run (lab/gpu/noise_scenario.py) or a tune run's
folder, by glm5svc/tune/noise.py.

    .venv/bin/python -m lab.gpu.noise_figures FOLDER [--objective output|total] [--window S]
        [--warmup S] [--json]

FOLDER is a noise recording's `noise/` folder (start<N>-windows.json beside
start<N>/seconds.jsonl; `recorded/noise/` in a run's archive, the fixture's `noise/`) or a
tune run's folder (starts/NNN/seconds.jsonl, cut into windows of --window seconds, the
first --warmup seconds of each start marked warm-up), for output tokens/s (the tune's
default objective) or the total (uncached prompt + output). Printed as Markdown:
- the spreads: within starts (pooled), start to start, and the between-starts part;
- the attribution over the fixed-length windows (all starts, then each start about its own
  mean): each source's share of the variance alone, the sources fitted in turn with what
  each added, the residual spread;
- what removes: both spreads for the other measured quantities and the variant's windows;
- each start's mean of every source (what a start leaves behind shows there).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from glm5svc.tune.noise import SOURCES, objective, report, rows_from_folder


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:,.4g}"


def attribution_lines(title: str, found: dict | None) -> list[str]:
    if found is None:
        return [f"{title}: fewer than 3 windows", ""]
    lines = [
        f"{title}: {found['n']} windows, mean {found['mean']:,.0f} tok/s, spread "
        f"{_pct(found['spread'])}; fitted {_pct(found['explained'])} of the variance, "
        f"residual spread {_pct(found['residual_spread'])}",
        "",
        "| source | alone (R^2) | tok/s per unit | fitted: added |",
        "|---|---|---|---|",
    ]
    added = dict(found["chosen"])
    for name in sorted(found["alone"], key=lambda n: -found["alone"][n]):
        lines.append(
            f"| {name} | {_pct(found['alone'][name])} | {_number(found['slopes'][name])} "
            f"| {_pct(added[name]) if name in added else ''} |"
        )
    if found["left_out"]:
        lines.append(
            f"\nleft out (unknown in a window, or constant): {', '.join(found['left_out'])}"
        )
    return lines + [""]


def markdown(found: dict, counted: str = "output") -> str:
    spread = found["spread"]
    lines = [
        f"{counted} tokens/s: {spread['windows']} windows in {spread['starts']} start(s), mean "
        f"{spread['mean']:,.0f} tok/s; within starts {_pct(spread['within_start'])}, start "
        f"to start {_pct(spread['start_to_start'])} (between-starts part "
        f"{_pct(spread['between_starts'])}); start means "
        + ", ".join(f"{m:,.0f}" for m in spread["start_means"]),
        "",
    ]
    lines += attribution_lines("All fixed-length windows", found["windows"])
    lines += attribution_lines("Within starts (each about its own mean)", found["within_starts"])
    lines += ["| measured as | windows | within starts | start to start | between starts |",
              "|---|---|---|---|---|"]  # fmt: skip
    for name, value in found["removable"].items():
        lines.append(
            f"| {name} | {value['windows']} | {_pct(value['within_start'])} "
            f"| {_pct(value['start_to_start'])} | {_pct(value['between_starts'])} |"
        )
    lines += ["", "| start | " + " | ".join(SOURCES) + " |", "|---" * (len(SOURCES) + 1) + "|"]
    for start, means in found["start_sources"].items():
        lines.append(f"| {start} | " + " | ".join(_number(means[n]) for n in SOURCES) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--window", type=float, default=10.0, help="a tune folder's windows (s)")
    parser.add_argument("--warmup", type=float, default=20.0, help="a tune folder's warm-up (s)")
    parser.add_argument("--objective", choices=("output", "total"), default="output")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    try:
        rows = objective(rows_from_folder(args.folder, args.window, args.warmup), args.objective)
    except (ValueError, OSError) as exc:
        raise SystemExit(f"noise_figures: {exc}") from None
    found = report(rows)
    print(
        json.dumps(found, indent=2, default=str) if args.json else markdown(found, args.objective)
    )


if __name__ == "__main__":
    main()
