"""A stand-in engine for glm5svc.tune.search.Search whose starts and windows are the real
engine's, resampled (testkit/recorded_noise.py), with each setting's true gain on top.

It has the Executor signature the Search calls for each engine start: the start draws its
level from the recorded starts, then measures rounds of one window per live value in
A B B A order (the value order reversed every other round, as glm5svc/tune/trial.py does),
each whole block of two rounds one stretch of a recorded series (Resampler.windows), and
asks the Search's decider after every whole block. Restart settings are
separate calls, so each gets its own start level. A start can be made to fail
(`fail_start`), as an engine that does not come up, or cut by a signal (`should_stop`: the
windows measured so far come back, the start "interrupted").
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from glm5svc.tune.trial import CONTINUE, PRUNE, RunFigures, TrialOutcome
from testkit.recorded_noise import OUTPUT, TOTAL, Resampler

REQUESTS_PER_WINDOW = 8  # what RunFigures counts as completed and requested: any positive
METRIC_OF = {"output_tokens": OUTPUT, "total_tokens": TOTAL}  # benchmark.objective's values


@dataclass
class RecordedEngine:
    resampler: Resampler
    truth: Callable[[dict[str, Any]], float]  # a setting's true gain (1.0: none)
    live_knob: str | None
    window_s: float
    settle_s: float = 0.0
    objective: str = "output_tokens"  # what a window's figure counts (benchmark.objective)
    warmup_s: float = 0.0  # virtual time a start spends before its first window
    fail_start: Callable[[int, dict[str, Any]], bool] = lambda number, candidate: False
    should_stop: Callable[[], bool] = lambda: False  # a signal: the start is cut, as trial.py does
    starts: int = 0
    windows: int = 0
    virtual_s: float = 0.0  # the measuring time the real engine would have spent
    levels: list[int] = field(default_factory=list)  # the recorded start each start drew

    def __call__(self, number, candidate, mapping, decide, deadline, live_values) -> TrialOutcome:
        self.starts += 1
        if self.fail_start(number, candidate):
            return TrialOutcome("failed", failure="the stand-in start failed", wall_s=1.0)
        level = self.resampler.start_level()
        self.levels.append(level.recorded_start)
        self.virtual_s += self.warmup_s
        values: tuple[int | None, ...] = tuple(live_values) or (None,)
        settle_s = self.settle_s if len(values) > 1 else 0.0
        runs: list[RunFigures] = []
        block: list[dict[str, float]] = []
        for round_index in itertools.count():
            order = values if round_index % 2 == 0 else tuple(reversed(values))
            if round_index % 2 == 0:  # an A B B A block: one stretch of a recorded series
                block = self.resampler.windows(level, 2 * len(values), settle_s)
            for value in order:
                if self.should_stop():
                    return TrialOutcome("interrupted", runs=runs, kv_pool_tokens=1000, wall_s=1.0)
                setting = dict(candidate)
                if value is not None and self.live_knob:
                    setting[self.live_knob] = value
                gain = self.truth(setting)
                rates = block.pop(0)
                self.windows += 1
                self.virtual_s += self.window_s + settle_s
                runs.append(
                    RunFigures(
                        throughput=rates[METRIC_OF[self.objective]] * gain,
                        total_throughput=rates[TOTAL] * gain,
                        output_throughput=rates[OUTPUT] * gain,
                        ttft_p99_ms=None,
                        itl_p99_ms=None,
                        ttft_median_ms=None,
                        power_share=None,
                        running_max=None,
                        queue_mean=None,
                        token_usage_max=None,
                        wall_s=self.window_s,
                        completed=REQUESTS_PER_WINDOW,
                        requested=REQUESTS_PER_WINDOW,
                        live_value=value,
                        round=round_index,
                    )
                )
            verdict = decide(runs)  # after every round, as glm5svc/tune/trial.py asks
            if verdict != CONTINUE:
                status = "pruned" if verdict == PRUNE else "measured"
                return TrialOutcome(status, runs=runs, kv_pool_tokens=1000, wall_s=1.0)
