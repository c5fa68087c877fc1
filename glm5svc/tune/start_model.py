"""The model of every engine start of a tune: log throughput per start = the setting's level
+ noise (+ drift), its spread counted by starts and shrunk towards the prior the H200
showed (glm5svc/tune/decision.py judges with it)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from glm5svc.tune.stats import prior_contradicted

# The prior on the start-to-start spread (relative), and the weight (pseudo-starts' degrees
# of freedom) it keeps while the search has measured few replicated starts. No narrower than
# the H200 testbed showed (docs/performance-tune.md, the precision scenario, 2026-12-04): at
# cap 1024 two starts' output tokens/s, each a mean over 50-80 s, were 14.9 % apart in
# relative standard deviation (the first start cold); at cap 192, 0.7 %; six starts of an
# earlier session spread 28.7-41.6k total tok/s. The weight counts the starts behind it
# conservatively (eight starts, four degrees of freedom).
PRIOR_START_SPREAD = 0.15
PRIOR_WEIGHT = 4
# The spread of one window pair's log ratio (two live values in one start) assumed until the
# machine's pairs show theirs: no narrower than the H100's 10 s windows at cap 1024, 14-26 % a
# window against 4-10 % at a cap under the concurrency (docs/performance-tune.md), counted
# as four degrees of freedom.
PAIR_SPREAD_PRIOR = 0.20
# Where a prior yields to the machine's own spread, that spread is never taken as narrower
# than this (identical figures are a counter's granularity, not a noiseless engine).
SPREAD_FLOOR = 0.005
PAIR_PRIOR_WEIGHT = 4


@dataclass(frozen=True)
class StartRecord:
    """One engine start of a setting: its mean steady-window throughput, in start order."""

    setting: str
    order: int  # the engine start
    throughput: float
    combo: str = ""  # the restart settings (what the start was); "" = the setting itself


@dataclass(frozen=True)
class StartModel:
    """Log throughput per start = the setting's level + drift x start order + noise.

    Fitted by least squares over every start of the search, so the spread from start to
    start is pooled over all replicated settings, and a slow drift of the machine (clocks,
    temperature, page cache) is estimated from settings started at different times instead
    of being credited to whichever setting came later (`drift_term`; off by default, as the
    search brackets each comparison with a new start of the incumbent instead, and a drift
    fitted on few starts costs more than it corrects). The noise variance is shrunk towards a
    stated prior (`prior` relative spread, `prior_weight` pseudo-starts) while few replicated
    starts are known, and never below what the starts themselves show."""

    levels: dict[str, float]
    drift: float | None  # per start, on the log scale; None while it cannot be estimated
    sigma: float
    dof: float
    covariance: dict[tuple[str, str], float]  # of the levels, per unit variance
    observed: float | None = None  # what the replicated starts alone show (None: none)
    replicated: int = 0  # degrees of freedom the starts give (starts - settings started)
    prior: float = PRIOR_START_SPREAD

    @classmethod
    def fit(
        cls,
        starts: Sequence[StartRecord],
        prior: float = PRIOR_START_SPREAD,
        prior_weight: int = PRIOR_WEIGHT,
        drift_term: bool = False,
    ) -> StartModel:
        names = sorted({s.setting for s in starts})
        rows = [s for s in starts if s.throughput > 0]
        y = np.array([math.log(s.throughput) for s in rows])
        base = np.array([[1.0 if s.setting == n else 0.0 for n in names] for s in rows])
        orders = np.array([float(s.order) for s in rows])
        design, has_drift = base, False
        if drift_term and len(rows) > len(names) and np.ptp(orders) > 0:
            with_drift = np.column_stack([base, orders - orders.mean()])
            if np.linalg.matrix_rank(with_drift) == len(names) + 1:
                design, has_drift = with_drift, True
        if np.linalg.matrix_rank(design) < design.shape[1]:
            design, has_drift = base, False
        coef, *_ = np.linalg.lstsq(design, y, rcond=None)
        residual = y - design @ coef
        # The rows of one start (its live values) share that start's effect: the spread is
        # counted by starts, one residual per start (its rows' mean), and a start's live
        # values are one replicate of its restart settings, not several.
        by_start: dict[int, list[float]] = {}
        for row, value in zip(rows, residual, strict=True):
            by_start.setdefault(row.order, []).append(float(value))
        combos = {s.combo or s.setting for s in rows}
        free = len(by_start) - len(combos) - (1 if has_drift else 0)
        rss = math.fsum((sum(v) / len(v)) ** 2 for v in by_start.values()) if free > 0 else 0.0
        free = max(0, free)
        variance = (rss + prior_weight * prior**2) / (free + prior_weight)
        dof = free + prior_weight
        if free >= 2 and (rss / free > variance or prior_contradicted(rss, free, prior)):
            # The starts spread wider than the prior says (the prior must not narrow them),
            # or so much narrower that the prior cannot be true on this machine.
            variance, dof = max(rss / free, SPREAD_FLOOR**2), free
        inverse = np.linalg.pinv(design.T @ design)
        covariance = {
            (a, b): float(inverse[i, j]) for i, a in enumerate(names) for j, b in enumerate(names)
        }
        return cls(
            levels={n: float(coef[i]) for i, n in enumerate(names)},
            drift=float(coef[-1]) if has_drift else None,
            sigma=math.sqrt(variance),
            dof=dof,
            covariance=covariance,
            observed=math.sqrt(rss / free) if free > 0 else None,
            replicated=free,
            prior=prior,
        )

    def describe_spread(self) -> str:
        """The spread the interval used, and where it came from."""
        if self.observed is None:
            return (
                f"start-to-start spread {self.sigma:.1%} (the prior: no setting started twice yet)"
            )
        return (
            f"start-to-start spread {self.sigma:.1%} (the starts' own {self.observed:.1%} "
            f"over {self.replicated} degree(s) of freedom, the prior {self.prior:.1%})"
        )

    def contrast(self, candidate: str, incumbent: str) -> tuple[float, float]:
        """(log gain, its standard error)."""
        c = self.covariance
        var = c[candidate, candidate] + c[incumbent, incumbent] - 2 * c[candidate, incumbent]
        return self.levels[candidate] - self.levels[incumbent], self.sigma * math.sqrt(max(var, 0))

    def to_dict(self) -> dict:
        return {
            "sigma": self.sigma, "dof": self.dof, "drift": self.drift,
            "observed": self.observed, "replicated": self.replicated, "prior": self.prior,
        }  # fmt: skip
