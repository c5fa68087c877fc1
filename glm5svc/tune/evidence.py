"""What the trials measured, as the verdicts read it: one record per setting and engine
start, each setting's mean per start (the start model's rows), the windows two settings
measured side by side in one start (paired), and the best's gain over the start.

The screening evidence is the screening starts' only: a confirming start's records (made
to test the overlay afresh) are never pooled into the start model, the paired windows or
the gain, so the confirmation stays a fresh test and the screen never reads it."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from glm5svc.tune.decision import StartModel, StartRecord, judge_paired, judge_starts
from glm5svc.tune.settings import SearchSettings
from glm5svc.tune.space import Value
from glm5svc.tune.stats import mean_interval
from glm5svc.tune.trial import RunFigures


@dataclass
class TrialRecord:
    """One setting as measured in one engine start. A start measures every value of the
    live knob (the running-request cap) interleaved, so it gives one record per value."""

    number: int
    candidate: dict[str, Value]
    status: str  # measured | failed | pruned | interrupted | refused
    outcome: dict[str, Any] = field(default_factory=dict)
    verdict: str = ""  # against the best at the time
    against: int | None = None  # that best's trial number
    difference: dict[str, float] | None = None  # the gain's estimate and bounds (relative)
    became_best: bool = False
    start: int | None = None  # the engine start (starts/<start>/), None: never started
    confirming: bool = False  # measured by the confirmation, outside the search's verdicts
    confirms: str | None = None  # a confirming record's: the setting_key of what it confirms

    @property
    def samples(self) -> list[float]:
        return [r["throughput"] for r in self.outcome.get("runs") or []]

    @property
    def runs(self) -> list[RunFigures]:
        return [RunFigures.from_dict(r) for r in self.outcome.get("runs") or []]

    @property
    def mean(self) -> float | None:
        samples = self.samples
        return sum(samples) / len(samples) if samples else None

    def interval(self, confidence: float):
        return mean_interval(self.samples, confidence) if self.samples else None

    def to_json(self) -> dict[str, Any]:
        return json.loads(json.dumps(self.__dict__, default=str))

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TrialRecord:
        return cls(**data)


def setting_key(candidate: dict[str, Value]) -> str:
    return json.dumps(candidate, sort_keys=True, default=str)


def saved_records(attrs: dict[str, Any]) -> list[dict[str, Any]]:
    """A study trial's records: a list per engine start, or (a study written before the
    live knob) one record per trial, each trial its own start."""
    if "records" in attrs:
        return json.loads(attrs["records"])
    if "record" in attrs:
        data = json.loads(attrs["record"])
        return [{**data, "start": data.get("start", data["number"])}]
    return []


def start_records_of(
    records: list[TrialRecord], combo_key: Callable[[dict[str, Value]], str] = setting_key
) -> list[StartRecord]:
    """Each measured setting's mean per engine start, for the start model; `combo_key`
    names the restart settings a start was (a start's live values share it). A
    confirmation's records stay out: they test the pick, they never make it."""
    return [
        StartRecord(setting_key(r.candidate), r.start, r.mean, combo_key(r.candidate))
        for r in records
        if r.status == "measured" and r.start is not None and r.mean and not r.confirming
    ]


def paired_windows(records: list[TrialRecord], candidate: dict[str, Value],
                   incumbent: dict[str, Value]) -> tuple[list[float], list[float]]:  # fmt: skip
    """Windows of the two settings in the same round of the same screening start."""
    wanted = (setting_key(candidate), setting_key(incumbent))
    by_round: dict[tuple[int, int], dict[str, float]] = {}
    for record in records:
        key = setting_key(record.candidate)
        if record.status != "measured" or record.start is None or key not in wanted:
            continue
        if record.confirming:  # a confirmation's fresh windows are no screening evidence
            continue
        for run in record.runs:
            by_round.setdefault((record.start, run.round), {})[key] = run.throughput
    pairs = [v for v in by_round.values() if len(v) == 2]
    return [p[wanted[0]] for p in pairs], [p[wanted[1]] for p in pairs]


def gain(
    records: list[TrialRecord],
    best: TrialRecord | None,
    start: dict[str, Value],
    settings: SearchSettings,
    same_start: bool,
    combo_key: Callable[[dict[str, Value]], str] = setting_key,
) -> dict[str, Any] | None:
    """The best over the start as a ratio with its interval, or None: from paired windows
    when the two ran in the same starts (only the live knob differs), else from the model
    of every start."""
    if best is None or setting_key(best.candidate) == setting_key(start):
        return None
    if same_start:
        mine, theirs = paired_windows(records, best.candidate, start)
        verdict = judge_paired(mine, theirs, min_effect=settings.min_effect,
                               confidence=settings.confidence)  # fmt: skip
    else:
        starts = start_records_of(records, combo_key)
        names = {s.setting for s in starts}
        if setting_key(best.candidate) not in names or setting_key(start) not in names:
            return None
        counts = tuple(
            sum(1 for s in starts if s.setting == setting_key(c)) for c in (best.candidate, start)
        )
        verdict = judge_starts(
            StartModel.fit(starts, settings.start_spread_prior), setting_key(best.candidate),
            setting_key(start), counts,
            min_effect=settings.min_effect, confidence=settings.confidence,
        )  # fmt: skip
    if verdict.gain is None:
        return None
    return {
        "mean": 1 + verdict.gain.estimate,
        "low": 1 + verdict.gain.low,
        "high": 1 + verdict.gain.high,
        "basis": verdict.gain.basis,
    }
