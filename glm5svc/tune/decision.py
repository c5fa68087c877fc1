"""Verdicts between settings, with the engine start as the unit of replication, valid at
every look the search takes.

Throughput moves from one engine start to the next (kernels picked at start, memory
layout, clocks): on the H200 testbed two starts of one setting agreed within about 4 %
while windows within one start agreed within about 1-3 %. So a setting that needs a
restart is judged by its per-start means, with the spread from start to start estimated
from every setting started more than once (pooled), shrunk towards a stated prior while
few starts are known. Settings that change live (the running-request cap) are measured
interleaved within one start (A B A B ...), and judged by their paired differences.

Figures are compared as log throughput, so a gain is a ratio and the spread a share.
A candidate is:
- better: the lower bound of its gain exceeds the minimum effect;
- worse: the upper bound of its gain is below zero;
- equivalent: its equivalence interval lies within plus or minus the minimum effect;
- undecided: none of these, not enough evidence yet.
The bounds are one-sided at (1 - confidence) / comparisons x 1 / (k H_K) at the k-th of at
most K looks of a comparison (H_K the K-th harmonic number): a Bonferroni correction over
every comparison the search makes (its share, `comparisons`, is given by the search:
glm5svc/tune/search.py `comparison_share`), and an alpha spent over the looks that sums to
(1 - confidence) / comparisons. Looks are bounded (a start's rounds by --max-repeats, a
side's starts by MAX_STARTS), and past the K-th no verdict changes. The union over looks
makes the sequence of intervals a confidence sequence: a search that looks after every
block of windows, and stops on the first "better", promotes a setting with no real gain
in at most 1 - confidence of tunes. "Equivalent" keeps the start, so its interval (two
one-sided tests at 1 - confidence, spent over looks the same way) needs no correction for
the number of comparisons: a wrong "equivalent" costs a gain, never writes a change.
- Live settings are looked at after 1, 2, 4, 8, ... pairs (look k: the first 2^(k-1)), the
  pair spread from their own pairs, the search's other live pairs on the machine and a
  prior (PairNoise), so a large effect is called in its first pairs and a small one keeps
  most of the alpha for the late looks; rounds alternate A B, B A, so a linear drift
  cancels over every two pairs.
- Restart settings are looked at once per engine start of either side after the
  candidate's first (look k: the k-th such start). Within a start, the search only asks
  whether the candidate is clearly behind (`worse`), which stops that start early and can
  never promote it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from glm5svc.tune.start_model import (
    PAIR_PRIOR_WEIGHT,
    PAIR_SPREAD_PRIOR,
    PRIOR_START_SPREAD,
    PRIOR_WEIGHT,
    SPREAD_FLOOR,
    StartModel,
    StartRecord,
)
from glm5svc.tune.stats import prior_contradicted
from glm5svc.tune.stats import student_t_quantile as t_quantile

BETTER, WORSE, EQUIVALENT, UNDECIDED = "better", "worse", "equivalent", "undecided"
FUTILE_AFTER = 2  # starts a side after which an estimate under the bar stops a comparison
MAX_STARTS = 6  # per candidate and comparison
PAIRS_PER_LOOK = 2  # an A B B A block (a planned test looks at whole blocks)
# Looks of a live comparison, at most: one a pair, --max-repeats' default (16 rounds) for
# each of the starts a comparison can span (the search passes its own bound).
MAX_LOOKS = 16 * MAX_STARTS


@dataclass(frozen=True)
class Gain:
    """The candidate's gain over the incumbent, as a relative change with its bounds."""

    estimate: float
    low: float
    high: float
    basis: str  # "starts" or "paired windows"
    n_candidate: int
    n_incumbent: int
    equivalence_low: float | None = None  # the equivalence interval (no multiplicity term)
    equivalence_high: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Verdict:
    kind: str
    gain: Gain | None
    why: str

    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "gain": self.gain.to_dict() if self.gain else None,
            "why": self.why,
        }


def classify(gain: Gain, min_effect: float) -> str:
    if gain.low > min_effect:
        return BETTER
    if gain.high < 0:
        return WORSE
    low = gain.low if gain.equivalence_low is None else gain.equivalence_low
    high = gain.high if gain.equivalence_high is None else gain.equivalence_high
    if low > -min_effect and high < min_effect:
        return EQUIVALENT
    return UNDECIDED


