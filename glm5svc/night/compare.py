"""Morning against evening: the one comparison a night makes, in one place.

Both sides are the same measurement: engine starts, each measured by `glm5svc bench`'s
steady windows on the tune's workload; a start's figure is the mean of its windows. Two
starts of one configuration differ by far more than two windows of one start (the H200's
recordings: 10.7 % from start to start at cap 1024, under 1 % from window to window), so
the starts are the replicates: the tune's start model (glm5svc/tune/start_model.py) is
fitted on them, its spread shrunk towards the one the tune measured (`Spread`), and the
morning's log gain over the evening comes with the standard error that spread gives.

The rule, with REGRESSION_MARGIN the regression the night must not keep:
- roll back when the morning is worse beyond the noise (its one-sided 1 - ROLLBACK_TEST
  upper bound below the evening), or when it is not shown within the margin (its one-sided
  1 - MISS_TEST lower bound under 1 - REGRESSION_MARGIN: the non-inferiority test);
- else keep the tuned configuration.
When the interval is narrow enough (standard error x the two quantiles within the margin),
the first test implies the second and both rates hold: an unchanged engine is rolled back in
at most FALSE_ROLLBACK of nights, a regression of the margin kept in at most MISS. When it is
not, the rates cannot both hold with the starts measured: the verdict says so and holds the
safe one, the miss (the evening is kept unless the morning is shown within the margin), and
`starts_needed` says how many starts a side would hold both. bench/night_verdict.py
measures the rates with this code.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from glm5svc.student_t import t_quantile
from glm5svc.tune.start_model import PRIOR_START_SPREAD, PRIOR_WEIGHT, StartModel, StartRecord
from glm5svc.tune.stats import BETTER, UNDECIDED, WORSE, Interval, mean_interval

CONFIDENCE = 0.95  # the ratio's printed interval (two-sided)
REGRESSION_MARGIN = 0.10  # a morning 10 % slower than the evening must not be kept
FALSE_ROLLBACK = 0.05  # an unchanged engine rolled back in at most this share of nights
MISS = 0.20  # a regression of the margin kept in at most this share of nights
# The two tests' one-sided levels, under those targets: room for a spread that is itself
# estimated from few starts. The rollback's is the old rule's (the morning's 95 % interval
# wholly below the evening).
ROLLBACK_TEST = 0.025
MISS_TEST = 0.15
NOT_WITHIN = "not shown within the margin"
MOST_STARTS = 20  # starts_needed looks no further


def share(value: float, digits: int = 0) -> str:
    """0.107 as "10.7 %" (digits=1)."""
    return f"{value * 100:.{digits}f} %"


@dataclass(frozen=True)
class Spread:
    """The start-to-start spread (relative) assumed before the night's own starts, with the
    degrees of freedom behind it: the tune's start model over its starts, or the prior."""

    sigma: float
    dof: float
    source: str

    @classmethod
    def prior(cls) -> Spread:
        return cls(PRIOR_START_SPREAD, PRIOR_WEIGHT, "the tune's prior (the H200 testbed)")

    @classmethod
    def of_tune(cls, summary: dict[str, Any]) -> Spread:
        """The spread the tune's starts showed, shrunk towards its prior as the tune's own
        verdicts were (its trials' per-start means; settings.start_spread_prior); the prior
        yields where the starts spread wider, or so much narrower that it cannot be true on
        this machine (the start model's rule)."""
        prior = float(
            ((summary.get("settings") or {}).get("start_spread_prior")) or PRIOR_START_SPREAD
        )
        starts = [
            StartRecord(str(row["setting"]), int(row["start"]), float(row["throughput_mean"]))
            for row in summary.get("trials") or []
            if row.get("status") == "measured"
            and row.get("start") is not None
            and row.get("throughput_mean")
        ]
        if not starts:
            return cls(
                prior, PRIOR_WEIGHT, f"the tune's prior {share(prior, 1)} (no start measured)"
            )
        model = StartModel.fit(starts, prior=prior)
        if model.observed is None:
            source = "the tune's prior (its starts left no degree of freedom of their own)"
        else:
            yields = model.dof == model.replicated  # the prior's weight dropped
            source = (
                f"the tune's starts ({share(model.observed, 1)} over {model.replicated} degree(s) "
                + (f"of freedom; its prior {share(prior, 1)} yields to them)" if yields
                   else f"of freedom, with its prior {share(prior, 1)})")
            )  # fmt: skip
        return cls(model.sigma, model.dof, source)

    def to_dict(self) -> dict[str, Any]:
        return {"sigma": self.sigma, "dof": self.dof, "source": self.source}


@functools.lru_cache(maxsize=256)
def quantiles(dof: float) -> tuple[float, float]:
    """The one-sided quantiles of the two tests: (false rollback's, miss's)."""
    return t_quantile(1 - ROLLBACK_TEST, dof), t_quantile(1 - MISS_TEST, dof)


def margin_log(margin: float = REGRESSION_MARGIN) -> float:
    return -math.log(1 - margin)


def holds_rates(se: float, dof: float, margin: float = REGRESSION_MARGIN) -> bool:
    """Both rates hold at this standard error (of the log gain) and degrees of freedom."""
    t_false, t_miss = quantiles(dof)
    return se * (t_false + t_miss) <= margin_log(margin)


def planned(spread: Spread, starts: int) -> tuple[float, float]:
    """(standard error, degrees of freedom) of a night with `starts` starts a side, at the
    spread assumed: the night's own replicated starts add their degrees of freedom."""
    return spread.sigma * math.sqrt(2 / starts), spread.dof + 2 * (starts - 1)


