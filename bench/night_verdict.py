"""The morning verdict's error rates at the engine's start-to-start noise: the real
`compare_mornings` (glm5svc/night/compare.py) on simulated nights.

A night: the tune's starts (three settings, two starts each, their per-start means), from
which the verdict's assumed spread comes as the night takes it (`Spread.of_tune`: the tune's
start model, shrunk towards its 15 % prior, which yields to starts that refute it), or, in
the "known" rows, a spread measured over many starts of the machine (the true one with 40
degrees of freedom, what `--start-spread-prior` from a machine's own starts would give).
Then N engine starts a side, each 3 windows: a start's level is log-normal at the true
spread, each window adds 1 % (the H200's windows within a settled start agreed within
0.4-0.8 %). The morning's true effect is multiplied on top:
- 0 (an unchanged engine): false rollback = nights rolled back; target at most 5 %;
- -10 %: miss = nights that kept it; target at most 20 %;
- +10 %: kept = nights that kept it; target at least 90 %.
Beside each rate its 95 % Clopper-Pearson interval; "holds" = nights whose interval the
rule counted narrow enough to hold both rates (else it keeps the evening unless the
morning is shown within 10 %, and says so).

The spreads: 2 % (a settled cap, as cap 192 on the H200: 1.4-2.2 %); 5.8 % (one session's
starts on an H100, reported, not recorded here); the H200 recording's, computed from
tests/fixtures/real_engine/sglang-0.5.11-h200-precision (cap 1024, output tok/s, three
starts: 10.7 %), the one the recordings show; 15 % (the tune's prior) and 20 %.

    .venv/bin/python bench/night_verdict.py [--short] [--nights N] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from glm5svc.night.compare import (  # noqa: E402
    FALSE_ROLLBACK,
    MISS,
    REGRESSION_MARGIN,
    Spread,
    compare_mornings,
    starts_needed,
)
from glm5svc.tune.settings import SearchSettings  # noqa: E402
from testkit.recorded_noise import H200_PRECISION, OUTPUT, load_recording  # noqa: E402

WINDOWS = 3
WINDOW_NOISE = 0.01
TUNE_SETTINGS, TUNE_STARTS_EACH = 3, 2
KNOWN_DOF = 40
EFFECTS = {"unchanged": 0.0, "regression": -REGRESSION_MARGIN, "gain": 0.10}
KEPT_TARGET = 0.90
NIGHTS, SHORT_NIGHTS = 3000, 300
STARTS, SHORT_STARTS = (1, 2, 4, 6), (1, 4)
MODES = ("tune", "known")  # the spread as the night takes it from the tune; known (40 dof)


def recorded_spread() -> tuple[float, str]:
    """The start-to-start spread of the H200 recording, at its cap with the most seconds."""
    recording = load_recording(H200_PRECISION, SearchSettings().settle_s)
    cap = max(recording.caps(), key=recording.seconds_at)
    return recording.start_spread(cap, OUTPUT), recording.describe(cap, OUTPUT)


def spreads(short: bool) -> list[tuple[str, float]]:
    recorded, _ = recorded_spread()
    rows = [("settled cap", 0.02), ("H100 session", 0.058), ("H200 recording", recorded),
            ("tune prior", 0.15), ("wide", 0.20)]  # fmt: skip
    return [rows[0], rows[2]] if short else rows


def start_level(rng: random.Random, sigma: float) -> float:
    return math.exp(rng.gauss(0.0, sigma))


def windows(rng: random.Random, level: float) -> list[float]:
    return [1000.0 * level * math.exp(rng.gauss(0.0, WINDOW_NOISE)) for _ in range(WINDOWS)]


def tune_summary(rng: random.Random, sigma: float) -> dict:
    """What the night reads of the tune: its trials' per-start means."""
    rows, order = [], 0
    for setting in range(TUNE_SETTINGS):
        base = 1 + 0.05 * setting
        for _ in range(TUNE_STARTS_EACH):
            mean = sum(windows(rng, base * start_level(rng, sigma))) / WINDOWS
            rows.append({"setting": f"s{setting}", "start": order, "status": "measured",
                         "throughput_mean": mean})  # fmt: skip
            order += 1
    return {"settings": {"start_spread_prior": SearchSettings().start_spread_prior},
            "trials": rows}  # fmt: skip


def night(rng: random.Random, sigma: float, starts: int, mode: str, effect: float):
    if mode == "tune":
        spread = Spread.of_tune(tune_summary(rng, sigma))
    else:  # of a start's mean: its windows' noise included, as measured starts show it
        spread = Spread(math.hypot(sigma, WINDOW_NOISE / math.sqrt(WINDOWS)), KNOWN_DOF, "known")
    evening = [windows(rng, start_level(rng, sigma)) for _ in range(starts)]
    morning = [windows(rng, (1 + effect) * start_level(rng, sigma)) for _ in range(starts)]
    return compare_mornings(evening, morning, spread)


