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
from statistics import NormalDist

from glm5svc.student_t import t_quantile as student_t_quantile

CONFIDENCE_LEVELS = (0.90, 0.95, 0.99)


def t_quantile(confidence: float, dof: float) -> float:
    """The two-sided t quantile; fractional degrees of freedom (Welch) round down, which
    widens the interval (the cautious side)."""
    if confidence not in CONFIDENCE_LEVELS:
        raise ValueError(f"confidence must be one of {CONFIDENCE_LEVELS}, got {confidence}")
    return student_t_quantile((1 + confidence) / 2, dof)


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


def chi2_quantile(p: float, dof: float) -> float:
    """The p quantile of chi-square with `dof` degrees of freedom (Wilson-Hilferty: within
    about 1 % from three degrees of freedom, a few percent at two)."""
    z = NormalDist().inv_cdf(p)
    k = max(dof, 1e-9)
    return k * max(0.0, 1 - 2 / (9 * k) + z * math.sqrt(2 / (9 * k))) ** 3


def prior_contradicted(ss: float, dof: float, prior: float, level: float = 0.05) -> bool:
    """True when the machine's own squared deviations (`ss` over `dof`) are too narrow for
    the prior spread to be true (one-sided at `level`): the prior then yields to them, so a
    verdict uses the spread measured on the machine in front of it."""
    if dof < 2 or prior <= 0:
        return False
    return ss / prior**2 < chi2_quantile(level, dof)
