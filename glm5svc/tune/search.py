"""The search: which candidate next, what a trial measured, and which setting is best.

Optuna keeps the trial store (SQLite in the run directory, so a stopped run resumes) and
proposes candidates once the first pass is done; the first pass changes one knob at a
time from the best setting so far, in the space's order, as the reference deployment's
hand search did (few trials: each one restarts a server that loads the weights).
A candidate replaces the best only when the interval of the difference of their mean
throughputs excludes zero (glm5svc/tune/stats.py); otherwise "no measurable difference".

Longer than 400 lines: the proposal order, the per-run decision, the verdict and the
resume replay read and write the same records and stay together.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
import yaml
from optuna.distributions import CategoricalDistribution
from optuna.pruners import BasePruner
from optuna.trial import TrialState

from glm5svc.bench.plan import BenchPlan, plan_from_config
from glm5svc.tune.settings import SearchSettings
from glm5svc.tune.space import Space, Value, apply_candidate, overlay_of
from glm5svc.tune.stats import BETTER, UNDECIDED, WORSE, compare, mean_interval, ratio_interval
from glm5svc.tune.trial import CONTINUE, PRUNE, STOP, RunFigures, TrialOutcome

STUDY_NAME = "glm5svc-tune"
KV_POOL_TOLERANCE = 0.01  # pools within 1 % are "equal"
MAX_DUPLICATE_PROPOSALS = 5  # the sampler keeps proposing tried settings: the space is done
NOT_COMPARABLE = "not comparable"
INFEASIBLE = "over the latency limits"


@dataclass(frozen=True)
class Workload:
    concurrency: int
    input_len: int
    output_len: int
    num_prompts: int
    warmup_prompts: int

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class TrialRecord:
    number: int
    candidate: dict[str, Value]
    status: str  # measured | failed | pruned | interrupted | refused
    outcome: dict[str, Any] = field(default_factory=dict)
    verdict: str = ""  # against the best at the time
    against: int | None = None  # that best's trial number
    difference: dict[str, float] | None = None  # relative interval of the difference
    became_best: bool = False

    @property
    def samples(self) -> list[float]:
        return [r["throughput"] for r in self.outcome.get("runs") or []]

    @property
    def runs(self) -> list[RunFigures]:
        return [RunFigures.from_dict(r) for r in self.outcome.get("runs") or []]

    def interval(self, confidence: float):
        return mean_interval(self.samples, confidence) if self.samples else None

    def to_attrs(self) -> dict[str, Any]:
        return {
            "record": json.dumps(
                {
                    "number": self.number,
                    "candidate": self.candidate,
                    "status": self.status,
                    "outcome": self.outcome,
                    "verdict": self.verdict,
                    "against": self.against,
                    "difference": self.difference,
                    "became_best": self.became_best,
                },
                default=str,
            )
        }

    @classmethod
    def from_attrs(cls, attrs: dict[str, Any]) -> TrialRecord | None:
        raw = attrs.get("record")
        if not raw:
            return None
        data = json.loads(raw)
        return cls(**data)


class _BelowBestPruner(BasePruner):
    """A candidate whose first measured run is far below the best's mean is hopeless:
    measuring it again would spend minutes on a setting that cannot win."""

    def __init__(self, below: float):
        self.below = below

    def prune(self, study, trial) -> bool:
        best = study.user_attrs.get("best_mean")
        values = trial.intermediate_values
        if not best or not values:
            return False
        return values[min(values)] < self.below * best


# (event, data): "trial-start", "trial-run", "trial-end", "done"
Progress = Callable[[str, dict[str, Any]], None]
# (number, candidate, trial mapping, decide, deadline) -> TrialOutcome
Executor = Callable[[int, dict[str, Value], dict[str, Any], Callable, float], TrialOutcome]


class Search:
    def __init__(
        self,
        space: Space,
        base_mapping: dict[str, Any],
        start: dict[str, Value],
        settings: SearchSettings,
        run_dir: Path,
        executor: Executor,
        render: Callable[[dict[str, Any]], str | None] = lambda mapping: None,
        on_progress: Progress = lambda event, data: None,
        should_stop: Callable[[], bool] = lambda: False,
    ):
        self.space = space
        self.base_mapping = base_mapping
        self.start = dict(start)
        self.settings = settings
        self.run_dir = Path(run_dir)
        self.executor = executor
        self.render = render  # why the plan refuses a trial mapping, or None
        self.on_progress = on_progress
        self.should_stop = should_stop
        self.records: list[TrialRecord] = []
        self.best: TrialRecord | None = None
        self.started = time.monotonic()
        self.deadline = self.started + settings.budget_s
        self.stopped_by: str | None = None
        optuna.logging.set_verbosity(logging.WARNING)
        self.study = optuna.create_study(
            storage=f"sqlite:///{self.run_dir / 'study.db'}",
            study_name=STUDY_NAME,
            direction="maximize",
            sampler=optuna.samplers.TPESampler(seed=settings.seed),
            pruner=_BelowBestPruner(settings.prune_below),
            load_if_exists=True,
        )
        self.distributions = {k.name: CategoricalDistribution(list(k.values)) for k in space.knobs}

    # ----- resume ------------------------------------------------------------------

    def replay(self) -> int:
        """Records of an earlier run of this study; trials it left running count as
        interrupted. Returns how many were found."""
        for frozen in self.study.get_trials(deepcopy=False):
            if frozen.state == TrialState.RUNNING:
                self.study.tell(frozen.number, state=TrialState.FAIL)
                self.study.set_user_attr(f"interrupted_{frozen.number}", True)
                continue
            record = TrialRecord.from_attrs(frozen.user_attrs)
            if record is None:
                continue
            self.records.append(record)
            if record.became_best:
                self.best = record
        self._publish_best()
        return len(self.records)

    # ----- the loop ----------------------------------------------------------------

    def run(self) -> list[TrialRecord]:
        duplicates = 0
        for proposal in self._proposals():
            if self._out_of_time_or_trials():
                if proposal is not None and proposal[1] is not None:
                    self.study.tell(proposal[1], state=TrialState.FAIL)  # asked, never run
                break
            if proposal is None:
                duplicates += 1
                if duplicates >= MAX_DUPLICATE_PROPOSALS:
                    self.stopped_by = "the sampler proposes only settings already measured"
                    break
                continue
            duplicates = 0
            self._one_trial(*proposal)
            if self.should_stop():
                self.stopped_by = "stopped by a signal"
                break
        else:
            self.stopped_by = self.stopped_by or "every proposal measured"
        self.on_progress("done", {"stopped_by": self.stopped_by})
        return self.records

    def _out_of_time_or_trials(self) -> bool:
        if self.should_stop():
            self.stopped_by = "stopped by a signal"
            return True
        limit = self.settings.max_trials
        if limit is not None and len(self._run_records()) >= limit:
            self.stopped_by = f"--max-trials {limit} reached"
            return True
        if self.time_left() <= self._expected_trial_s() * 0.5:
            self.stopped_by = "the time budget is spent"
            return True
        return False

    def _run_records(self) -> list[TrialRecord]:
        return [r for r in self.records if r.status != "refused"]

    def time_left(self) -> float:
        return self.deadline - time.monotonic()

    def _expected_trial_s(self) -> float:
        walls = [r.outcome.get("wall_s") or 0 for r in self.records if r.status == "measured"]
        return sum(walls) / len(walls) if walls else 0.0

    def planned_left(self) -> int:
        """First-pass candidates not yet measured, from the best so far."""
        base = self.best.candidate if self.best else self.start
        seen = {_key(r.candidate) for r in self.records}
        left = sum(
            1
            for knob in self.space.knobs
            for value in knob.values
            if _key({**base, knob.name: value}) not in seen
        )
        if self.settings.max_trials is not None:
            left = min(left, max(0, self.settings.max_trials - len(self._run_records())))
        return left

    def eta_s(self) -> float | None:
        per_trial = self._expected_trial_s()
        if not per_trial:
            return None
        return min(self.planned_left() * per_trial, max(0.0, self.time_left()))

    def _proposals(self) -> Iterator[tuple[dict[str, Value], Any] | None]:
        """The start first, then one knob at a time from the best so far, then Optuna's."""
        seen = {_key(r.candidate) for r in self.records}
        if _key(self.start) not in seen:
            seen.add(_key(self.start))
            yield dict(self.start), None
        progress = True
        while progress:  # another pass while the best moved during the last one
            progress = False
            best_at_start = self.best.number if self.best else None
            for knob in self.space.knobs:
                for value in knob.values:
                    base = self.best.candidate if self.best else self.start
                    candidate = {**base, knob.name: value}
                    if _key(candidate) in seen:
                        continue
                    seen.add(_key(candidate))
                    yield candidate, None
            progress = (self.best.number if self.best else None) != best_at_start
        while True:
            trial = self.study.ask(self.distributions)
            candidate = dict(trial.params)
            if _key(candidate) in seen:
                self.study.tell(trial, state=TrialState.FAIL)  # proposed again: not run
                yield None
                continue
            seen.add(_key(candidate))
            yield candidate, trial

    def _one_trial(self, candidate: dict[str, Value], trial=None) -> None:
        if trial is None:
            self.study.enqueue_trial(candidate)
            trial = self.study.ask(self.distributions)
        number = len(self.records)
        mapping = apply_candidate(self.base_mapping, candidate)
        record = TrialRecord(number, candidate, "measured")
        refusal = self.render(mapping)
        self.on_progress("trial-start", {"number": number, "candidate": candidate})
        if refusal:
            record.status, record.verdict = "refused", f"refused by the launch plan: {refusal}"
            self._finish(trial, record, None)
            return
        deadline = min(time.monotonic() + self.settings.trial_timeout_s, self.deadline)
        outcome = self.executor(number, candidate, mapping, self._decider(trial, number), deadline)
        record.status = outcome.status
        record.outcome = outcome.to_dict()
        self._judge(record)
        self._finish(trial, record, outcome)

    def _decider(self, trial, number: int) -> Callable[[list[RunFigures]], str]:
        settings = self.settings

        def decide(runs: list[RunFigures]) -> str:
            samples = [r.throughput for r in runs]
            self.on_progress("trial-run", {"number": number, "samples": samples})
            if len(samples) == 1 and self.best is not None:
                trial.report(samples[0], 0)
                if trial.should_prune():
                    return PRUNE
            if self.should_stop():
                return STOP
            if len(samples) < settings.min_repeats:
                return CONTINUE
            if len(samples) >= settings.max_repeats:
                return STOP
            if self.best is None:
                interval = mean_interval(samples, settings.confidence)
                tight = interval.relative_half_width <= settings.target_half_width
                return STOP if tight else CONTINUE
            verdict, _ = compare(samples, self.best.samples, settings.confidence)
            return CONTINUE if verdict == UNDECIDED else STOP

        return decide

    # ----- verdicts ----------------------------------------------------------------

    def _judge(self, record: TrialRecord) -> None:
        if record.status == "pruned":
            best = self.best.interval(self.settings.confidence) if self.best else None
            record.verdict = (
                f"pruned: its first run was under {self.settings.prune_below:.0%} of the best's "
                f"mean ({best.mean:,.0f} tok/s)"
                if best
                else "pruned"
            )
            record.against = self.best.number if self.best else None
            return
        if record.status != "measured" or len(record.samples) < 1:
            record.verdict = record.outcome.get("failure") or record.status
            return
        infeasible = self._over_limits(record)
        if self.best is None:
            record.verdict = "the start" + (f" ({infeasible})" if infeasible else "")
            self._make_best(record)
            return
        record.against = self.best.number
        if len(record.samples) < 2 or len(self.best.samples) < 2:
            record.verdict = UNDECIDED + " (too few runs for an interval)"
            return
        kv_note = self._kv_mismatch(record, self.best)
        verdict, relative = compare(record.samples, self.best.samples, self.settings.confidence)
        record.difference = relative.to_dict()
        if kv_note:
            record.verdict = f"{NOT_COMPARABLE}: {kv_note}"
        elif infeasible:
            record.verdict = f"{INFEASIBLE}: {infeasible}"
        elif verdict == BETTER or self._over_limits(self.best):
            record.verdict = BETTER if verdict == BETTER else "within the limits (the best is not)"
            self._make_best(record)
        else:
            record.verdict = WORSE if verdict == WORSE else UNDECIDED

    def _make_best(self, record: TrialRecord) -> None:
        record.became_best = True
        self.best = record
        self._publish_best()

    def _publish_best(self) -> None:
        if self.best and self.best.samples:
            mean = sum(self.best.samples) / len(self.best.samples)
            self.study.set_user_attr("best_mean", mean)
            self.study.set_user_attr("best_number", self.best.number)

    def _over_limits(self, record: TrialRecord) -> str | None:
        problems = []
        for name, limit in (
            ("ttft_p99_ms", self.settings.ttft_p99_ms),
            ("itl_p99_ms", self.settings.itl_p99_ms),
        ):
            values = [getattr(r, name) for r in record.runs if getattr(r, name) is not None]
            if limit is not None and values and sum(values) / len(values) > limit:
                label = name.replace("_ms", "").replace("_", " ").upper().replace("P99", "p99")
                problems.append(f"{label} {sum(values) / len(values):,.0f} ms > {limit:g} ms")
        return "; ".join(problems) or None

    def _kv_mismatch(self, record: TrialRecord, best: TrialRecord) -> str | None:
        """Pools that should be equal (no knob that sizes them changed) and are not: another
        process held GPU memory, and the two cannot be compared."""
        changed = [k for k in overlay_of(record.candidate, best.candidate)]
        if any(self.space.knob(name).kv_pool for name in changed if _in_space(self.space, name)):
            return None
        mine, theirs = record.outcome.get("kv_pool_tokens"), best.outcome.get("kv_pool_tokens")
        if not mine or not theirs:
            return None
        if abs(mine - theirs) <= KV_POOL_TOLERANCE * max(mine, theirs):
            return None
        return (
            f"KV pool {mine:,} tokens against the best's {theirs:,} with no setting that sizes "
            "it changed (did another process hold GPU memory?)"
        )

    def _finish(self, trial, record: TrialRecord, outcome: TrialOutcome | None) -> None:
        for key, value in record.to_attrs().items():
            trial.set_user_attr(key, value)
        if record.status == "measured" and record.samples:
            self.study.tell(trial, sum(record.samples) / len(record.samples))
        elif record.status == "pruned":
            self.study.tell(trial, state=TrialState.PRUNED)
        else:
            self.study.tell(trial, state=TrialState.FAIL)
        self.records.append(record)
        (self.run_dir / "trials").mkdir(parents=True, exist_ok=True)
        with open(self.run_dir / "trials" / f"{record.number:03d}.json", "w") as handle:
            json.dump(json.loads(record.to_attrs()["record"]), handle, indent=2)
        self.on_progress("trial-end", {"record": record})