def binomial_interval(hits: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Clopper-Pearson, its tails summed in logs (n in the thousands)."""
    tail = (1 - confidence) / 2

    def log_pmf(k: int, p: float) -> float:
        return (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
                + k * math.log(p) + (n - k) * math.log1p(-p))  # fmt: skip

    def at_least(p: float) -> float:
        return math.fsum(math.exp(log_pmf(k, p)) for k in range(hits, n + 1))

    def at_most(p: float) -> float:
        return math.fsum(math.exp(log_pmf(k, p)) for k in range(0, hits + 1))

    def bisect(too_low) -> float:
        low, high = 1e-12, 1 - 1e-12
        for _ in range(50):
            mid = (low + high) / 2
            low, high = (mid, high) if too_low(mid) else (low, mid)
        return (low + high) / 2

    lower = 0.0 if hits == 0 else bisect(lambda p: at_least(p) < tail)
    upper = 1.0 if hits == n else bisect(lambda p: at_most(p) > tail)
    return lower, upper


def rate(hits: int, n: int) -> dict:
    low, high = binomial_interval(hits, n)
    return {"hits": hits, "n": n, "rate": hits / n, "low": low, "high": high}


def cell(name: str, sigma: float, starts: int, mode: str, nights: int, seed: int) -> dict:
    rng = random.Random(seed)
    row = {"spread_name": name, "spread": sigma, "starts": starts, "mode": mode}
    holds = 0
    for effect_name, effect in EFFECTS.items():
        comparisons = [night(rng, sigma, starts, mode, effect) for _ in range(nights)]
        rolled = sum(c.rollback for c in comparisons)
        holds += sum(c.holds for c in comparisons)
        row[effect_name] = rate(rolled if effect_name == "unchanged" else nights - rolled, nights)
    row["holds_share"] = holds / (nights * len(EFFECTS))
    needed = starts_needed(Spread(sigma, KNOWN_DOF, "known"))
    row["starts_needed_known"] = needed
    row["targets_met"] = (
        row["unchanged"]["rate"] <= FALSE_ROLLBACK
        and row["regression"]["rate"] <= MISS
        and row["gain"]["rate"] >= KEPT_TARGET
    )
    return row


def percent(share: dict) -> str:
    return f"{share['rate'] * 100:5.1f} % [{share['low'] * 100:.1f}-{share['high'] * 100:.1f}]"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true", help="few nights and cells (seconds)")
    parser.add_argument("--nights", type=int, help=f"nights a cell (default {NIGHTS})")
    parser.add_argument("--out", type=Path, help="the figures as JSON")
    args = parser.parse_args()
    nights = args.nights or (SHORT_NIGHTS if args.short else NIGHTS)
    began = time.monotonic()
    recorded, described = recorded_spread()
    print(f"the recordings' start-to-start spread: {described}")
    print(
        f"{nights} nights a cell, {WINDOWS} windows a start ({WINDOW_NOISE * 100:g} % each); "
        f"targets: false rollback <= {FALSE_ROLLBACK * 100:g} %, miss of a "
        f"{REGRESSION_MARGIN * 100:g} % regression <= {MISS * 100:g} %, "
        f"+10 % kept >= {KEPT_TARGET * 100:g} %"
    )
    print(f"{'spread':>22} {'starts':>6} {'spread from':>11} | {'false rollback':>21} | "
          f"{'miss (-10 %)':>21} | {'+10 % kept':>21} | holds | met")  # fmt: skip
    rows = []
    for s_index, (name, sigma) in enumerate(spreads(args.short)):
        for starts in SHORT_STARTS if args.short else STARTS:
            for mode in MODES:
                seed = 1000 * s_index + 10 * starts + MODES.index(mode)
                row = cell(name, sigma, starts, mode, nights, seed)
                rows.append(row)
                label = f"{name} {sigma * 100:.1f} %"
                print(f"{label:>22} {starts:>6} {mode:>11} | {percent(row['unchanged']):>21} | "
                      f"{percent(row['regression']):>21} | {percent(row['gain']):>21} | "
                      f"{row['holds_share'] * 100:4.0f} % | "
                      f"{'yes' if row['targets_met'] else 'no'}", flush=True)  # fmt: skip
    print("starts a side that hold both rates at a spread measured over many starts: "
          + ", ".join(f"{name} {sigma * 100:.1f} %: "
                      f"{starts_needed(Spread(sigma, KNOWN_DOF, 'known')) or 'more than 20'}"
                      for name, sigma in spreads(False)))  # fmt: skip
    print(f"done in {time.monotonic() - began:.1f} s")
    if args.out:
        figures = {"nights": nights, "recorded_spread": recorded, "recording": described,
                   "rows": rows}  # fmt: skip
        args.out.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
