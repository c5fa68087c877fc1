"""Morning against evening: the one comparison a night makes, in one place.

Both sides are the same measurement (`glm5svc bench`'s steady windows on the tune's
workload, several windows each); the verdict comes from Welch's interval of the
difference of their means: "worse" only when the whole interval lies below zero (the
morning is worse beyond the noise of the windows), "better" when it lies above, else "no
measurable difference". The ratio morning / evening is reported with its interval.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from glm5svc.tune.stats import WORSE, Interval, compare, mean_interval, ratio_interval

CONFIDENCE = 0.95


@dataclass(frozen=True)
class Comparison:
    verdict: str  # stats.BETTER | stats.WORSE | stats.UNDECIDED
    evening: Interval
    morning: Interval
    ratio: Interval  # morning / evening
    confidence: float

    @property
    def worse(self) -> bool:
        return self.verdict == WORSE

    def text(self) -> str:
        return (
            f"morning {self.morning.mean:,.1f} tok/s ({_interval(self.morning)}) against evening "
            f"{self.evening.mean:,.1f} tok/s ({_interval(self.evening)}): "
            f"{self.ratio.mean:.3f}x ({self.confidence * 100:g} % interval "
            f"{self.ratio.low:.3f}-{self.ratio.high:.3f}): {self.verdict}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "confidence": self.confidence,
            "evening": self.evening.to_dict(),
            "morning": self.morning.to_dict(),
            "ratio": self.ratio.to_dict(),
            "text": self.text(),
        }


def _interval(interval: Interval) -> str:
    return f"{interval.low:,.1f}-{interval.high:,.1f}, {interval.n} windows"


def compare_mornings(
    evening: Sequence[float], morning: Sequence[float], confidence: float = CONFIDENCE
) -> Comparison:
    """The morning's windows judged against the evening's (each at least two)."""
    if len(evening) < 2 or len(morning) < 2:
        raise ValueError(
            f"a comparison needs two windows a side at least (evening {len(evening)}, "
            f"morning {len(morning)})"
        )
    verdict, _ = compare(morning, evening, confidence)
    return Comparison(
        verdict=verdict,
        evening=mean_interval(evening, confidence),
        morning=mean_interval(morning, confidence),
        ratio=ratio_interval(morning, evening, confidence),
        confidence=confidence,
    )
