"""The tune's error rates at the real engine's noise: the real Search on recorded windows.

glm5svc.tune.search.Search, as it is, runs many seeded tunes on a stand-in engine
(testkit/recorded_engine.py) whose starts and windows are resampled from the H200's
recorded counter reads (testkit/recorded_noise.py: a start's level from the recorded
starts, the windows of an A B B A block one stretch of a recorded series of the cap), at
the window the GPU lab's tunes measure the H200 testbed at (or the longest the recording
represents, where that is shorter; --window another). Each setting's true gain is
multiplied on top. Two spaces, each a live cap pair (A the start, B the candidate,
measured in A B B A rounds within each start) and one restart knob (its own starts) with
no effect:
- null: B has no effect either. False promotion: tunes whose confirmed overlay
  (Search.confirmed True, best not the start) changes anything; at most 5 % is the target.
- effect: B is +10 %. Power: tunes whose confirmed overlay sets B; at least 80 % is the
  target. Also how often the null knob ended "equivalent", and the starts a tune made.
Beside each rate: its 95 % Clopper-Pearson interval over the seeds, and the tunes whose
best is not the start but stayed unconfirmed (no overlay may be written for them).

    .venv/bin/python bench/tune_recorded.py [--short] [--seeds N] [--window S] [--cap N]
        [--recording DIR] [--objective output_tokens|total_tokens] [--jobs N] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from glm5svc.config import BenchmarkSection  # noqa: E402
from glm5svc.tune.outputs import overlay_for  # noqa: E402
from glm5svc.tune.search import Search  # noqa: E402
from glm5svc.tune.settings import SearchSettings  # noqa: E402
from glm5svc.tune.space import Knob, Space  # noqa: E402
from lab.gpu.tune_scenario import WINDOW_S as LAB_WINDOW_S  # noqa: E402
from testkit.recorded_engine import METRIC_OF, RecordedEngine  # noqa: E402
from testkit.recorded_noise import (  # noqa: E402
    H200_PRECISION,
    OUTPUT,
    TOTAL,
    RecordingError,
    Resampler,
    load_recording,
)

CAP = "tuning.max_running_requests"
CAP_KEY = CAP.split(".", 1)[1]  # as the overlay's tuning: section names it
NULL_KNOB = "tuning.attention_backend"
EFFECT = 1.10
FALSE_PROMOTION_TARGET, POWER_TARGET = 0.05, 0.80
SHORT_SEEDS = 40
VERDICTS = ("better", "worse", "equivalent", "undecided")
# The study's SQLite commits wait on the disk; in memory a tune takes a fraction of it.
SCRATCH = "/dev/shm" if Path("/dev/shm").is_dir() else None


def tune_window() -> tuple[float, str]:
    """The window the tune measures the recorded testbed at, and where it comes from: the
    GPU lab's tune window (the recordings are of the lab's H200 testbed; glm5svc tune's own
    default, benchmark.window_s, is sized for GLM-5 on its target)."""
    return LAB_WINDOW_S, "the GPU lab's tune window, lab/gpu/tune_scenario.py WINDOW_S"


def longest_represented(recording, cap: int) -> float:
    """The longest window the recording represents at the cap: half its longest series
    (a longer one's blocks overlap so much that their spread understates the engine's)."""
    probe = Resampler(recording, cap, 1.0, random.Random(0))
    return math.floor(probe.longest * probe.interval_s / 2)


def measured_window(recording, cap: int, given: float | None, default: float,
                    source: str) -> tuple[float, str]:  # fmt: skip
    """--window, else the tune's default where the recording represents it, else the
    longest it represents; and why."""
    if given:
        return given, f"--window; the tune's default: {default:g} s, {source}"
    longest = longest_represented(recording, cap)
    if default <= longest:
        return default, source
    return longest, (
        f"the tune's default, {default:g} s ({source}), is longer than the recording "
        f"represents at cap {cap}: the longest it does"
    )


def space_of(cap_a: int, cap_b: int) -> tuple[Space, dict]:
    space = Space(
        [Knob(CAP, (cap_a, cap_b), restart=False), Knob(NULL_KNOB, (None, "triton"))],
        "bench/tune_recorded.py",
    )
    return space, {CAP: cap_a, NULL_KNOB: None}


def ended(search: Search, knob: str) -> str:
    """How the comparison of `knob`'s other value ended: its latest verdict against the best
    (the record of the best's setting with only that knob changed, if there is one; the
    confirmation's records judge the overlay, not the knob)."""
    best = search.best.candidate if search.best else search.start
    mine = [
        r for r in search.records
        if r.status in ("measured", "pruned") and not getattr(r, "confirming", False)
        and r.candidate.get(knob) != search.start.get(knob)
    ]  # fmt: skip
    beside = [r for r in mine if all(r.candidate[k] == v for k, v in best.items() if k != knob)]
    latest = (beside or mine or [None])[-1]
    if latest is None:
        return "not measured"
    if latest.candidate == best:
        return "better"  # it is the best
    if latest.status == "pruned":
        return "worse"  # its start stopped early, clearly behind (or under --prune-below)
    kind = latest.verdict.split(":", 1)[0]
    return kind if kind in VERDICTS else "other"


def one_tune(recording, cap: int, window_s: float, objective: str, seed: int,
             gain_b: float) -> dict:  # fmt: skip
    settings = SearchSettings(seed=seed, window_s=window_s)
    cap_b = cap + 1  # a second value of the live cap: the truth, not the value, differs
    space, start = space_of(cap, cap_b)
    engine = RecordedEngine(
        Resampler(recording, cap, window_s, random.Random(seed)),
        lambda setting: gain_b if setting[CAP] == cap_b else 1.0,
        CAP,
        window_s,
        settings.settle_s,
        objective,
    )
    with tempfile.TemporaryDirectory(dir=SCRATCH) as run_dir:
        search = Search(space, {}, start, settings, Path(run_dir), engine)
        search.run()
    changed = overlay_for(search.written()[0], start).get("tuning", {})  # as written
    confirmed = search.confirmed is True and bool(changed)
    return {
        "seed": seed,
        "confirmed_overlay": changed if confirmed else {},
        "unconfirmed_overlay": changed if search.confirmed is None and changed else {},
        "confirmation": search.confirmation,
        "null_knob": ended(search, NULL_KNOB),
        "live_b": ended(search, CAP),
        "starts": engine.starts,
        "windows": engine.windows,
        "measured_s": engine.virtual_s,
        "cap_b": cap_b,
    }


def clopper_pearson(hits: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The exact binomial interval of a share (two-sided)."""
    tail = (1 - confidence) / 2

    def at_least(p: float) -> float:  # P(X >= hits)
        return math.fsum(math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(hits, n + 1))

    def bisect(check, low=0.0, high=1.0) -> float:
        for _ in range(60):
            mid = (low + high) / 2
            low, high = (mid, high) if check(mid) else (low, mid)
        return (low + high) / 2

    lower = 0.0 if hits == 0 else bisect(lambda p: at_least(p) < tail)
    upper = 1.0 if hits == n else bisect(lambda p: 1 - at_least(p) + _pmf(n, hits, p) > tail)
    return lower, upper


def _pmf(n: int, k: int, p: float) -> float:
    return math.comb(n, k) * p**k * (1 - p) ** (n - k)


def share(hits: int, n: int) -> dict:
    low, high = clopper_pearson(hits, n)
    return {"hits": hits, "n": n, "rate": hits / n, "low": low, "high": high}


def run_space(name: str, recording, cap: int, window_s: float, objective: str, seeds: int,
              gain_b: float, jobs: int = 1) -> dict:  # fmt: skip
    began = time.monotonic()
    each = partial(one_tune, recording, cap, window_s, objective, gain_b=gain_b)
    if jobs > 1:
        with ProcessPoolExecutor(jobs) as pool:
            tunes = list(pool.map(each, range(seeds)))
    else:
        tunes = [each(seed) for seed in range(seeds)]
    n = len(tunes)
    if gain_b == 1.0:
        hits = sum(1 for t in tunes if t["confirmed_overlay"])
        key, target = "false_promotion", FALSE_PROMOTION_TARGET
    else:
        hits = sum(1 for t in tunes if t["confirmed_overlay"].get(CAP_KEY) == t["cap_b"])
        key, target = "power", POWER_TARGET
    row = {
        "space": name,
        "effect": gain_b - 1,
        key: share(hits, n),
        "target": target,
        "exactly_b": share(
            sum(1 for t in tunes if t["confirmed_overlay"] == {CAP_KEY: t["cap_b"]}), n
        ),
        "unconfirmed_overlay": share(sum(1 for t in tunes if t["unconfirmed_overlay"]), n),
        "null_knob": {
            v: sum(t["null_knob"] == v for t in tunes) / n
            for v in sorted({t["null_knob"] for t in tunes})
        },
        "live_b": {
            v: sum(t["live_b"] == v for t in tunes) / n
            for v in sorted({t["live_b"] for t in tunes})
        },
        "mean_starts": sum(t["starts"] for t in tunes) / n,
        "max_starts": max(t["starts"] for t in tunes),
        "mean_windows": sum(t["windows"] for t in tunes) / n,
        "mean_measured_s": sum(t["measured_s"] for t in tunes) / n,
        "wall_s": round(time.monotonic() - began, 1),
        "tunes": tunes,
    }
    return row


def print_row(row: dict) -> None:
    key = "false_promotion" if "false_promotion" in row else "power"
    figure = row[key]
    label = "false promotion" if key == "false_promotion" else "power (+10 % live cap written)"
    meets = (figure["rate"] <= row["target"]) if key == "false_promotion" else (
        figure["rate"] >= row["target"]
    )  # fmt: skip
    print(
        f"{row['space']}: {label} {figure['rate']:.1%} ({figure['hits']} of {figure['n']} "
        f"tunes; 95 % interval {figure['low']:.1%}-{figure['high']:.1%}; target "
        f"{'at most' if key == 'false_promotion' else 'at least'} {row['target']:.0%}: "
        f"{'met' if meets else 'NOT met'})",
        flush=True,
    )
    print(
        f"  overlay exactly the +10 % cap: {row['exactly_b']['rate']:.1%}; best not the "
        f"start but unconfirmed: "
        f"{row['unconfirmed_overlay']['rate']:.1%}",
        flush=True,
    )
    print(
        "  the null restart knob ended: " + _shares(row["null_knob"]) + "; the live cap B "
        "ended: " + _shares(row["live_b"]),
        flush=True,
    )
    print(
        f"  {row['mean_starts']:.2f} starts a tune (at most {row['max_starts']}), "
        f"{row['mean_windows']:.1f} windows, {row['mean_measured_s'] / 60:.1f} min measured "
        f"(warm-ups and loads left out); {row['wall_s']:.1f} s here",
        flush=True,
    )


def _shares(counts: dict[str, float]) -> str:
    return ", ".join(f"{kind} {value:.0%}" for kind, value in counts.items())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true", help=f"{SHORT_SEEDS} tunes a space (CI)")
    parser.add_argument("--seeds", type=int, default=400, help="tunes per space")
    parser.add_argument(
        "--window",
        type=float,
        help="window seconds (default: the tune's, or the longest the recording represents)",
    )
    parser.add_argument("--cap", type=int, help="the recorded cap (default: the most seconds)")
    parser.add_argument("--recording", type=Path, default=H200_PRECISION)
    parser.add_argument(
        "--objective",
        choices=sorted(METRIC_OF),
        default=BenchmarkSection().objective,
        help="what a window counts (default: benchmark.objective's default)",
    )
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    seeds = SHORT_SEEDS if args.short else args.seeds
    settle_s = SearchSettings().settle_s
    try:
        recording = load_recording(args.recording, settle_s)
    except RecordingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    cap = args.cap or max(recording.caps(), key=recording.seconds_at)
    if cap not in recording.caps():
        print(f"error: --cap {cap}: the recording has caps {recording.caps()}", file=sys.stderr)
        return 2
    default_window, source = tune_window()
    window_s, why = measured_window(recording, cap, args.window, default_window, source)
    target = SearchSettings().window_s or BenchmarkSection().window_s
    print(f"window {window_s:g} s ({why}; glm5svc tune's default, for GLM-5 on its target: "
          f"{target:g} s)")  # fmt: skip
    for metric in (OUTPUT, TOTAL):
        print(recording.describe(cap, metric))
    probe = Resampler(recording, cap, window_s, random.Random(0))
    if probe.too_long():
        print(
            f"note: a {window_s:g} s window is over half the longest recorded series at cap "
            f"{cap} ({probe.longest * probe.interval_s:.0f} s): its blocks overlap or turn "
            "back, so the window spread resampled understates the engine's; record longer phases"
        )
    objective = args.objective
    print(
        f"objective {objective} (benchmark.objective's default: {BenchmarkSection().objective}); "
        f"window spread within a start at {window_s:g} s: "
        + ", ".join(f"{m} {probe.window_spread(m):.1%}" for m in (OUTPUT, TOTAL))
    )
    rows = [
        run_space(name, recording, cap, window_s, objective, seeds, gain, args.jobs)
        for name, gain in (
            ("null (no effect anywhere)", 1.0),
            ("effect (+10 % live cap, null restart knob)", EFFECT),
        )
    ]
    for row in rows:
        print_row(row)
    if args.out:
        result = {
            "recording": recording.source, "cap": cap, "window_s": window_s,
            "objective": objective,
            "window_spread": {m: probe.window_spread(m) for m in (OUTPUT, TOTAL)},
            "default_window_s": default_window, "window_source": why,
            "longest_represented_s": longest_represented(recording, cap),
            "recorded_starts": len(recording.start_means(cap, OUTPUT)),
            "start_spread": {m: recording.start_spread(cap, m) for m in (OUTPUT, TOTAL)},
            "seeds": seeds, "rows": rows,
        }  # fmt: skip
        args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
