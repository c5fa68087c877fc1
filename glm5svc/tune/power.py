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

from glm5svc.tune.decision import FUTILE_AFTER, MAX_STARTS, bound_quantile, one_sided_level
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
    look = pairs.bit_length()  # judge_paired looks after 1, 2, 4, ... pairs
    used = 2 ** (look - 1)
    level = one_sided_level(confidence, comparisons, look, max(pairs, looks or pairs).bit_length())
    q = bound_quantile(level, used - 1 + PAIR_PRIOR_WEIGHT)
    return _power(effect, min_effect, pair_spread / math.sqrt(used), q)


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


def plan_power(
    *, live: bool, restart: bool, pairs: int, looks: int | None, pair_spread: float,
    start_spread: float, min_effect: float, confidence: float,
) -> tuple[str, ...]:  # fmt: skip
    """The plan's lines on what it can find, at the spreads the verdicts start from: a
    live effect in the first start's pairs, a restart one at FUTILE_AFTER and MAX_STARTS
    starts a side; the effect named is +10 %, or twice --min-effect where that is more."""
    effect = max(0.10, 2 * min_effect)
    lines = []
    if live:

        def live_share(e: float) -> float:
            return live_power(e, pairs=pairs, pair_spread=pair_spread, min_effect=min_effect,
                              confidence=confidence, looks=looks or pairs)  # fmt: skip

        half = smallest_effect(live_share)
        lines.append(
            f"a live +{effect:.0%} effect is called better {live_share(effect):.0%} of the time "
            f"in {pairs} pairs at a {pair_spread:.0%} pair spread; half the time from "
            + (f"+{half:.0%}" if half is not None else "no effect under 10x")
        )
    if restart:
        found = []
        for starts in (FUTILE_AFTER, MAX_STARTS):

            def restart_share(e: float, n: int = starts) -> float:
                return restart_power(e, starts=n, start_spread=start_spread,
                                     min_effect=min_effect, confidence=confidence)  # fmt: skip

            half = smallest_effect(restart_share)
            found.append(
                f"{restart_share(effect):.0%} with {starts} starts a side (half the time from "
                + (f"+{half:.0%})" if half is not None else "no effect under 10x)")
            )
        lines.append(
            f"a restart +{effect:.0%} effect at a {start_spread:.0%} start-to-start spread is "
            "called better " + ", ".join(found)
        )
    return tuple(lines)