def _gain(d: float, se: float, q: float, basis: str, n_c: int, n_i: int,
          q_equivalence: float | None = None) -> Gain:  # fmt: skip
    q_eq = q if q_equivalence is None else q_equivalence
    return Gain(
        estimate=math.expm1(d),
        low=math.expm1(d - q * se),
        high=math.expm1(d + q * se),
        basis=basis,
        n_candidate=n_c,
        n_incumbent=n_i,
        equivalence_low=math.expm1(d - q_eq * se),
        equivalence_high=math.expm1(d + q_eq * se),
    )


def _spent(look: int, looks: int) -> float:
    """The share of a comparison's alpha spent at look k of at most `looks`: 1 / (k H_K),
    H_K the K-th harmonic number. The shares of looks 1..K sum to one; beyond K nothing
    is left (no verdict can change). Early looks keep enough to call large effects at
    once, late ones far more than a spending over an unbounded number of looks would
    (look 8 of 8: 0.046 of the alpha, against 0.0095 for 6 / (pi^2 k^2))."""
    if look > looks:
        return 0.0
    harmonic = math.fsum(1 / k for k in range(1, looks + 1))
    return 1 / (max(1, look) * harmonic)


def one_sided_level(confidence: float, comparisons: float, look: int = 1,
               looks: int = MAX_LOOKS) -> float:  # fmt: skip
    """The one-sided level of the k-th look: (1 - confidence) / comparisons, spent over at
    most `looks` looks (_spent); 1 past the last look (an infinite bound)."""
    spent = _spent(look, looks)
    return 1 - (1 - confidence) / max(1.0, comparisons) * spent


def bound_quantile(level: float, dof: float) -> float:
    return math.inf if level >= 1 else t_quantile(level, dof)


def judge_starts(
    model: StartModel,
    candidate: str,
    incumbent: str,
    counts: tuple[int, int],
    *,
    min_effect: float,
    confidence: float = 0.95,
    comparisons: float = 1,
    look: int = 1,
    looks: int = MAX_STARTS,
) -> Verdict:
    """Settings that need a restart, from the model of every start so far (look k of at
    most `looks`: a side's starts are bounded by MAX_STARTS)."""
    if candidate not in model.levels or incumbent not in model.levels:
        return Verdict(UNDECIDED, None, "no start measured")
    d, se = model.contrast(candidate, incumbent)
    q = bound_quantile(one_sided_level(confidence, comparisons, look, looks), model.dof)
    q_eq = bound_quantile(one_sided_level(confidence, 1, look, looks), model.dof)
    gain = _gain(d, se, q, "starts", *counts, q_equivalence=q_eq)
    drift = "" if model.drift is None else f", drift {math.expm1(model.drift):+.2%} per start"
    why = (
        f"{gain.estimate:+.1%} [{gain.low:+.1%}, {gain.high:+.1%}] over {counts[0]} and "
        f"{counts[1]} start(s), {model.describe_spread()}{drift}, look {look}"
    )
    return Verdict(classify(gain, min_effect), gain, why)


