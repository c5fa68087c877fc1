"""The error rates of tune's decisions over one first pass, simulated with real-engine noise.

For each noise setting (spread from one engine start to the next, noise of one steady
window, drift per start), the search's own rule (glm5svc.tune.decision.next_step) runs
over first passes of 11 comparisons: how often a pass promotes a setting with no real
gain, how often it finds a true +10 %, and the engine starts it spends.

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

from testkit.method_simulation import Noise, rates  # noqa: E402

# (start spread, window noise, drift per start, seed); the first row is what two H200
# starts and their windows showed (docs/performance-bench.md).
SETTINGS = [
    (0.015, 0.02, 0.001, 7),
    (0.01, 0.02, 0.001, 7),
    (0.03, 0.02, 0.0, 3),
    (0.08, 0.03, 0.0, 3),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true", help="20 passes per setting (CI)")
    parser.add_argument("--passes", type=int, default=300)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    passes = 20 if args.short else args.passes
    rows = []
    for start_sigma, window_sigma, drift, seed in SETTINGS:
        figures = rates(
            Noise(start_sigma=start_sigma, window_sigma=window_sigma, drift=drift),
            passes=passes,
            seed=seed,
        )
        row = {"start_sigma": start_sigma, "window_sigma": window_sigma, "drift": drift}
        row.update(asdict(figures))
        rows.append(row)
        print(
            f"start spread {start_sigma:.1%}, window {window_sigma:.0%}, drift {drift:.1%}: "
            f"false promotion {figures.false_promotion:.1%} of passes, "
            f"power {figures.power:.0%} for +10 %, "
            f"{figures.mean_starts_null:.1f} starts a pass",
            flush=True,
        )
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
