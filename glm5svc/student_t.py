"""Student's t quantiles without scipy: the tune's verdicts and the bench's regression gate
both build their intervals on them."""

from __future__ import annotations

import math
from statistics import NormalDist


def _t_inside(t: float, dof: int) -> float:
    """P(|T| < t) for Student's t with a whole number of degrees of freedom (closed form)."""
    theta = math.atan(t / math.sqrt(dof))
    c2, s = math.cos(theta) ** 2, math.sin(theta)
    total, term = 1.0, 1.0
    if dof % 2:
        for k in range(1, (dof - 1) // 2):
            term *= (2 * k) / (2 * k + 1) * c2
            total += term
        return 2 / math.pi * (theta + (s * math.cos(theta) * total if dof > 1 else 0.0))
    for k in range(1, dof // 2):
        term *= (2 * k - 1) / (2 * k) * c2
        total += term
    return s * total


def t_quantile(p: float, dof: float) -> float:
    """The p quantile (p > 0.5) of Student's t; fractional degrees of freedom round down
    (the wider, cautious side), beyond 300 the normal's."""
    if not 0.5 < p < 1:
        raise ValueError(f"p must be in (0.5, 1), got {p}")
    if not dof >= 1:
        return math.inf
    if dof > 300:
        return NormalDist().inv_cdf(p)
    nu, inside = int(dof), 2 * p - 1
    low, high = 0.0, 1.0
    while _t_inside(high, nu) < inside:
        high *= 2
    for _ in range(80):
        mid = (low + high) / 2
        low, high = (mid, high) if _t_inside(mid, nu) < inside else (low, mid)
    return high