def _key(candidate: dict[str, Value]) -> str:
    return json.dumps(candidate, sort_keys=True, default=str)


def _in_space(space: Space, name: str) -> bool:
    return any(k.name == name for k in space.knobs)


def bench_plan_for(config, workload: Workload) -> BenchPlan:
    """One level at the target concurrency, with the workload's lengths and prompts."""
    return plan_from_config(
        config,
        ladder=[workload.concurrency],
        input_len=workload.input_len,
        output_len=workload.output_len,
        num_prompts=workload.num_prompts,
    )


def describe_candidate(candidate: dict[str, Value], start: dict[str, Value]) -> str:
    changed = overlay_of(candidate, start)
    if not changed:
        return "(the start)"
    return ", ".join(f"{_short(k)}={_shown(v)}" for k, v in changed.items())


def _short(name: str) -> str:
    return name.split(".", 1)[1] if name.startswith("tuning.") else name


def _shown(value: Value) -> str:
    if value is None:
        return "auto"
    if isinstance(value, bool):
        return "on" if value else "off"
    return yaml.safe_dump(value).strip().removesuffix("\n...")


def gain(best: TrialRecord | None, start: TrialRecord | None, confidence: float):
    """Best over start as a ratio with its interval, or None."""
    if not best or not start or len(best.samples) < 2 or len(start.samples) < 2:
        return None
    return ratio_interval(best.samples, start.samples, confidence)
