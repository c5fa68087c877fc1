"""The error rates of tune's decisions, simulated through the search's own decision rule.

For each noise setting (spread from one engine start to the next, noise of one window,
drift per window), passes of the search (testkit/method_simulation.py: the live value by
paired windows, each restart candidate screened by one start and given the starts its
verdict asks for, the winner's confirming start) run on a space of one live candidate and
two restart candidates:
- false promotion: passes where no candidate has a gain and the pass writes one (after
  its confirming start; before it, in brackets);
- power: passes with one true +10 % (live, or restart) that write it;
- the peer's rule beside the tune (sglang.auto_benchmark: one run per candidate, each its
  own start, the highest kept) on a landscape of +-3-8 % effects: how often each ends on a
  setting truly worse, or better, than the start.

    .venv/bin/python bench/tune_method.py [--short] [--passes N] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from testkit.method_simulation import Noise, Rule, landscape, rates  # noqa: E402

RULE = Rule(max_rounds=16)  # the tune's defaults: --min-repeats 2, --max-repeats 16
# (start spread, window noise, drift per window, which candidate has the +10 %); the first
# rows are the H200 testbed's figures (starts 0.6-4 % apart, windows 3-15 %).
SETTINGS = [
    (0.02, 0.03, 0.0005, "live"),
    (0.03, 0.05, 0.001, "live"),
    (0.01, 0.02, 0.0005, "restart"),
    (0.015, 0.03, 0.0005, "restart"),
    (0.03, 0.03, 0.001, "restart"),
]
LANDSCAPES = [(0.03, 0.05, 0.0005), (0.03, 0.12, 0.001)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true", help="10 passes per setting (CI)")
    parser.add_argument("--passes", type=int, default=300)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    passes = 10 if args.short else args.passes
    rows = []
    for seed, (start_sigma, window_sigma, drift, kind) in enumerate(SETTINGS):
        noise = Noise(start_sigma, window_sigma, drift)
        figures = rates(noise, kind=kind, passes=passes, seed=seed, rule=RULE)
        rows.append({"noise": asdict(noise), "effect_in": kind, **asdict(figures)})
        print(
            f"start spread {start_sigma:.1%}, window {window_sigma:.0%}, drift "
            f"{drift:.2%}/window: false promotion {figures.false_promotion:.1%} of passes "
            f"({figures.false_promotion_screen:.1%} before confirming), power "
            f"{figures.power:.0%} for a +10 % {kind} setting, {figures.mean_starts:.1f} "
            "starts a pass",
            flush=True,
        )
    for seed, (start_sigma, window_sigma, drift) in enumerate(LANDSCAPES, start=100):
        noise = Noise(start_sigma, window_sigma, drift)
        figures = landscape(noise, passes=passes, seed=seed, rule=RULE)
        rows.append({"noise": asdict(noise), "landscape": "+-3-8 %", **asdict(figures)})
        print(
            f"landscape of +-3-8 % effects, start spread {start_sigma:.0%}, window "
            f"{window_sigma:.0%}: ends worse than the start: tune {figures.tune_worse:.1%}, "
            f"the peer's rule {figures.peer_worse:.1%}; better: tune "
            f"{figures.tune_better:.0%}, the peer's rule {figures.peer_better:.0%}",
            flush=True,
        )
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