@dataclass(frozen=True)
class PairNoise:
    """The spread of one window pair's log ratio that a live comparison uses beside its own
    pairs: a prior, counted as `weight` degrees of freedom, and the squared deviations the
    search's other live comparisons on this machine showed (`pooled_ss` over
    `pooled_dof`). Without it a comparison's first pairs have almost no degrees of freedom,
    and even a 2x effect waits for many of them; with it the first pairs can decide a large
    effect, and the prior yields to what this machine's pairs show wherever they are wider."""

    prior: float = PAIR_SPREAD_PRIOR
    weight: float = PAIR_PRIOR_WEIGHT
    pooled_ss: float = 0.0
    pooled_dof: int = 0

    def spread(self, own_ss: float, own_dof: int) -> tuple[float, float, str]:
        """(sigma of a pair, its degrees of freedom, where it came from). The combined
        estimate, unless this comparison's own pairs or the pooled ones (two degrees of
        freedom or more) are wider: then the widest of them, with its own dof."""
        combined = (own_ss + self.pooled_ss + self.weight * self.prior**2) / max(
            1e-12, own_dof + self.pooled_dof + self.weight
        )
        choices = [(combined, own_dof + self.pooled_dof + self.weight, "combined")]
        if own_dof >= 2:
            choices.append((own_ss / own_dof, own_dof, "its own pairs"))
        if self.pooled_dof >= 2:
            choices.append((self.pooled_ss / self.pooled_dof, self.pooled_dof, "pooled pairs"))
        machine_ss, machine_dof = own_ss + self.pooled_ss, own_dof + self.pooled_dof
        if prior_contradicted(machine_ss, machine_dof, self.prior):
            # This machine's pairs are too narrow for the prior to be true: it yields.
            variance = max(machine_ss / machine_dof, SPREAD_FLOOR**2)
            choices[0] = (variance, machine_dof, "this machine's pairs")
        variance, dof, source = max(choices, key=lambda c: c[0])
        if dof <= 0:
            return math.inf, 1.0, "no spread known"
        return math.sqrt(variance), float(dof), source

    def describe(self, sigma: float, source: str) -> str:
        basis = f"the prior {self.prior:.1%} x {self.weight:g} dof, {self.pooled_dof} pooled dof"
        if source == "combined":
            return f"pair spread {sigma:.1%} ({basis})"
        return f"pair spread {sigma:.1%} ({source}, the widest; {basis})"


NO_PRIOR = PairNoise(prior=0.0, weight=0)


def log_pairs(candidate: Sequence[float], incumbent: Sequence[float]) -> list[float]:
    return [
        math.log(c) - math.log(i)
        for c, i in zip(candidate, incumbent, strict=False)
        if c > 0 and i > 0
    ]


def squared_deviations(pairs: Sequence[float]) -> tuple[float, int]:
    """(sum of squared deviations from the pairs' mean, degrees of freedom)."""
    if len(pairs) < 2:
        return 0.0, 0
    mean = math.fsum(pairs) / len(pairs)
    return math.fsum((x - mean) ** 2 for x in pairs), len(pairs) - 1


def judge_paired(
    candidate: Sequence[float],
    incumbent: Sequence[float],
    *,
    min_effect: float,
    confidence: float = 0.95,
    comparisons: float = 1,
    looks: int = MAX_LOOKS,
    look: int | None = None,
    noise: PairNoise = NO_PRIOR,
) -> Verdict:
    """Settings measured interleaved in one start: window i of each forms a pair. Looked at
    after 1, 2, 4, 8, ... pairs (look k: the first 2^(k-1) pairs, of a comparison that may
    take `looks` pairs), so a large effect is called on its first pairs and a small one
    keeps most of the alpha for its late looks; `look` numbers the look instead (of
    `looks` looks, every pair counted), for a test that looks only at planned points. The
    pair spread from the pairs themselves and `noise` (a prior and the search's other
    pairs)."""
    pairs = log_pairs(candidate, incumbent)
    if look is None and pairs:
        look = len(pairs).bit_length()  # 2^(look-1) <= pairs < 2^look
        pairs = pairs[: 2 ** (look - 1)]
        looks = max(1, looks).bit_length()
    own_ss, own_dof = squared_deviations(pairs)
    sigma, dof, source = noise.spread(own_ss, own_dof)
    if not pairs or not math.isfinite(sigma):
        return Verdict(UNDECIDED, None, f"{len(pairs)} paired window(s): no spread known yet")
    n = len(pairs)
    d = math.fsum(pairs) / n
    se = sigma / math.sqrt(n)
    q = bound_quantile(one_sided_level(confidence, comparisons, look, looks), dof)
    q_eq = bound_quantile(one_sided_level(confidence, 1, look, looks), dof)
    gain = _gain(d, se, q, "paired windows", n, n, q_equivalence=q_eq)
    kind = classify(gain, min_effect)
    spread = "" if noise is NO_PRIOR else f", {noise.describe(sigma, source)}"
    why = (
        f"{gain.estimate:+.1%} [{gain.low:+.1%}, {gain.high:+.1%}] over {n} paired window(s)"
        f"{spread}, look {look}"
    )
    return Verdict(kind, gain, why)


