"""The confirmation of a better cap inside the start that found it.

A start measures every live cap interleaved, the engine started at the highest. When that
highest cap is better than the start's own and the start's restart settings are the
tune's start (the overlay would change the cap alone), the engine running is exactly the
overlay as written, with the start's cap reachable live beside it. So the start goes on:
fresh A B rounds of both, judged on their own (one comparison, at the minimum effect, its
alpha spent over its own looks from the first pair), with the pair spread the screening
rounds of this start showed. No second engine start, and no pair of the screening is
looked at again. The search moves the fresh rounds into confirming records
(Search._split_in_start_confirmation), outside every screening verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from glm5svc.tune.decision import (
    BETTER,
    PAIR_PRIOR_WEIGHT,
    PairNoise,
    Verdict,
    judge_paired,
    log_pairs,
    squared_deviations,
)
from glm5svc.tune.evidence import setting_key
from glm5svc.tune.trial import CONTINUE, STOP, RunFigures

MIN_ROUNDS = 8  # the fewest fresh rounds it may plan, whatever --max-repeats says


@dataclass
class InStartConfirmation:
    search: Any  # the Search: its settings, live knob, start and stop signal
    start: int  # the engine start (starts/<start>/)
    candidate: dict[str, Any]  # the overlay as written: the start's settings, its top cap
    value: int  # the start's cap (the overlay's)
    baseline: int  # the tune's start's cap, live beside it
    planned: int  # fresh rounds at most
    from_round: int | None = None  # the first fresh round, once begun
    noise: PairNoise = field(default_factory=PairNoise)
    verdict: Verdict | None = None
    finished: bool = False  # it ended by its own rule (decided, futile or all rounds)

    @classmethod
    def for_start(cls, search: Any, candidate: dict[str, Any],
                  live: tuple[int, ...]) -> InStartConfirmation | None:  # fmt: skip
        """The confirmation this start could make, or None where its engine is not the
        overlay as written (other restart settings than the start's, or no lower cap)."""
        knob = search.live.name if search.live is not None else None
        if knob is None or len(live) < 2:
            return None
        baseline = search.start.get(knob)
        top = max(live)
        if baseline is None or baseline not in live or baseline >= top:
            return None
        if search.combo_key(candidate) != search.combo_key(search.start):
            return None
        written = {**candidate, knob: top}
        earlier = search._in_start
        if earlier is not None and earlier.from_round is not None:
            if setting_key(earlier.candidate) == setting_key(written):
                return None  # one in-start confirmation an overlay: its verdict stands
        start = len({r.start for r in search.records if r.start is not None})
        planned = max(MIN_ROUNDS, search.settings.max_repeats)
        return cls(search, start, written, top, int(baseline), planned)

    def begin(self, runs: list[RunFigures], rounds: int) -> bool:
        """Called when the screening of this start is decided: True (go on) where its top
        cap was called better than the start's cap."""
        mine, theirs = self._pairs(runs, 0, rounds)
        over = self.search.runs_over_limits([r for r in runs if r.live_value == self.value])
        if not mine or over:
            return False
        verdict = self.search._judge_live(mine, theirs, setting_key(self.candidate))
        if verdict.kind != BETTER:
            return False
        ss, dof = squared_deviations(log_pairs(mine, theirs))
        pooled = self.search._pair_noise(setting_key(self.candidate))
        self.noise = PairNoise(
            pooled.prior, PAIR_PRIOR_WEIGHT, pooled.pooled_ss + ss, pooled.pooled_dof + dof
        )
        self.from_round = rounds
        return True

    def decide(self, runs: list[RunFigures]) -> str:
        rounds = max((r.round for r in runs), default=0) + 1
        self.verdict = self.judge(runs)
        if self.search.should_stop():
            return STOP  # cut: the confirmation then takes its own start
        gain = self.verdict.gain
        futile = gain is not None and gain.high <= self.search.settings.min_effect
        # Only `better` ends it early: a worse or equivalent look is not confirmed either,
        # but the fresh rounds go on while the gain is still in reach.
        if self.verdict.kind == BETTER or futile or rounds - self.from_round >= self.planned:
            self.finished = True
            return STOP
        return CONTINUE

    def judge(self, runs: list[RunFigures]) -> Verdict:
        mine, theirs = self._pairs(runs, self.from_round, None)
        settings = self.search.settings
        return judge_paired(
            mine, theirs, min_effect=settings.min_effect, confidence=settings.confidence,
            looks=self.planned, noise=self.noise,
        )  # fmt: skip

    def verdict_for(self, best: Any) -> Verdict | None:
        """Its verdict where it ended by its own rule on `best` (the overlay it measured, in
        the start it was found; anything but `better` is not confirmed): None where it has
        nothing to say (another best, or cut: the confirmation then takes its own start)."""
        if not self.finished or self.verdict is None or best is None:
            return None
        if best.start != self.start or setting_key(best.candidate) != setting_key(self.candidate):
            return None
        return self.verdict

    def _pairs(self, runs: list[RunFigures], first: int, end: int | None):
        by_round: dict[int, dict[int | None, float]] = {}
        for run in runs:
            if run.round >= first and (end is None or run.round < end):
                by_round.setdefault(run.round, {})[run.live_value] = run.throughput
        pairs = [r for _, r in sorted(by_round.items()) if self.value in r and self.baseline in r]
        return [r[self.value] for r in pairs], [r[self.baseline] for r in pairs]