def starts_needed(spread: Spread, margin: float = REGRESSION_MARGIN) -> int | None:
    """The fewest starts a side that hold both rates at this spread (None: more than
    MOST_STARTS)."""
    for starts in range(1, MOST_STARTS + 1):
        if holds_rates(*planned(spread, starts), margin):
            return starts
    return None


@dataclass(frozen=True)
class Comparison:
    verdict: str  # stats.BETTER | stats.WORSE | stats.UNDECIDED | NOT_WITHIN
    rollback: bool
    holds: bool  # the two rates hold at this night's interval
    evening: Interval  # over every window of the side (shown; the verdict uses the starts)
    morning: Interval
    ratio: Interval  # morning / evening, from the starts, CONFIDENCE two-sided
    gain: float  # log(morning / evening), the model's
    se: float
    dof: float
    starts: tuple[int, int]  # evening's, morning's
    spread: Spread
    fitted_sigma: float  # the spread the model used: the assumed one and the night's starts
    needed: int | None  # starts a side that would hold both rates at the assumed spread
    margin: float
    confidence: float

    @property
    def worse(self) -> bool:
        """The evening's configuration goes back."""
        return self.rollback

    def capability(self) -> str:
        margin = share(self.margin)
        if self.holds:
            return (
                f"this interval holds both rates (an unchanged engine rolled back in at most "
                f"{share(FALSE_ROLLBACK)} of nights, a {margin} regression kept in at most "
                f"{share(MISS)})"
            )
        more = (
            f"{self.needed} starts a side would"
            if self.needed
            else (f"not even {MOST_STARTS} starts a side would")
        )
        return (
            f"this interval cannot hold both rates ({more}): the safe side, the evening unless "
            f"the morning is shown within {margin}"
        )

    def text(self) -> str:
        decision = "roll back" if self.rollback else "keep"
        return (
            f"morning {self.morning.mean:,.1f} tok/s ({self.starts[1]} start(s)) against "
            f"evening {self.evening.mean:,.1f} tok/s ({self.starts[0]} start(s)): "
            f"{self.ratio.mean:.3f}x ({self.confidence * 100:g} % interval "
            f"{self.ratio.low:.3f}-{self.ratio.high:.3f}, start-to-start spread "
            f"{share(self.fitted_sigma, 1)}, assumed {share(self.spread.sigma, 1)} from "
            f"{self.spread.source}): {self.verdict}: {decision}; {self.capability()}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "rollback": self.rollback,
            "holds_rates": self.holds,
            "confidence": self.confidence,
            "evening": self.evening.to_dict(),
            "morning": self.morning.to_dict(),
            "ratio": self.ratio.to_dict(),
            "gain_log": self.gain,
            "se_log": self.se,
            "dof": self.dof,
            "starts": list(self.starts),
            "spread": self.spread.to_dict(),
            "fitted_spread": self.fitted_sigma,
            "starts_needed": self.needed,
            "margin": self.margin,
            "text": self.text(),
        }


def compare_mornings(
    evening: Sequence[Sequence[float]],
    morning: Sequence[Sequence[float]],
    spread: Spread | None = None,
    margin: float = REGRESSION_MARGIN,
    confidence: float = CONFIDENCE,
) -> Comparison:
    """The morning's starts judged against the evening's: each side a list of starts, each
    start its windows' throughputs (one start a side at least, two windows a start)."""
    spread = spread or Spread.prior()
    sides = {"evening": [list(map(float, s)) for s in evening],
             "morning": [list(map(float, s)) for s in morning]}  # fmt: skip
    for side, starts in sides.items():
        if not starts or any(len(s) < 2 for s in starts):
            raise ValueError(
                f"a comparison needs a start a side with two windows at least ({side}: "
                f"{[len(s) for s in starts]} windows)"
            )
        if any(not all(math.isfinite(v) and v > 0 for v in s) for s in starts):
            raise ValueError(f"{side}: a window's throughput is not a positive number")
    records, order = [], 0
    for side, starts in sides.items():
        for windows in starts:
            records.append(StartRecord(side, order, sum(windows) / len(windows)))
            order += 1
    model = StartModel.fit(records, prior=spread.sigma, prior_weight=spread.dof)
    gain, se = model.contrast("morning", "evening")
    t_false, t_miss = quantiles(model.dof)
    worse = gain + t_false * se < 0
    within = gain - t_miss * se > -margin_log(margin)
    if worse:
        verdict = WORSE
    elif not within:
        verdict = NOT_WITHIN
    elif gain - t_false * se > 0:
        verdict = BETTER
    else:
        verdict = UNDECIDED
    half = t_quantile((1 + confidence) / 2, model.dof) * se
    return Comparison(
        verdict=verdict,
        rollback=worse or not within,
        holds=holds_rates(se, model.dof, margin),
        evening=mean_interval([v for s in sides["evening"] for v in s], confidence),
        morning=mean_interval([v for s in sides["morning"] for v in s], confidence),
        ratio=Interval(
            math.exp(gain),
            math.exp(gain - half),
            math.exp(gain + half),
            min(len(evening), len(morning)),
        ),  # fmt: skip
        gain=gain,
        se=se,
        dof=model.dof,
        starts=(len(evening), len(morning)),
        spread=spread,
        fitted_sigma=model.sigma,
        needed=starts_needed(spread, margin),
        margin=margin,
        confidence=confidence,
    )