START_CANDIDATE, START_INCUMBENT, DONE = "start the candidate", "start the incumbent", "done"


def restart_look(starts: Sequence[StartRecord], candidate: str) -> int:
    """The k of a restart comparison's look: the candidate's starts. A comparison is looked
    at after each start of the candidate and never after one of the incumbent's (next_step),
    so every look has its own k."""
    return max(1, len({s.order for s in starts if s.setting == candidate}))


def next_step(
    starts: Sequence[StartRecord],
    candidate: str,
    incumbent: str,
    *,
    min_effect: float,
    confidence: float,
    comparisons: float,
    max_starts: int = MAX_STARTS,
    prior: float = PRIOR_START_SPREAD,
    prior_weight: int = PRIOR_WEIGHT,
    drift_term: bool = False,
) -> tuple[str, Verdict]:
    """What a comparison of two restart settings needs next, screen then confirm: its
    verdict stands once it is decided (a "better" here is the screen's; the winner's
    confirming start gates what is written); an undecided candidate whose interval still
    reaches past the minimum effect gets another start (the side with fewer starts first),
    up to `max_starts` a side; one that cannot reach it is done."""
    mine = [s for s in starts if s.setting == candidate]
    theirs = [s for s in starts if s.setting == incumbent]
    if not theirs:
        return START_INCUMBENT, Verdict(UNDECIDED, None, "the incumbent has no start")
    if not mine:
        return START_CANDIDATE, Verdict(UNDECIDED, None, "the candidate has no start")
    model = StartModel.fit(starts, prior, prior_weight, drift_term)
    verdict = judge_starts(
        model, candidate, incumbent, (len(mine), len(theirs)),
        min_effect=min_effect, confidence=confidence, comparisons=comparisons,
        look=restart_look(starts, candidate),
    )  # fmt: skip
    if max(s.order for s in theirs) > max(s.order for s in mine) and len(mine) < max_starts:
        # The incumbent's start was the last: no look here (the next is the candidate's).
        return START_CANDIDATE, Verdict(
            UNDECIDED,
            verdict.gain,
            verdict.why + " (not a look: the incumbent's start; the candidate's is next)",
        )
    if verdict.kind != UNDECIDED:
        return DONE, verdict
    if verdict.gain is not None and verdict.gain.high <= min_effect:
        return DONE, verdict  # its best case is no gain worth a restart
    if (
        verdict.gain is not None
        and min(len(mine), len(theirs)) >= FUTILE_AFTER
        and verdict.gain.estimate < min_effect
    ):
        # Futile: its estimate is below the bar after FUTILE_AFTER starts a side, and at a
        # start-to-start spread like the H200's, more starts would rarely lift its lower
        # bound past it. Stopping never promotes, so the error rate holds.
        return DONE, Verdict(
            UNDECIDED, verdict.gain,
            verdict.why + f"; no more starts: its estimate is under the minimum effect after "
            f"{FUTILE_AFTER} starts a side (futile)",
        )  # fmt: skip
    if len(mine) >= max_starts and len(theirs) >= max_starts:
        return DONE, verdict
    if len(theirs) < len(mine):
        return START_INCUMBENT, verdict
    return START_CANDIDATE, verdict


def clearly_behind(
    starts: Sequence[StartRecord],
    candidate: str,
    incumbent: str,
    look: int,
    *,
    confidence: float,
    comparisons: float,
    prior: float = PRIOR_START_SPREAD,
    prior_weight: int = PRIOR_WEIGHT,
) -> Verdict | None:
    """Within a start: the candidate's windows so far (its row in `starts`) are worse than
    the incumbent's starts, at the look's level; the start can stop. Never promotes."""
    counts = (
        sum(1 for s in starts if s.setting == candidate),
        sum(1 for s in starts if s.setting == incumbent),
    )
    if not all(counts):
        return None
    verdict = judge_starts(
        StartModel.fit(starts, prior, prior_weight), candidate, incumbent, counts,
        min_effect=0.0, confidence=confidence, comparisons=comparisons, look=look,
    )  # fmt: skip
    return verdict if verdict.kind == WORSE else None
