"""Deciding on measured differences: means, Student-t intervals, and when two differ.

Runs of one setting on a real engine spread by 10-25 % (a fresh server's first run
compiles kernels per shape; tuning-facts in docs/tuning.md), so a candidate is judged by
the interval of its mean, never by one run, and two candidates differ only when the
interval of the difference of their means (Welch) excludes zero.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

# Two-sided Student-t quantiles, by degrees of freedom, for the confidence levels offered.
# (No scipy on the target; these are the standard table values.)
_T_TABLE = {
    0.90: [6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812,
           1.796, 1.782, 1.771, 1.761, 1.753, 1.746, 1.740, 1.734, 1.729, 1.725,
           1.721, 1.717, 1.714, 1.711, 1.708, 1.706, 1.703, 1.701, 1.699, 1.697],
    0.95: [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
           2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
           2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042],
    0.99: [63.657, 9.925, 5.841, 4.604, 4.032, 3.707, 3.499, 3.355, 3.250, 3.169,
           3.106, 3.055, 3.012, 2.977, 2.947, 2.921, 2.898, 2.878, 2.861, 2.845,
           2.831, 2.819, 2.807, 2.797, 2.787, 2.779, 2.771, 2.763, 2.756, 2.750],
}  # fmt: skip
_T_LIMIT = {0.90: 1.645, 0.95: 1.960, 0.99: 2.576}
CONFIDENCE_LEVELS = tuple(sorted(_T_TABLE))


def t_quantile(confidence: float, dof: float) -> float:
    """The two-sided t quantile; fractional degrees of freedom (Welch) round down, which
    widens the interval (the cautious side)."""
    if confidence not in _T_TABLE:
        raise ValueError(f"confidence must be one of {CONFIDENCE_LEVELS}, got {confidence}")
    if not dof >= 1:
        return math.inf
    index = int(math.floor(dof))
    table = _T_TABLE[confidence]
    return table[index - 1] if index <= len(table) else _T_LIMIT[confidence]


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float
    high: float
    n: int

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    @property
    def relative_half_width(self) -> float:
        return self.half_width / abs(self.mean) if self.mean else math.inf

    def to_dict(self) -> dict:
        return {"mean": self.mean, "low": self.low, "high": self.high, "n": self.n}


def _mean_var(values: Sequence[float]) -> tuple[float, float]:
    n = len(values)
    mean = math.fsum(values) / n
    var = math.fsum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else math.inf
    return mean, var


def mean_interval(values: Sequence[float], confidence: float = 0.95) -> Interval:
    """The mean with its t interval; one value gives an unbounded interval."""
    values = [float(v) for v in values]
    if not values or not all(math.isfinite(v) for v in values):
        raise ValueError("need at least one finite value")
    mean, var = _mean_var(values)
    if len(values) < 2:
        return Interval(mean, -math.inf, math.inf, 1)
    half = t_quantile(confidence, len(values) - 1) * math.sqrt(var / len(values))
    return Interval(mean, mean - half, mean + half, len(values))


def difference_interval(
    a: Sequence[float], b: Sequence[float], confidence: float = 0.95
) -> Interval:
    """Welch's interval for mean(a) - mean(b)."""
    if len(a) < 2 or len(b) < 2:
        diff = math.fsum(a) / max(len(a), 1) - math.fsum(b) / max(len(b), 1)
        return Interval(diff, -math.inf, math.inf, min(len(a), len(b)))
    mean_a, var_a = _mean_var(a)
    mean_b, var_b = _mean_var(b)
    se_a, se_b = var_a / len(a), var_b / len(b)
    se = math.sqrt(se_a + se_b)
    diff = mean_a - mean_b
    if se == 0:
        return Interval(diff, diff, diff, min(len(a), len(b)))
    dof = (se_a + se_b) ** 2 / (se_a**2 / (len(a) - 1) + se_b**2 / (len(b) - 1))
    half = t_quantile(confidence, dof) * se
    return Interval(diff, diff - half, diff + half, min(len(a), len(b)))


BETTER, WORSE, UNDECIDED = "better", "worse", "no measurable difference"


def compare(
    candidate: Sequence[float], incumbent: Sequence[float], confidence: float = 0.95
) -> tuple[str, Interval]:
    """ "better" / "worse" when the interval of the difference excludes zero, else
    "no measurable difference"; the interval is relative to the incumbent's mean."""
    diff = difference_interval(candidate, incumbent, confidence)
    base = math.fsum(incumbent) / len(incumbent)
    relative = Interval(
        diff.mean / base if base else math.inf,
        diff.low / base if base else -math.inf,
        diff.high / base if base else math.inf,
        diff.n,
    )
    if diff.low > 0:
        return BETTER, relative
    if diff.high < 0:
        return WORSE, relative
    return UNDECIDED, relative


def ratio_interval(
    numerator: Sequence[float], denominator: Sequence[float], confidence: float = 0.95
) -> Interval:
    """mean(numerator) / mean(denominator) with a first-order (delta method) interval."""
    mean_n, var_n = _mean_var(numerator)
    mean_d, var_d = _mean_var(denominator)
    ratio = mean_n / mean_d
    if len(numerator) < 2 or len(denominator) < 2:
        return Interval(ratio, -math.inf, math.inf, min(len(numerator), len(denominator)))
    se_n, se_d = var_n / len(numerator), var_d / len(denominator)
    rel_se = math.sqrt(se_n / mean_n**2 + se_d / mean_d**2)
    dof = min(len(numerator), len(denominator)) - 1
    half = t_quantile(confidence, dof) * rel_se * ratio
    return Interval(ratio, ratio - half, ratio + half, min(len(numerator), len(denominator)))
