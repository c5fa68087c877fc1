"""The search: which candidate next, what a trial measured, and which setting is best.

Optuna keeps the trial store (SQLite in the run directory, so a stopped run resumes) and
proposes candidates once the first pass is done; the first pass changes one knob at a
time from the best setting so far, in the space's order, as the reference deployment's
hand search did (few trials: each one restarts a server that loads the weights).
Each engine start is one combination of the restart knobs and measures every value of
the live knob; the verdicts (glm5svc/tune/decision.py) judge restart settings across
starts and live ones by paired windows, and ask for the starts a comparison needs.

Longer than 400 lines: the proposal order, the starts' decisions, the verdicts, the
confirmation and the resume replay read and write the same records and stay together.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import yaml
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from glm5svc.bench.load import LoadShape
from glm5svc.bench.plan import BenchPlan, plan_from_config
from glm5svc.tune.decision import (
    BETTER,
    DONE,
    MAX_STARTS,
    PAIR_PRIOR_WEIGHT,
    PAIRS_PER_LOOK,
    START_CANDIDATE,
    START_INCUMBENT,
    UNDECIDED,
    WORSE,
    PairNoise,
    StartModel,
    StartRecord,
    Verdict,
    clearly_behind,
    judge_paired,
    judge_starts,
    log_pairs,
    next_step,
    squared_deviations,
)
from glm5svc.tune.estimate import CONFIRMATION_STARTS
from glm5svc.tune.evidence import (
    TrialRecord,
    paired_windows,
    saved_records,
    start_records_of,
)
from glm5svc.tune.evidence import setting_key as _key
from glm5svc.tune.in_start import InStartConfirmation
from glm5svc.tune.settings import SearchSettings
from glm5svc.tune.space import Space, Value, apply_candidate, overlay_of
from glm5svc.tune.trial import CONTINUE, PRUNE, STOP, RunFigures, TrialOutcome

STUDY_NAME = "glm5svc-tune"
KV_POOL_TOLERANCE = 0.01  # pools within 1 % are "equal"
MAX_DUPLICATE_PROPOSALS = 5  # the sampler keeps proposing tried settings: the space is done
NOT_COMPARABLE = "not comparable"
CONFIRMED, NOT_CONFIRMED, CUT = "confirmed", "not confirmed", "cut"
CONFIRMATION_ROUNDS = 2  # times --max-repeats: the rounds a confirming start may measure
ANOTHER_START = "another start of the best"
INFEASIBLE = "over the latency limits"
DEFAULT_VOCAB = 32_000
# Workers of the load that stream, so TTFT is what a streaming client sees: 8 at
# concurrency 256 saw 20-70 requests per 10 s window on the H200 testbed.
LATENCY_PROBES = 8  # a model whose config.json gives none: ids every tokenizer has


@dataclass(frozen=True)
class Workload:
    concurrency: int
    input_len: int
    output_len: int
    length_ratio: float = 0.5  # lengths uniform in [ratio x len, len] (glm5svc/bench/load.py)
    request_file: str | None = None  # a recorded workload (glm5svc/bench/request_file.py)
    objective: str = "output_tokens"  # benchmark.objective: what a window's figure counts

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Workload:
        """A saved workload; keys of older runs that measured with bench_serving runs
        (prompts per run) are not part of it, and a run saved before the objective was a
        choice measured total tokens."""
        known = set(cls.__dataclass_fields__)
        return cls(**{"objective": "total_tokens"} | {k: v for k, v in data.items() if k in known})

    @property
    def objective_label(self) -> str:
        return "output tok/s" if self.objective == "output_tokens" else "total tok/s"


# (event, data): "trial-start", "trial-run", "trial-end", "done"
Progress = Callable[[str, dict[str, Any]], None]
# (start number, candidate, trial mapping, decide, deadline, live values) -> TrialOutcome
Executor = Callable[
    [int, dict[str, Value], dict[str, Any], Callable, float, tuple[int, ...]], TrialOutcome
]


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
        stop_reason: Callable[[], str | None] = lambda: None,
    ):
        self.space = space
        self.live = space.live_knob
        self.base_mapping = base_mapping
        self.start = dict(start)
        self.settings = settings
        self.run_dir = Path(run_dir)
        self.executor = executor
        self.render = render  # why the plan refuses a trial mapping, or None
        self.on_progress = on_progress
        self.should_stop = should_stop
        self.stop_reason = stop_reason  # why should_stop said so, when it was not a signal
        self.records: list[TrialRecord] = []
        self.best: TrialRecord | None = None
        self.again: list[dict[str, Value]] = []  # starts the verdicts asked for, in order
        # Starts an undecided live comparison asked for: after the first pass, so that a
        # small live effect never holds back the restart knobs' first starts.
        self.again_live: list[dict[str, Value]] = []
        self.stopped_early: dict[str, str] = {}  # setting: why its start stopped early
        self.open: str | None = None  # the setting whose comparison awaits a start
        self.rewritten: list[TrialRecord] = []  # earlier records whose verdict moved
        self.confirmation: str | None = None  # what the overlay's fresh test showed
        self.confirmed: bool | None = None  # None: no confirmation was owed
        self.confirmation_outcome: str | None = None  # CONFIRMED | NOT_CONFIRMED | CUT
        self.confirmation_gain: dict[str, Any] | None = None
        self._in_start: InStartConfirmation | None = None  # the latest start's, if any
        # A confirmation is of one configuration: the setting_key of the overlay it tested
        # (a new best, or the best written otherwise, owes its own), why it was cut and
        # what it had measured, and the record from which an unfinished one continues.
        self.confirmation_for: str | None = None
        self.confirmation_cut_why: str | None = None
        self.confirmation_measured: str | None = None
        self.confirmation_closed_at = 0
        self.started = time.monotonic()
        self.deadline = self.started + settings.budget_s
        self.stopped_by: str | None = None
        self.picked_at: float | None = None
        optuna.logging.set_verbosity(logging.WARNING)
        self.study = optuna.create_study(
            storage=f"sqlite:///{self.run_dir / 'study.db'}",
            study_name=STUDY_NAME,
            direction="maximize",
            sampler=optuna.samplers.TPESampler(seed=settings.seed),
            load_if_exists=True,
        )
        self.distributions = {
            k.name: CategoricalDistribution(list(k.values)) for k in space.restart_knobs
        }

    # ----- resume ------------------------------------------------------------------

    def replay(self) -> int:
        """Records of an earlier run of this study; trials it left running count as
        interrupted. A screening start that was cut (interrupted, or left running) and not
        measured since is measured again first (`again`); a cut confirmation continues
        from what it measured (Search._confirm). A confirmation decided before counts only
        for the configuration it tested: a new best owes its own. Returns how many records
        were found."""
        cut: dict[str, dict[str, Value]] = {}  # combination: the candidate, to start again
        for frozen in self.study.get_trials(deepcopy=False):
            marked = f"interrupted_{frozen.number}"
            if frozen.state == TrialState.RUNNING:
                self.study.tell(frozen.number, state=TrialState.FAIL)
                self.study.set_user_attr(marked, True)
            if self.study.user_attrs.get(marked):  # its params are the restart knobs
                candidate = {**self.start, **frozen.params}
                cut[self.combo_key(candidate)] = candidate
                continue
            for data in saved_records(frozen.user_attrs):
                record = TrialRecord.from_json(data)
                self.records.append(record)
                if record.became_best:
                    self.best = record
                if record.start is None or record.confirming:
                    continue
                if record.status == "interrupted":
                    cut.setdefault(self.combo_key(record.candidate), dict(record.candidate))
                else:  # measured since: nothing to make up
                    cut.pop(self.combo_key(record.candidate), None)
        self.again += list(cut.values())
        decided = self.study.user_attrs.get("confirmation") or {}
        self.confirmation_closed_at = int(decided.get("closed_at") or 0)
        written = _key(self.written()[0])
        if "setting" in decided:
            same = decided["setting"] == written
        else:  # an older glm5svc's: it tested its best, as written then
            same = self.best is not None and decided.get("best") == self.best.number
            same = same and _key(self.best.candidate) == written
        if same:
            if decided.get("outcome") in (CONFIRMED, NOT_CONFIRMED):
                self.confirmation_for = written
                self.confirmation_outcome = decided["outcome"]
                self.confirmed = decided["outcome"] == CONFIRMED
                self.confirmation, self.confirmation_gain = decided["text"], decided["gain"]
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
            self._one_start(*proposal)
            if self.should_stop():
                self.stopped_by = self.stop_reason() or "stopped by a signal"
                break
        else:
            self.stopped_by = self.stopped_by or "every proposal measured"
        self.picked_at = time.monotonic()  # the pick is final; its confirmation may follow
        self._confirm()
        if self.confirmation_owed() and self.confirmation_outcome is None:
            self._confirmation_cut(self.stopped_by or "the search ended")
        self.on_progress("done", {"stopped_by": self.stopped_by})
        return self.records

    def written(self) -> tuple[dict[str, Value], list[str]]:
        """The best as its overlay is written, and why a knob it changes stays at the
        start's value: the overlay holds only knobs whose own comparison says better. The
        live knob (the cap) rides along with a restart promotion (a start measures every
        cap, and the best of them is promoted); its own comparison is its value against the
        start's, by their paired windows in the best's screening starts. A restart knob's is
        the comparison that promoted it (the first pass changes one at a time); the cap of a
        best of the start's combination was promoted by its own comparison."""
        best = self.best
        if best is None:
            return dict(self.start), []
        written = dict(best.candidate)
        live = self.live.name if self.live is not None else None
        if live is None or written.get(live) == self.start.get(live):
            return written, []
        if self.combo_key(written) == self.combo_key(self.start):
            return written, []
        reverted = {**written, live: self.start.get(live)}
        mine, theirs = paired_windows(self.records, written, reverted)
        named = f"{_short(live)}={_shown(written[live])}"
        stays = f"{_short(live)} stays at the start's {_shown(self.start.get(live))}"
        if not mine:
            return reverted, [f"{stays}: {named} was never measured beside it in the best's starts"]
        verdict = self._judge_live(mine, theirs, _key(written))
        if verdict.kind == BETTER:
            return written, []
        return reverted, [
            f"{stays}: its own comparison is not better ({named} against it in the best's "
            f"starts: {verdict.kind}: {verdict.why})"
        ]

    def confirmation_owed(self) -> bool:
        """The overlay as written changes the start, and no confirmation of exactly that
        configuration has decided on it (an earlier best's confirmation is not its)."""
        best = self.best
        if best is None or best.start is None:
            return False
        written = _key(self.written()[0])
        if written == _key(self.start):
            return False
        decided = self.confirmation_outcome in (CONFIRMED, NOT_CONFIRMED)
        return not (decided and self.confirmation_for == written)

    def _confirm(self) -> None:
        """The overlay exactly as it will be written gets a fresh test before anything is
        written, with its own error rate (one comparison, spent over its looks) and the
        minimum effect as the bar. Where the start differs from the overlay only by the
        cap, one fresh start measures both caps in A B B A rounds: started with the higher
        one (the overlay as written when its cap is the higher; else the start as written,
        the overlay's lower cap set live, which the engine allows within one start).
        Otherwise fresh starts of both as written alternate, judged by their starts alone.
        A confirmation that was cut continues from what it measured."""
        written, _ = self.written()
        key = _key(written)
        if self.confirmation_for != key:  # an earlier best's confirmation is not this one's
            self.confirmation_for = key
            self.confirmation = self.confirmed = self.confirmation_gain = None
            self.confirmation_outcome = None
        if not self.confirmation_owed():
            return
        baseline = dict(self.start)
        beside = self._confirmed_beside(written)
        self.confirmed = False
        self.confirmation_cut_why = self.confirmation_measured = None
        in_start = self._in_start_verdict(written)
        if in_start is not None:
            verdict = in_start
        else:
            verdict = (
                self._confirm_beside(written, baseline) if beside
                else self._confirm_by_starts(written, baseline)
            )  # fmt: skip
        if verdict is None:
            return  # cut or failed: confirmation_outcome and confirmation say which
        gain = verdict.gain
        self.confirmation_gain = verdict.gain.to_dict() if gain else None
        how = self._confirmation_how(written)
        if verdict.kind == BETTER:
            self.confirmed, self.confirmation_outcome = True, CONFIRMED
            self.confirmation = (
                f"confirmed by {how}: gain over the start "
                f"{verdict.why}, above the minimum effect {self.settings.min_effect:.0%}"
            )
        else:
            self.confirmation_outcome = NOT_CONFIRMED
            self.confirmation = (
                f"not confirmed: {how} found {verdict.kind}: "
                f"{verdict.why} (the bar: a lower bound above the minimum effect "
                f"{self.settings.min_effect:.0%})"
            )
        self.confirmation_closed_at = len(self.records)
        self.study.set_user_attr(
            "confirmation",
            {"outcome": self.confirmation_outcome, "text": self.confirmation,
             "best": self.best.number, "setting": key, "gain": self.confirmation_gain,
             "closed_at": self.confirmation_closed_at},
        )  # fmt: skip

    def _confirmation_how(self, written: dict[str, Value]) -> str:
        if self._confirmed_beside(written) and self._lower_cap(written):
            live = self.live.name
            return (
                f"fresh paired windows in one start (the overlay's {_short(live)} "
                f"{_shown(written[live])} set live on an engine started as the start, with "
                f"{_shown(self.start[live])})"
            )
        return "a fresh test of the overlay as written"

    def _lower_cap(self, written: dict[str, Value]) -> bool:
        live = self.live.name
        return written[live] < self.start[live]  # type: ignore[operator]

    def _confirmed_beside(self, written: dict[str, Value]) -> bool:
        """The start differs from `written` only by the cap: one start measures both."""
        live, baseline = (self.live.name if self.live else None), self.start
        return (
            live is not None
            and self.combo_key(written) == self.combo_key(baseline)
            and baseline.get(live) is not None
            and written.get(live) is not None
            and baseline[live] != written[live]
        )

    def _confirmation_reserve(self) -> int:
        """The fewest starts the owed confirmation takes (kept back from the screen)."""
        if not self.confirmation_owed():
            return 0
        written = self.written()[0]
        if self._in_start_verdict(written) is not None:
            return 0  # made in the best's own start
        return 1 if self._confirmed_beside(written) else CONFIRMATION_STARTS

    def _in_start_verdict(self, written: dict[str, Value]) -> Verdict | None:
        """The in-start confirmation's verdict on the overlay as written, if it made one."""
        if self._in_start is None or _key(written) != _key(self.best.candidate):
            return None
        return self._in_start.verdict_for(self.best)

    def _confirmation_cut(self, why: str, measured: str | None = None) -> None:
        self.confirmation_outcome = CUT
        self.confirmation_cut_why = why
        self.confirmation_measured = measured or self.confirmation_measured
        self.confirmation = f"not confirmed: the confirmation was cut ({why})"
        if self.confirmation_measured:
            self.confirmation += (
                f"; measured so far: {self.confirmation_measured} (a resume continues from them)"
            )

    def _room_for_a_start(self) -> bool:
        if self.should_stop():
            self._confirmation_cut(self.stop_reason() or "stopped by a signal")
            return False
        if self.time_left() <= self._expected_trial_s():
            self._confirmation_cut("the time budget is spent")
            return False
        if self.trials_run() >= (self.settings.max_trials or float("inf")):
            self._confirmation_cut(f"--max-trials {self.settings.max_trials} reached")
            return False
        return True

    def _confirming(self, key: str) -> list[TrialRecord]:
        """The records of the confirmation of `key` under way: its confirming starts since
        the last confirmation decided."""
        return [
            r for r in self.records
            if r.confirming and r.confirms == key and r.number >= self.confirmation_closed_at
        ]  # fmt: skip

    def _confirming_pairs(self, key: str, values: tuple[int, int],
                          records: list[TrialRecord]) -> list[tuple[float, float]]:  # fmt: skip
        """The overlay's cap and the start's, window by window in the same round of the same
        confirming start (a cut start's windows count: they were measured)."""
        by_round: dict[tuple[int, int], dict[int | None, float]] = {}
        for record in records:
            if record.status not in ("measured", "interrupted") or record.start is None:
                continue
            for run in record.runs:
                by_round.setdefault((record.start, run.round), {})[run.live_value] = run.throughput
        return [
            (pair[values[0]], pair[values[1]])
            for _, pair in sorted(by_round.items())
            if values[0] in pair and values[1] in pair
        ]

    def _confirm_beside(self, written: dict[str, Value], baseline: dict[str, Value]):
        """One fresh start, with the higher of the two caps (the overlay as written, or the
        start as written with the overlay's lower cap set live), both caps measured. The
        test is planned: CONFIRMATION_ROUNDS x --max-repeats pairs, looked at twice,
        halfway and at the end (a test that looked after every block spent its alpha so
        thinly that a +10 % gain at the H200's window noise passed in 62 % of
        confirmations: bench/tune_recorded.py). The pairs of a cut confirming start count:
        the next start (a resume's) goes on to the planned looks."""
        live = self.live.name
        values = (int(written[live]), int(baseline[live]))  # type: ignore[arg-type]
        started = baseline if self._lower_cap(written) else written
        key = _key(written)
        planned = max(2, CONFIRMATION_ROUNDS * self.settings.max_repeats)
        planned -= planned % (2 * PAIRS_PER_LOOK)  # two looks of whole A B B A blocks
        halfway = planned // 2
        before = self._confirming_pairs(key, values, self._confirming(key))

        def verdict_of(pairs: list[tuple[float, float]]) -> Verdict | None:
            if len(pairs) < halfway:
                return None
            look = 1 if len(pairs) < planned else 2
            pairs = pairs[: halfway * look]
            return judge_paired(
                [p[0] for p in pairs], [p[1] for p in pairs],
                min_effect=self.settings.min_effect, confidence=self.settings.confidence,
                looks=2, look=look,
            )  # fmt: skip

        def these(runs: list[RunFigures]) -> list[tuple[float, float]]:
            rounds: dict[int, dict[int | None, float]] = {}
            for run in runs:
                rounds.setdefault(run.round, {})[run.live_value] = run.throughput
            return [(r[values[0]], r[values[1]]) for _, r in sorted(rounds.items())
                    if values[0] in r and values[1] in r]  # fmt: skip

        def decide(runs: list[RunFigures]) -> str:
            pairs = before + these(runs)
            if self.should_stop() or len(pairs) >= planned:
                return STOP
            verdict = verdict_of(pairs) if len(pairs) == halfway else None
            return STOP if verdict is not None and verdict.kind != UNDECIDED else CONTINUE

        self.confirmation_measured = (
            f"{len(before)} of {planned} paired windows" if before else None
        )
        if not self._room_for_a_start():
            return None
        records = self._one_start(
            started, live=values, as_written=True, confirming=True, decide=decide,
            confirms=written,
        )  # fmt: skip
        pairs = before + self._confirming_pairs(key, values, records)
        verdict = verdict_of(pairs)
        if verdict is not None and (verdict.kind != UNDECIDED or len(pairs) >= planned):
            return verdict
        if any(r.status == "failed" for r in records):
            return self._confirmation_failed(records)
        stopped = self.should_stop() or any(r.status == "interrupted" for r in records)
        why = (
            (self.stop_reason() or "stopped by a signal") if stopped
            else "the confirming start ended before its planned look"
        )  # fmt: skip
        if any(r.status in ("measured", "interrupted") for r in records):
            self._confirmation_cut(why, f"{len(pairs)} of {planned} paired windows")
            return None
        return self._confirmation_failed(records)

    def _confirm_by_starts(self, written: dict[str, Value], baseline: dict[str, Value]):
        """Fresh starts of the start and the overlay, both as written, in A B B A order of
        starts, up to MAX_STARTS a side, judged by these starts alone. A start cut before
        its --min-repeats rounds does not count; the ones measured whole before a cut do,
        and the next start (a resume's) is the next in the order."""
        key = _key(written)
        rows = [
            StartRecord(_key(r.candidate), r.start, r.mean)
            for r in self._confirming(key) if self._whole(r)
        ]  # fmt: skip
        verdict: Verdict | None = None
        order = [baseline, written, written, baseline] * MAX_STARTS
        for candidate in order[len(rows) : 2 * MAX_STARTS]:
            self.confirmation_measured = f"{len(rows)} whole confirming start(s)" if rows else None
            if not self._room_for_a_start():
                return None
            live = (int(candidate[self.live.name]),) if self.live else ()  # type: ignore[arg-type]
            records = self._one_start(
                candidate, live=live, as_written=True, confirming=True,
                decide=self._confirmation_decider(), confirms=written,
            )  # fmt: skip
            whole = [r for r in records if self._whole(r)]
            if not whole:
                if not any(r.status in ("measured", "interrupted") for r in records):
                    return self._confirmation_failed(records)
                stopped = self.should_stop() or any(r.status == "interrupted" for r in records)
                short = f"a confirming start ended before its {self.settings.min_repeats} rounds"
                self._confirmation_cut(
                    (self.stop_reason() or "stopped by a signal") if stopped else short,
                    f"{len(rows)} whole confirming start(s)",
                )
                return None
            rows.append(StartRecord(_key(candidate), whole[0].start, whole[0].mean))
            mine = sum(1 for r in rows if r.setting == _key(written))
            theirs = sum(1 for r in rows if r.setting == _key(baseline))
            if candidate is not written or not theirs:
                continue
            verdict = judge_starts(
                StartModel.fit(rows, self.settings.start_spread_prior), _key(written),
                _key(baseline), (mine, theirs),
                min_effect=self.settings.min_effect, confidence=self.settings.confidence,
                look=mine,
            )  # fmt: skip
            if self._settled(verdict):
                return verdict
        return verdict

    def _whole(self, record: TrialRecord) -> bool:
        """A confirming start of one setting that measured its --min-repeats rounds."""
        rounds = {run.round for run in record.runs}
        whole = len(rounds) >= self.settings.min_repeats
        return record.status == "measured" and bool(record.mean) and whole

    def _confirmation_decider(self) -> Callable[[list[RunFigures]], str]:
        """A confirming start of one setting as written measures --min-repeats rounds."""

        def decide(runs: list[RunFigures]) -> str:
            rounds = max((r.round for r in runs), default=0) + 1
            enough = rounds >= self.settings.min_repeats
            return STOP if self.should_stop() or enough else CONTINUE

        return decide

    def _settled(self, verdict: Verdict) -> bool:
        """Decided, or its best case can no longer clear the minimum effect."""
        gain = verdict.gain
        return verdict.kind != UNDECIDED or (
            gain is not None and gain.high <= self.settings.min_effect
        )

    def _confirmation_failed(self, records: list[TrialRecord]) -> None:
        latest = records[-1] if records else None
        why = (latest.outcome.get("failure") or latest.status) if latest else "no record"
        if latest is not None and latest.status == "interrupted":
            self._confirmation_cut(why)
            return None
        self.confirmation_outcome = NOT_CONFIRMED
        self.confirmation = f"not confirmed: the confirming start failed: {why}"
        return None

    def _out_of_time_or_trials(self) -> bool:
        if self.should_stop():
            self.stopped_by = self.stop_reason() or "stopped by a signal"
            return True
        limit = self.settings.max_trials
        reserve = self._confirmation_reserve()
        if limit is not None and self.trials_run() >= limit - reserve:
            self.stopped_by = f"--max-trials {limit} reached"
            return True
        if self.time_left() <= self._expected_trial_s() * (0.5 + reserve):
            self.stopped_by = "the time budget is spent"
            return True
        return False

    def trials_run(self) -> int:
        """Trials so far, refused ones included: each engine start, each refusal."""
        starts = {r.start for r in self.records if r.start is not None}
        return len(starts) + sum(1 for r in self.records if r.start is None)

    def time_left(self) -> float:
        return self.deadline - time.monotonic()

    def _expected_trial_s(self) -> float:
        walls = {
            r.start: r.outcome.get("wall_s") or 0
            for r in self.records
            if r.status == "measured" and r.start is not None
        }
        return sum(walls.values()) / len(walls) if walls else 0.0

    def planned_left(self) -> int:
        """First-pass starts not yet made, from the best so far, and starts asked for."""
        base = self.best.candidate if self.best else self.start
        seen = {self.combo_key(r.candidate) for r in self.records}
        left = (
            len(self.again)
            + len(self.again_live)
            + sum(
                1
                for knob in self.space.restart_knobs
                for value in knob.values
                if self.combo_key({**base, knob.name: value}) not in seen
            )
        )
        if self.settings.max_trials is not None:
            left = min(left, max(0, self.settings.max_trials - self.trials_run()))
        return left

    def eta_s(self) -> float | None:
        per_trial = self._expected_trial_s()
        if not per_trial:
            return None
        return min(self.planned_left() * per_trial, max(0.0, self.time_left()))

    def first_pass_size(self) -> int:
        """Comparisons in the first pass: every setting its starts measure against the best.
        A start measures every live value, so each restart value other than the best's
        brings one setting per live value, and the best's own start the other live values."""
        combos = 1 + sum(len(k.values) - 1 for k in self.space.restart_knobs)
        live = len(self.live.values) if self.live else 1
        return max(1, combos * live - 1)

    def comparison_share(self, key: str) -> float:
        """The Bonferroni divisor of this setting's comparison: the first pass's settings
        share half of the error rate equally; every later one (later passes, the sampler's
        proposals) takes 6 / (pi^2 j^2) of the other half, j its rank among them. Over any
        number of comparisons the shares add up to at most the whole. The rank is the
        order in which settings (`key`: setting_key) were first measured, so a resume
        finds the same."""
        order = self._comparison_order()
        first = self.first_pass_size()
        rank = order.index(key) if key in order else len(order)
        if rank < first:
            return 2.0 * first
        later = rank - first + 1
        return 2.0 * math.pi**2 * later**2 / 6

    def _comparison_order(self) -> list[str]:
        order: list[str] = []
        for record in self.records:
            key = _key(record.candidate)
            if key != _key(self.start) and key not in order and not record.confirming:
                order.append(key)
        return order

    def combo_key(self, candidate: dict[str, Value]) -> str:
        """The restart part of a candidate: what one engine start is."""
        live = self.live.name if self.live else None
        return _key({k: v for k, v in candidate.items() if k != live})

    def _proposals(self) -> Iterator[tuple[dict[str, Value], Any] | None]:
        """The start first, then one restart knob at a time from the best so far (the
        live knob is measured in every start), then Optuna's; the starts the verdicts ask
        for go before any new one."""
        seen = {self.combo_key(r.candidate) for r in self.records}
        yield from self._drain_again()
        if self.combo_key(self.start) not in seen:
            seen.add(self.combo_key(self.start))
            yield dict(self.start), None
            yield from self._drain_again()
        progress = True
        while progress:  # another pass while the best moved during the last one
            progress = False
            best_at_start = self._best_combo()
            for knob in self.space.restart_knobs:
                for value in knob.values:
                    base = self.best.candidate if self.best else self.start
                    candidate = {**base, knob.name: value}
                    if self.combo_key(candidate) in seen:
                        continue
                    seen.add(self.combo_key(candidate))
                    yield candidate, None
                    yield from self._drain_again()
            progress = self._best_combo() != best_at_start
        while True:
            yield from self._drain_again(live=True)
            if not self.distributions:
                return  # only the live knob: every start measured all of it
            trial = self.study.ask(self.distributions)
            candidate = {**(self.best.candidate if self.best else self.start), **trial.params}
            if self.combo_key(candidate) in seen:
                self.study.tell(trial, state=TrialState.FAIL)  # proposed again: not run
                yield None
                continue
            seen.add(self.combo_key(candidate))
            yield candidate, trial
            yield from self._drain_again()

    def _drain_again(self, live: bool = False) -> Iterator[tuple[dict[str, Value], Any]]:
        while self.again or (live and self.again_live):
            yield (self.again or self.again_live).pop(0), None

    def _best_combo(self) -> str | None:
        return self.combo_key(self.best.candidate) if self.best else None

    # ----- one engine start ------------------------------------------------------------

    def _live_looks(self) -> int:
        """Looks a live comparison may take: one a pair, for each of the starts it can span."""
        return max(1, self.settings.max_repeats) * MAX_STARTS

    def _judge_live(self, mine: list[float], theirs: list[float], key: str) -> Verdict:
        """Live values by their paired windows, looked at from the first pair (look k: the
        first k pairs), the same numbering within a start (the decider) and after it (the
        verdict), so no pair is looked at twice under two numberings; the pair spread from
        the prior and the other live comparisons' pairs on this machine (PairNoise)."""
        pairs = min(len(mine), len(theirs))
        return judge_paired(
            mine[:pairs], theirs[:pairs], min_effect=self.settings.min_effect,
            confidence=self.settings.confidence, comparisons=self.comparison_share(key),
            looks=self._live_looks(), noise=self._pair_noise(key),
        )  # fmt: skip

    def _pair_noise(self, key: str, extra: list[TrialRecord] = ()) -> PairNoise:
        """The prior, and the squared deviations of every other live value's pairs against
        its start's first value, start by start (the same machine's window noise)."""
        ss, dof = 0.0, 0
        by_start: dict[int, dict[str, dict[int, float]]] = {}
        for record in [*self.records, *extra]:
            if record.status != "measured" or record.start is None or record.confirming:
                continue
            series = by_start.setdefault(record.start, {})
            series[_key(record.candidate)] = {r.round: r.throughput for r in record.runs}
        for series in by_start.values():
            names = list(series)
            if len(names) < 2:
                continue
            reference = series[names[0]]
            for name in names[1:]:
                if key in (name, names[0]):
                    continue
                rounds = sorted(set(series[name]) & set(reference))
                more_ss, more_dof = squared_deviations(
                    log_pairs([series[name][r] for r in rounds], [reference[r] for r in rounds])
                )
                ss, dof = ss + more_ss, dof + more_dof
        return PairNoise(self.settings.pair_spread_prior, PAIR_PRIOR_WEIGHT, ss, dof)

    def _live_values(self) -> tuple[int, ...]:
        return tuple(int(v) for v in self.live.values) if self.live else ()  # type: ignore[arg-type]

    def _one_start(
        self, candidate: dict[str, Value], trial=None, *, live: tuple[int, ...] | None = None,
        as_written: bool = False, confirming: bool = False, decide=None,
        confirms: dict[str, Value] | None = None,
    ) -> list[TrialRecord]:  # fmt: skip
        """One engine start of `candidate`, measuring `live` values (default: every value
        of the live knob, the engine started at the highest; `as_written`: started with the
        candidate's own value). A confirming start's records (of the overlay `confirms`)
        stay out of the verdicts and the screening evidence."""
        if trial is None:
            self.study.enqueue_trial(
                {k: v for k, v in candidate.items() if k in self.distributions}
            )
            trial = self.study.ask(self.distributions)
        live = self._live_values() if live is None else live
        started_as = dict(candidate)
        if self.live is not None and not as_written:
            started_as[self.live.name] = max(live)  # the engine's cap covers every live value
        mapping = apply_candidate(self.base_mapping, started_as)
        number = len(self.records)
        start = len({r.start for r in self.records if r.start is not None})
        self.on_progress("trial-start", {"number": number, "candidate": candidate})
        refusal = self.render(mapping)
        if refusal:
            record = TrialRecord(number, candidate, "refused", confirming=confirming)
            record.verdict = f"refused by the launch plan: {refusal}"
            self.records.append(record)
            self._finish(trial, [record])
            return [record]
        # The executor bounds the engine's readiness by --trial-timeout; the measured rounds
        # go on while the decider asks for them, up to the search's deadline.
        deadline = self.deadline
        outcome = self.executor(
            start, candidate, mapping, decide or self._decider(candidate, live), deadline, live
        )
        records = self._split(outcome, candidate, number, start, live)
        for record in records:
            record.confirming = confirming
            if confirming:
                record.confirms = _key(confirms or candidate)
                record.verdict = "the confirmation: " + _role(record, candidate, confirms)
        if not confirming:
            records += self._split_in_start_confirmation(records, start)
        self.records += records  # the verdicts' model includes this start
        if not confirming:
            self._judge([r for r in records if not r.confirming])
        self._finish(trial, records)
        return records

    def _split(self, outcome: TrialOutcome, candidate, number: int, start: int, live):
        """One record per live value (one record without a live knob)."""
        data = outcome.to_dict()
        if not data["runs"]:  # nothing measured: one record of the start as proposed
            return [TrialRecord(number, candidate, outcome.status, data, start=start)]
        values: tuple[int | None, ...] = live or (None,)
        records = []
        for index, value in enumerate(values):
            mine = {**candidate, self.live.name: value} if self.live is not None else candidate
            runs = [r for r in data["runs"] if r.get("live_value") == value]
            status = outcome.status
            if status == "measured" and not runs:
                status = "pruned" if outcome.status == "pruned" else "failed"
            records.append(
                TrialRecord(number + index, mine, status, {**data, "runs": runs}, start=start)
            )
        return records

    def _decider(self, candidate: dict[str, Value],
                 live: tuple[int, ...] = ()) -> Callable[[list[RunFigures]], str]:  # fmt: skip
        """Asked after every round of a start: it measures `min_repeats` rounds, more, up
        to `max_repeats`, while a live value that runs beside the best's
        (the start is the best's combination, or the first) is undecided against it by its
        paired windows. A start of another combination stops as soon as every live value
        is clearly behind the best (a `worse` at this look: it can never promote). Where
        the start's own cap is better than the start's and the engine runs as that overlay
        would be written, the start goes on to confirm it on fresh pairs (InStartConfirmation)."""
        settings = self.settings
        incumbent = self._incumbent_live(candidate)
        confirming = InStartConfirmation.for_start(self, candidate, live)
        if confirming is not None:
            self._in_start = confirming

        def decide(runs: list[RunFigures]) -> str:
            if confirming is not None and confirming.from_round is not None:
                return confirming.decide(runs)
            samples = [r.throughput for r in runs]
            by_value: dict[str, list[float]] = {}
            for run in runs:
                name = (
                    "" if run.live_value is None else f"{_short(self.live.name)}={run.live_value}"
                )
                by_value.setdefault(name, []).append(run.throughput)
            self.on_progress("trial-run", {"number": len(self.records), "samples": samples,
                                           "by_value": by_value})  # fmt: skip
            rounds = max((r.round for r in runs), default=0) + 1
            best = self.best.mean if self.best else None
            whole_block = rounds % PAIRS_PER_LOOK == 0  # the start model looks at blocks
            behind = (
                self._clearly_behind(candidate, runs, rounds // PAIRS_PER_LOOK)
                if whole_block else None
            )  # fmt: skip
            if behind is not None:
                self.stopped_early.update(behind)
                return PRUNE
            if whole_block and rounds <= PAIRS_PER_LOOK and best and settings.prune_below:
                if max(samples) < settings.prune_below * best:
                    return PRUNE
            if self.should_stop() or rounds >= settings.max_repeats:
                return STOP
            if rounds < settings.min_repeats:
                return CONTINUE
            if self._live_undecided(candidate, runs, incumbent):
                return CONTINUE
            if confirming is not None and confirming.begin(runs, rounds):
                return CONTINUE
            return STOP

        return decide

    def _split_in_start_confirmation(self, records: list[TrialRecord],
                                     start: int) -> list[TrialRecord]:  # fmt: skip
        """The rounds an in-start confirmation measured, moved out of the screening
        records into confirming ones: they never count as screening evidence."""
        confirming = self._in_start
        if confirming is None or confirming.start != start or confirming.from_round is None:
            return []
        moved = []
        for record in records:
            runs = record.outcome.get("runs") or []
            kept = [r for r in runs if r["round"] < confirming.from_round]
            fresh = [r for r in runs if r["round"] >= confirming.from_round]
            if not fresh:
                continue
            record.outcome = {**record.outcome, "runs": kept}
            extra = TrialRecord(
                len(self.records) + len(records) + len(moved), dict(record.candidate),
                record.status, {**record.outcome, "runs": fresh}, start=start, confirming=True,
                confirms=_key(confirming.candidate),
            )  # fmt: skip
            extra.verdict = "the confirmation: fresh pairs in the overlay's own start"
            moved.append(extra)
        return moved

    def _clearly_behind(self, candidate: dict[str, Value], runs: list[RunFigures],
                        look: int) -> dict[str, str] | None:  # fmt: skip
        """Why each live value of this start (its windows so far, as one more start) is
        worse than the best, by the start model (setting: why); None while one is not."""
        best = self.best
        if best is None or self.combo_key(candidate) == self.combo_key(best.candidate):
            return None
        order = 1 + max((r.start for r in self.records if r.start is not None), default=-1)
        values: tuple[int | None, ...] = self._live_values() or (None,)
        partial = []
        for value in values:
            mine = [r.throughput for r in runs if r.live_value == value]
            if not mine:
                return None
            setting = {**candidate, self.live.name: value} if self.live is not None else candidate
            partial.append(StartRecord(_key(setting), order, sum(mine) / len(mine),
                                       self.combo_key(candidate)))  # fmt: skip
        starts = [*self._start_records(), *partial]
        verdicts = {
            row.setting: clearly_behind(
                starts,
                row.setting,
                _key(best.candidate),
                max(1, look),
                confidence=self.settings.confidence,
                comparisons=self.comparison_share(row.setting),
                prior=self.settings.start_spread_prior,
            )  # fmt: skip
            for row in partial
        }
        if not all(verdicts.values()):
            return None
        return {setting: verdict.why for setting, verdict in verdicts.items()}

    def _incumbent_live(self, candidate: dict[str, Value]) -> int | None:
        """The live value to pair against within this start: the best's, when the start is
        the best's combination; the start's own in the first start; else none."""
        if self.live is None:
            return None
        if self.best is None:
            return self.start.get(self.live.name)  # type: ignore[return-value]
        if self.combo_key(candidate) == self.combo_key(self.best.candidate):
            return self.best.candidate.get(self.live.name)  # type: ignore[return-value]
        return None

    def _live_undecided(self, candidate: dict[str, Value], runs: list[RunFigures],
                        incumbent: int | None) -> bool:  # fmt: skip
        if incumbent is None:
            return False
        by_value: dict[int | None, dict[int, float]] = {}
        for run in runs:
            by_value.setdefault(run.live_value, {})[run.round] = run.throughput
        theirs = by_value.get(incumbent, {})
        for value, mine in by_value.items():
            if value == incumbent:
                continue
            rounds = sorted(set(mine) & set(theirs))
            verdict = self._judge_live(
                [mine[r] for r in rounds],
                [theirs[r] for r in rounds],
                _key({**candidate, self.live.name: value}),
            )
            if verdict.kind == UNDECIDED:
                return True
        return False

    # ----- verdicts ----------------------------------------------------------------

    def _start_records(self) -> list[StartRecord]:
        return start_records_of(self.records, self.combo_key)

    def _compare(self, record: TrialRecord, extra: list[StartRecord] = ()) -> tuple[str, Verdict]:
        """The verdict of `record`'s setting against the best, and what it needs next."""
        best = self.best
        assert best is not None
        comparisons = self.comparison_share(_key(record.candidate))
        if self.combo_key(record.candidate) == self.combo_key(best.candidate):
            mine, theirs = paired_windows(self.records, record.candidate, best.candidate)
            verdict = self._judge_live(mine, theirs, _key(record.candidate))
            return self._live_step(record, verdict), verdict
        return next_step(
            [*self._start_records(), *extra], _key(record.candidate), _key(best.candidate),
            min_effect=self.settings.min_effect, confidence=self.settings.confidence,
            comparisons=comparisons, prior=self.settings.start_spread_prior,
        )  # fmt: skip

    def _live_step(self, record: TrialRecord, verdict: Verdict) -> str:
        """An undecided live comparison whose interval still reaches past the minimum effect
        goes on in another start of its combination (its pairs add up across starts), up to
        MAX_STARTS; the search does not end while one is open and the budget allows."""
        gain = verdict.gain
        futile = gain is not None and gain.high <= self.settings.min_effect
        if verdict.kind != UNDECIDED or futile:
            return DONE
        starts = {
            r.start for r in self.records
            if r.start is not None and not r.confirming
            and self.combo_key(r.candidate) == self.combo_key(record.candidate)
        }  # fmt: skip
        return START_CANDIDATE if len(starts) < MAX_STARTS else DONE

    def _judge(self, records: list[TrialRecord]) -> None:
        measured = [r for r in records if r.status == "measured" and r.samples]
        for record in records:
            if record.status == "pruned":
                record.against = self.best.number if self.best else None
                best = self.best.mean if self.best else None
                behind = self.stopped_early.get(_key(record.candidate))
                if behind is not None:
                    record.verdict = f"stopped early, clearly behind the best: worse: {behind}"
                elif best:
                    record.verdict = (
                        f"pruned: its first window was under {self.settings.prune_below:.0%} "
                        f"of the best's mean ({best:,.0f} tok/s)"
                    )
                else:
                    record.verdict = "pruned"
            elif record.status != "measured" or not record.samples:
                record.verdict = record.outcome.get("failure") or record.status
        if not measured:
            return
        pending = measured  # every record is judged against the best of the moment
        if self.best is None:
            first = next((r for r in measured if _key(r.candidate) == _key(self.start)), None)
            first = first or max(measured, key=lambda r: r.mean or 0)
            infeasible = self._over_limits(first)
            first.verdict = "the start" + (f" ({infeasible})" if infeasible else "")
            self._make_best(first)
            pending = [r for r in measured if r is not first]
        self._verdicts(pending)

    def _verdicts(self, pending: list[TrialRecord]) -> None:
        """This start's settings against the best, and the comparison a start was asked
        for (its setting's latest record gets the new verdict)."""
        best = self.best
        assert best is not None
        judged = sorted(pending, key=lambda r: -(r.mean or 0))
        keys = {_key(r.candidate) for r in judged}
        if self.open is not None and self.open not in keys:
            latest = [r for r in self.records if _key(r.candidate) == self.open and r.mean]
            if latest:
                judged.append(latest[-1])
                self.rewritten.append(latest[-1])
        self.open = None
        winners: list[tuple[float, TrialRecord]] = []
        asks: list[tuple[float, str, TrialRecord]] = []
        for record in judged:
            record.against = best.number
            if _key(record.candidate) == _key(best.candidate):
                record.verdict = ANOTHER_START
                continue
            kv_note = self._kv_mismatch(record, best)
            infeasible = self._over_limits(record)
            step, verdict = self._compare(record)
            record.difference = (
                {"mean": verdict.gain.estimate, "low": verdict.gain.low, "high": verdict.gain.high}
                if verdict.gain
                else None
            )
            if kv_note:
                record.verdict = f"{NOT_COMPARABLE}: {kv_note}"
                continue
            if infeasible:
                record.verdict = f"{INFEASIBLE}: {infeasible}"
                continue
            record.verdict = f"{verdict.kind}: {verdict.why}"
            if verdict.kind == BETTER and step == DONE:
                winners.append((verdict.gain.estimate if verdict.gain else 0.0, record))
            elif self._over_limits(best) and verdict.kind != WORSE:
                record.verdict = f"within the limits (the best is not): {verdict.why}"
                winners.append((-1.0, record))
            elif step in (START_CANDIDATE, START_INCUMBENT):
                asks.append((verdict.gain.estimate if verdict.gain else 0.0, step, record))
        if winners:
            self._make_best(max(winners, key=lambda w: w[0])[1])
            return
        if asks:  # the most promising open comparison gets the start it needs
            _, step, record = max(asks, key=lambda a: a[0])
            combo = record.candidate if step == START_CANDIDATE else best.candidate
            whose = "the candidate" if step == START_CANDIDATE else "the best"
            record.verdict += f"; another start of {whose} asked for"
            self.open = _key(record.candidate)
            live = self.combo_key(record.candidate) == self.combo_key(best.candidate)
            queue = self.again_live if live else self.again
            if all(
                self.combo_key(c) != self.combo_key(combo) for c in self.again + self.again_live
            ):
                queue.append(dict(combo))

    def _make_best(self, record: TrialRecord) -> None:
        record.became_best = True
        self.best = record
        self._publish_best()

    def _publish_best(self) -> None:
        if self.best and self.best.samples:
            self.study.set_user_attr("best_mean", self.best.mean)
            self.study.set_user_attr("best_number", self.best.number)

    def _over_limits(self, record: TrialRecord) -> str | None:
        return self.runs_over_limits(record.runs)

    def runs_over_limits(self, runs: list[RunFigures]) -> str | None:
        """Why these windows' mean latency is over --ttft-p99-ms / --itl-p99-ms, or None."""
        problems = []
        for name, limit in (
            ("ttft_p99_ms", self.settings.ttft_p99_ms),
            ("itl_p99_ms", self.settings.itl_p99_ms),
        ):
            values = [getattr(r, name) for r in runs if getattr(r, name) is not None]
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

    def _finish(self, trial, records: list[TrialRecord]) -> None:
        trial.set_user_attr("records", json.dumps([r.to_json() for r in records]))
        means = [r.mean for r in records if r.status == "measured" and r.mean]
        if means:
            self.study.tell(trial, max(means))
        elif any(r.status == "pruned" for r in records):
            self.study.tell(trial, state=TrialState.PRUNED)
        else:
            self.study.tell(trial, state=TrialState.FAIL)
        (self.run_dir / "trials").mkdir(parents=True, exist_ok=True)
        for record in records + self.rewritten:
            with open(self.run_dir / "trials" / f"{record.number:03d}.json", "w") as handle:
                json.dump(record.to_json(), handle, indent=2)
            if record not in self.rewritten:
                self.on_progress("trial-end", {"record": record})
        self.rewritten = []


def _role(record: TrialRecord, started: dict[str, Value],
          confirms: dict[str, Value] | None) -> str:  # fmt: skip
    """What a confirming record measured: the overlay or the start, as written or live."""
    overlay = _key(record.candidate) == _key(confirms or started)
    as_started = _key(record.candidate) == _key(started)
    if overlay:
        return "the overlay as written" if as_started else "the overlay's cap, set live"
    if as_started:
        return "the start as written"
    return "the start's cap beside the overlay"


def _in_space(space: Space, name: str) -> bool:
    return any(k.name == name for k in space.knobs)


def bench_plan_for(config, workload: Workload, window_s: float | None = None) -> BenchPlan:
    """One level at the target concurrency, with the workload's lengths and prompts (and
    the tune's window, when it gives one)."""
    plan = plan_from_config(
        config,
        ladder=[workload.concurrency],
        input_len=workload.input_len,
        output_len=workload.output_len,
        request_file=workload.request_file,
    )
    return plan.with_overrides(window_s=window_s) if window_s else plan


def load_shape(workload: Workload, plan: BenchPlan, vocab_size: int | None) -> LoadShape:
    """The load of every start: the workload's concurrency and length distribution, random
    token ids of the model's vocabulary (a recorded workload gives the lengths)."""
    return LoadShape(
        concurrency=workload.concurrency,
        input_len=workload.input_len,
        output_len=workload.output_len,
        range_ratio=workload.length_ratio,
        vocab_size=vocab_size or DEFAULT_VOCAB,
        lengths=plan.request_file.requests if plan.request_file else (),
        prefix_share=plan.prefix_sharing,
        latency_probes=min(LATENCY_PROBES, max(1, workload.concurrency // 32)),
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
