"""Prometheus text (an engine's or a listener's /metrics) read through prometheus_client.

`parse_metrics(text)` gives every sample by the name it is exposed under (a counter's
`_total`, a histogram's `_bucket`/`_sum`/`_count`) with its labels; label values may hold
any character (`}`, `"`, `\\n` escaped), which a line regex gets wrong. Text that is not
the exposition format raises `MetricsTextError`, naming the first line that does not parse.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

LINE_SHOWN = 120  # characters of a bad line quoted in the error


class MetricsTextError(ValueError):
    """The text is not Prometheus' text exposition format."""


@dataclass(frozen=True)
class Sample:
    name: str
    labels: tuple[tuple[str, str], ...]  # sorted by label name
    value: float

    def has_labels(self, wanted: Mapping[str, str]) -> bool:
        mine = dict(self.labels)
        return all(mine.get(key) == value for key, value in wanted.items())


@dataclass(frozen=True)
class MetricSamples:
    samples: tuple[Sample, ...]

    def value(self, name: str, **labels: str) -> float | None:
        """The one sample named `name` whose labels are exactly `labels`, or None."""
        wanted = tuple(sorted(labels.items()))
        for sample in self.samples:
            if sample.name == name and sample.labels == wanted:
                return sample.value
        return None

    def matching(self, name: str, **labels: str) -> tuple[Sample, ...]:
        """Samples named `name` whose labels include `labels` (other labels may differ)."""
        return tuple(s for s in self.samples if s.name == name and s.has_labels(labels))

    def total(self, name: str, **labels: str) -> float | None:
        """The sum over matching samples (ranks, label sets); None when none matches."""
        found = self.matching(name, **labels)
        return sum(s.value for s in found) if found else None

    def largest(self, name: str, **labels: str) -> float | None:
        """The largest matching sample (for a share such as KV usage); None when none."""
        found = self.matching(name, **labels)
        return max(s.value for s in found) if found else None

    def names(self) -> frozenset[str]:
        return frozenset(s.name for s in self.samples)


def parse_metrics(text: str) -> MetricSamples:
    """Every sample of a Prometheus text exposition; MetricsTextError when it is not one."""
    try:
        families = list(text_string_to_metric_families(text))
    except Exception as exc:  # noqa: BLE001 - the parser raises several types on bad input
        raise MetricsTextError(_explain(text, exc)) from exc
    samples = tuple(
        Sample(s.name, tuple(sorted(s.labels.items())), float(s.value))
        for family in families
        for s in family.samples
    )
    return MetricSamples(samples)


def _explain(text: str, exc: Exception) -> str:
    """Which line fails: each sample line alone, in order (only on the error path)."""
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            list(text_string_to_metric_families(line + "\n"))
        except Exception:  # noqa: BLE001 - the same parser, line by line
            return (
                f"not Prometheus text format at line {number}: {line[:LINE_SHOWN]!r} "
                f"({type(exc).__name__}: {exc})"
            )
    return f"not Prometheus text format: {type(exc).__name__}: {exc}"
