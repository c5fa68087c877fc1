"""What a tune can find before it runs: the chance that an effect is called better, and the
smallest effect found a given share of the time, for a live comparison (paired windows in
one start) and for a restart one (engine starts a side), at the spreads the verdicts use.

Normal approximations of decision.py's rules at their last planned look (the one-sided
level spent there, the bar `min_effect` on the lower bound, the t quantile of the
degrees of freedom the verdict would have), so the figures are what the plan can promise,
not what a lucky early look gives. bench/tune_recorded.py measures the real Search's
rates on recorded noise; these are the plan's arithmetic.
"""

from __future__ import annotations

import math
from statistics import NormalDist

from glm5svc.tune.decision import MAX_STARTS, bound_quantile, one_sided_level
from glm5svc.tune.start_model import PAIR_PRIOR_WEIGHT, PRIOR_WEIGHT

_NORMAL = NormalDist()


def _power(effect: float, min_effect: float, se: float, q: float) -> float:
    """P(lower bound > min_effect) for a true log gain log(1 + effect)."""
    if se <= 0 or not math.isfinite(q):
        return 0.0
    margin = math.log1p(effect) - math.log1p(min_effect) - q * se
    return _NORMAL.cdf(margin / se)


def live_power(effect: float, *, pairs: int, pair_spread: float, min_effect: float,
               confidence: float = 0.95, comparisons: float = 1,
               looks: int | None = None) -> float:  # fmt: skip
    """The chance a live value `effect` better is called better within `pairs` pairs."""
    if pairs < 1:
        return 0.0
    looks = max(pairs, looks or pairs)
    level = one_sided_level(confidence, comparisons, pairs, looks)
    q = bound_quantile(level, pairs - 1 + PAIR_PRIOR_WEIGHT)
    return _power(effect, min_effect, pair_spread / math.sqrt(pairs), q)


def restart_power(effect: float, *, starts: int, start_spread: float, min_effect: float,
                  confidence: float = 0.95, comparisons: float = 1) -> float:  # fmt: skip
    """The chance a restart setting `effect` better is called better with `starts` engine
    starts a side (each side's mean over its starts, the spread pooled with the prior)."""
    if starts < 1:
        return 0.0
    level = one_sided_level(confidence, comparisons, starts, MAX_STARTS)
    dof = 2 * (starts - 1) + PRIOR_WEIGHT
    se = start_spread * math.sqrt(2 / starts)
    return _power(effect, min_effect, se, bound_quantile(level, dof))


def smallest_effect(power_of, share: float = 0.5, ceiling: float = 10.0) -> float | None:
    """The smallest effect that `power_of(effect)` finds `share` of the time (bisection);
    None when even `ceiling` (10x) is not."""
    if power_of(ceiling) < share:
        return None
    low, high = 0.0, ceiling
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if power_of(middle) < share else (low, middle)
    return high
