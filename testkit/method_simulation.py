"""A simulation of tune's decisions over one first pass, with the noise a real engine shows.

Each engine start of a setting gives the mean of `windows` steady windows; the start
carries a lognormal effect (`start_sigma`, drawn per start), each window its own noise
(`window_sigma`), and the machine drifts by `drift` per start in the pass. A pass starts
the starting point twice, then compares `candidates` settings one after another with the
search's own rule (glm5svc.tune.decision.next_step), a promoted one becoming the
incumbent. Reports how often a pass promotes a setting with no real gain, and how often
it finds one with a real gain, with the starts it spent.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from glm5svc.tune.decision import BETTER, DONE, START_CANDIDATE, StartRecord, next_step


@dataclass(frozen=True)
class Noise:
    start_sigma: float = 0.02
    window_sigma: float = 0.02
    windows: int = 2
    drift: float = 0.002  # per start, multiplicative


@dataclass(frozen=True)
class PassResult:
    promoted: tuple[int, ...]  # candidate indices promoted, in order
    final: int  # -1: the starting point stayed best
    starts: int


def simulate_pass(
    effects: list[float],
    noise: Noise,
    rng: random.Random,
    *,
    min_effect: float = 0.03,
    confidence: float = 0.95,
    **options,
) -> PassResult:
    """effects[i]: candidate i's true gain over the starting point (0.1: +10 %)."""
    history: list[StartRecord] = []

    def start(setting: int) -> None:
        true = 1.0 if setting < 0 else 1.0 + effects[setting]
        level = true * math.exp(rng.gauss(0, noise.start_sigma)) * (1 + noise.drift) ** len(history)
        windows = [level * math.exp(rng.gauss(0, noise.window_sigma)) for _ in range(noise.windows)]
        history.append(StartRecord(str(setting), len(history), sum(windows) / len(windows)))

    start(-1)
    start(-1)
    incumbent, promoted = -1, []
    for candidate in range(len(effects)):
        while True:
            step, verdict = next_step(
                history, str(candidate), str(incumbent),
                min_effect=min_effect, confidence=confidence, comparisons=len(effects),
                **options,
            )  # fmt: skip
            if step == DONE:
                break
            start(candidate if step == START_CANDIDATE else incumbent)
        if verdict.kind == BETTER:
            incumbent = candidate
            promoted.append(candidate)
    return PassResult(tuple(promoted), incumbent, len(history))


@dataclass(frozen=True)
class Rates:
    passes: int
    false_promotion: float  # share of null passes promoting anything
    power: float  # share of passes with one +effect candidate that end on it
    mean_starts_null: float
    mean_starts_effect: float


def rates(
    noise: Noise,
    *,
    candidates: int = 11,
    effect: float = 0.10,
    passes: int = 1000,
    seed: int = 0,
    min_effect: float = 0.03,
    **options,
) -> Rates:
    rng = random.Random(seed)
    false, found, starts_null, starts_eff = 0, 0, 0, 0
    where = candidates // 2
    for _ in range(passes):
        null = simulate_pass([0.0] * candidates, noise, rng, min_effect=min_effect, **options)
        false += bool(null.promoted)
        starts_null += null.starts
        effects = [0.0] * candidates
        effects[where] = effect
        real = simulate_pass(effects, noise, rng, min_effect=min_effect, **options)
        found += real.final == where
        starts_eff += real.starts
    return Rates(passes, false / passes, found / passes, starts_null / passes, starts_eff / passes)
