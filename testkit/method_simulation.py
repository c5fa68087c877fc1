"""A simulation of tune's decisions over one pass, through the search's own decision
functions and in its order, with the noise a real engine shows.

A pass is what `glm5svc tune` does on a space of one live knob (values measured within
each start, in A B B A rounds) and `restart` candidates (one engine start each):
1. the start's engine start: its live candidate against the start's own value, by paired
   windows (glm5svc.tune.decision.judge_paired: whole blocks only, look k = blocks), looked
   at after every block from `min_rounds` on, until decided or `max_rounds`;
2. each restart candidate's start (the screen): stopped early after a block when every
   value is clearly behind the best (decision.clearly_behind, at that look), else judged
   at its end by decision.next_step, which counts looks by starts and the start model's
   degrees of freedom by starts (one start's live values share its effect); the starts it
   asks for are made, up to its limit;
3. the winner's confirming start: the best and the start's own value again in a new start
   of the best's combination (paired windows across all its starts when only the live
   value differs, else the start model), confirmed when the gain's lower bound is above 0.
Noise: a lognormal effect per engine start (`start_sigma`), per window (`window_sigma`),
and a drift that grows with every window measured (`drift_per_window`), so that windows
late in a pass read higher: the A B B A order and the bracketing must absorb it.
The peer's rule (sglang.auto_benchmark: one run per candidate, each its own engine start,
the highest kept) runs on the same draws' distribution beside it.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass

from glm5svc.tune.decision import (
    BETTER,
    DONE,
    MAX_STARTS,
    START_CANDIDATE,
    StartModel,
    StartRecord,
    clearly_behind,
    judge_paired,
    judge_starts,
    next_step,
)


@dataclass(frozen=True)
class Noise:
    start_sigma: float = 0.03
    window_sigma: float = 0.05
    drift_per_window: float = 0.0005  # multiplicative, per window of the whole pass


@dataclass(frozen=True)
class Rule:
    min_effect: float = 0.03
    confidence: float = 0.95
    min_rounds: int = 2
    max_rounds: int = 8
    max_starts: int = MAX_STARTS


@dataclass(frozen=True)
class PassResult:
    final: str  # "start", "live" or "restart-<i>": what the pass writes (after confirmation)
    screened: str  # the pick before its confirming start
    starts: int
    windows: int


class _Engine:
    """Draws starts and windows; the true levels are relative to the start (1.0)."""

    def __init__(self, noise: Noise, rng: random.Random):
        self.noise, self.rng = noise, rng
        self.starts = 0
        self.windows = 0

    def start(self) -> float:
        self.starts += 1
        return math.exp(self.rng.gauss(0, self.noise.start_sigma))

    def window(self, level: float, start_effect: float) -> float:
        self.windows += 1
        drift = (1 + self.noise.drift_per_window) ** self.windows
        return level * start_effect * drift * math.exp(self.rng.gauss(0, self.noise.window_sigma))


def _key(combo: int, live: int) -> str:
    return json.dumps([combo, live])


def simulate_pass(
    live_effect: float, restart_effects: list[float], noise: Noise, rng: random.Random,
    rule: Rule = Rule(),
) -> PassResult:  # fmt: skip
    """live_effect: the live candidate's true gain in every combination; restart_effects[i]:
    combination i+1's true gain (combination 0 is the start's)."""
    engine = _Engine(noise, rng)
    comparisons = 1 + len(restart_effects)  # as the search's first_pass_size
    combos = [0.0, *restart_effects]
    pairs: dict[int, tuple[list[float], list[float]]] = {}  # combo: (live, start value)
    rows: list[StartRecord] = []
    best = (0, 0)  # (combo, live value 0/1)

    def level(combo: int, live: int) -> float:
        return (1 + combos[combo]) * (1 + live_effect if live else 1.0)

    def one_start(combo: int, decide) -> list[StartRecord]:
        order = engine.starts
        effect = engine.start()
        got: dict[int, list[float]] = {0: [], 1: []}
        rounds = 0
        while rounds < rule.max_rounds:
            for live in (0, 1) if rounds % 2 == 0 else (1, 0):
                got[live].append(engine.window(level(combo, live), effect))
            rounds += 1
            if rounds % 2:
                continue
            mine, theirs = pairs.setdefault(combo, ([], []))
            mine.extend(got[1][-2:])
            theirs.extend(got[0][-2:])
            partial = [StartRecord(_key(combo, v), order, sum(w) / len(w), str(combo))
                       for v, w in got.items()]  # fmt: skip
            if decide(rounds, partial):
                break
        return [StartRecord(_key(combo, v), order, sum(w) / len(w), str(combo))
                for v, w in got.items()]  # fmt: skip

    def live_decided(rounds: int, _partial) -> bool:
        if rounds < rule.min_rounds:
            return False
        mine, theirs = pairs[best[0]]
        verdict = judge_paired(mine, theirs, min_effect=rule.min_effect,
                               confidence=rule.confidence, comparisons=comparisons)  # fmt: skip
        return verdict.kind != "undecided"

    # 1. the start's combination, its live value decided by paired windows
    rows += one_start(0, live_decided)
    mine, theirs = pairs[0]
    if judge_paired(mine, theirs, min_effect=rule.min_effect, confidence=rule.confidence,
                    comparisons=comparisons).kind == BETTER:  # fmt: skip
        best = (0, 1)
    # 2. the screen: one start per restart combination, stopped early when clearly behind
    for combo in range(1, len(combos)):

        def behind(rounds: int, partial: list[StartRecord], rows=rows, best=best) -> bool:
            starts = [*rows, *partial]
            return all(
                clearly_behind(starts, p.setting, _key(*best), rounds // 2,
                               confidence=rule.confidence, comparisons=comparisons)
                for p in partial
            )  # fmt: skip

        rows += one_start(combo, lambda r, p: r >= rule.min_rounds and behind(r, p))
        while True:
            candidate = _key(combo, best[1])
            step, verdict = next_step(
                rows, candidate, _key(*best), min_effect=rule.min_effect,
                confidence=rule.confidence, comparisons=comparisons, max_starts=rule.max_starts,
            )  # fmt: skip
            if step == DONE:
                break
            again = combo if step == START_CANDIDATE else best[0]
            rows += one_start(again, lambda r, p: r >= rule.min_rounds)
        if verdict.kind == BETTER:
            best = (combo, best[1])
    screened = _name(best)
    # 3. the winner's confirming start
    if best != (0, 0):
        rows += one_start(best[0], lambda r, p: r >= rule.min_rounds)
        if best[0] == 0:
            mine, theirs = pairs[0]
            gain = judge_paired(mine, theirs, min_effect=rule.min_effect,
                                confidence=rule.confidence).gain  # fmt: skip
        else:
            counts = tuple(sum(1 for r in rows if r.setting == k)
                           for k in (_key(*best), _key(0, 0)))  # fmt: skip
            model = StartModel.fit(rows)
            verdict = judge_starts(
                model, _key(*best), _key(0, 0), counts,
                min_effect=rule.min_effect, confidence=rule.confidence,
            )  # fmt: skip
            gain = verdict.gain
        if gain is None or gain.low <= 0:
            best = (0, 0)
    return PassResult(_name(best), screened, engine.starts, engine.windows)


def _name(best: tuple[int, int]) -> str:
    if best == (0, 0):
        return "start"
    if best[0] == 0:
        return "live"
    return f"restart-{best[0] - 1}" + ("+live" if best[1] else "")


def true_gain(result: str, live_effect: float, restart_effects: list[float]) -> float:
    if result == "start":
        return 0.0
    live = live_effect if result == "live" or result.endswith("+live") else 0.0
    combo = 0.0 if result == "live" else restart_effects[int(result.split("-")[1].split("+")[0])]
    return (1 + combo) * (1 + live) - 1


def peer_pick(live_effect: float, restart_effects: list[float], noise: Noise,
              rng: random.Random) -> str:  # fmt: skip
    """One run per candidate (each its own start), the highest kept."""
    names = ["start", "live"] + [f"restart-{i}" for i in range(len(restart_effects))]
    names += [f"restart-{i}+live" for i in range(len(restart_effects))]
    scores = {}
    for name in names:
        level = 1 + true_gain(name, live_effect, restart_effects)
        scores[name] = level * math.exp(rng.gauss(0, noise.start_sigma) +
                                        rng.gauss(0, noise.window_sigma))  # fmt: skip
    return max(scores, key=scores.get)


@dataclass(frozen=True)
class Rates:
    passes: int
    false_promotion: float  # null passes that write a setting (no candidate has a gain)
    false_promotion_screen: float  # null passes whose screen picked one, before confirming
    power: float  # passes with one true +effect that write it
    mean_starts: float


def rates(noise: Noise, *, kind: str, effect: float = 0.10, restarts: int = 2,
          passes: int = 200, seed: int = 0, rule: Rule = Rule()) -> Rates:  # fmt: skip
    """kind "live": the effect is the live candidate's; "restart": restart candidate 0's."""
    rng = random.Random(seed)
    false = screen = found = starts = 0
    for _ in range(passes):
        null = simulate_pass(0.0, [0.0] * restarts, noise, rng, rule)
        false += null.final != "start"
        screen += null.screened != "start"
        live, restart = (effect, [0.0] * restarts) if kind == "live" else (
            0.0, [effect] + [0.0] * (restarts - 1))  # fmt: skip
        real = simulate_pass(live, restart, noise, rng, rule)
        found += true_gain(real.final, live, restart) >= effect * 0.999
        starts += null.starts + real.starts
    return Rates(passes, false / passes, screen / passes, found / passes, starts / (2 * passes))


@dataclass(frozen=True)
class Landscape:
    passes: int
    tune_worse: float  # passes that end on a setting truly worse than the start
    peer_worse: float
    tune_better: float  # passes that end truly better than the start
    peer_better: float


def landscape(noise: Noise, *, passes: int = 200, seed: int = 0, restarts: int = 3,
              rule: Rule = Rule()) -> Landscape:  # fmt: skip
    """Every candidate's true effect drawn from +-3..8 %, the tune and the peer's rule."""
    rng = random.Random(seed)
    tune_worse = peer_worse = tune_better = peer_better = 0

    def draw() -> float:
        return rng.choice((-1, 1)) * rng.uniform(0.03, 0.08)

    for _ in range(passes):
        live, restart = draw(), [draw() for _ in range(restarts)]
        tune = true_gain(simulate_pass(live, restart, noise, rng, rule).final, live, restart)
        peer = true_gain(peer_pick(live, restart, noise, rng), live, restart)
        tune_worse += tune < 0
        peer_worse += peer < 0
        tune_better += tune > 0
        peer_better += peer > 0
    return Landscape(passes, tune_worse / passes, peer_worse / passes,
                     tune_better / passes, peer_better / passes)  # fmt: skip
