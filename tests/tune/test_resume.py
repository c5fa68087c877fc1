"""A resume continues: the setting whose start was cut (by a signal, or a process that died
with its trial running) is measured again first, and the budget is what was left of the
one given (budget.json), unless --budget is given with --resume."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from glm5svc.cli import build_parser
from glm5svc.errors import ConfigError
from glm5svc.tune.budget import BUDGET_FILE, BudgetLedger, budget_left, read_budget
from glm5svc.tune.search import Search, SearchSettings, Workload
from glm5svc.tune.session import Tune, TuneRequest
from glm5svc.tune.trial import TrialOutcome
from tests.tune.conftest import write_space, write_tune_config
from tests.tune.test_search import CAP, SPACE, START, Executor, capped

GRAPHS_OFF = {**START, "tuning.cuda_graph": False}


class CutAt(Executor):
    """The stand-in engine, cut at start `at`: its windows so far kept and the start
    `interrupted` (as trial.py ends a start on ^C), or (`die`) the process ending inside
    the start, its trial left running in the study."""

    def __init__(self, at: int, die: bool = False):
        super().__init__(capped)
        self.at, self.die, self.stopped = at, die, False

    def __call__(self, number, candidate, mapping, decide, deadline, live_values):
        if number != self.at:
            return super().__call__(number, candidate, mapping, decide, deadline, live_values)
        self.calls.append((candidate, live_values))
        if self.die:
            raise SystemExit("the tune's process ends")
        self.stopped = True
        return TrialOutcome("interrupted", failure="stopped during the warm-up")


def search(run_dir: Path, executor, **settings) -> Search:
    return Search(SPACE, {}, START, SearchSettings(**settings), run_dir, executor,
                  should_stop=lambda: getattr(executor, "stopped", False))  # fmt: skip


@pytest.mark.parametrize("die", [False, True])
def test_a_start_cut_is_measured_again_first_on_resume(tmp_path, die):
    """^C (or the process dying) during the second start, graphs off: the resume plans it,
    starts it first, and measures it; the first pass goes on from there."""
    first = search(tmp_path, CutAt(1, die=die))
    if die:
        with pytest.raises(SystemExit):
            first.run()
    else:
        first.run()
        assert first.stopped_by == "stopped by a signal"
        screening = [r for r in first.records if not r.confirming]
        assert [r.status for r in screening[3:]] == ["interrupted"]
    assert first.best.candidate == {**START, CAP: 1024}

    executor = Executor(capped)
    second = search(tmp_path, executor)
    second.replay()
    assert [second.combo_key(c) for c in second.again] == [second.combo_key(GRAPHS_OFF)]
    assert second.planned_left() >= 1
    second.run()
    assert second.combo_key(executor.calls[0][0]) == second.combo_key(GRAPHS_OFF)
    measured = [r for r in second.records if r.status == "measured"
                and second.combo_key(r.candidate) == second.combo_key(GRAPHS_OFF)]  # fmt: skip
    assert measured and measured[0].runs  # graphs off measured, its three caps
    assert second.best.candidate["tuning.cuda_graph"] is False  # the model's optimum

    third = search(tmp_path, Executor(capped))
    third.replay()
    assert third.again == []  # measured since: nothing to make up


def test_the_budget_left_is_the_resumes_unless_one_is_given(tmp_path):
    # Started at monotonic 0: by now it has spent far more than its 180 s.
    ledger = BudgetLedger(tmp_path, budget_s=180.0, started=0.0, spent_before_s=0.0)
    (tmp_path / BUDGET_FILE).write_text(
        json.dumps({"budget_s": 180.0, "spent_s": 100.0, "spent_total_s": 100.0})
    )
    left = budget_left(tmp_path, saved_budget_s=180.0, given_s=None)
    assert (left.budget_s, left.spent_s) == (80.0, 100.0) and "left of its" in left.note
    given = budget_left(tmp_path, saved_budget_s=180.0, given_s=600.0)
    assert given.budget_s == 600.0 and "given with --resume" in given.note
    ledger.record()  # this run spent its whole budget, and more
    assert read_budget(tmp_path)["budget_s"] == 180.0
    with pytest.raises(ConfigError) as spent:
        budget_left(tmp_path, saved_budget_s=180.0, given_s=None)
    assert "is spent" in str(spent.value) and f"--resume {tmp_path} --budget" in str(spent.value)
    (tmp_path / BUDGET_FILE).write_text("{not json")
    whole = budget_left(tmp_path, saved_budget_s=180.0, given_s=None)
    assert whole.budget_s == 180.0 and "no record of the time spent" in whole.note


def test_a_resumed_tune_gets_what_was_left_of_its_budget(tmp_path):
    config = write_tune_config(tmp_path, sys.executable, tmp_path / "tokenizer", "load=0.1")
    space = write_space(tmp_path, [{"key": "tuning.cuda_graph", "values": [True, False]}])
    workload = Workload(concurrency=4, input_len=16, output_len=16)
    run_dir = tmp_path / "run"

    def tune(settings: SearchSettings, **request) -> Tune:
        return Tune(TuneRequest(config, workload, settings, space_path=space, **request))

    first = tune(SearchSettings(budget_s=180.0), run_dir=run_dir)
    first._prepare_run_dir()
    (run_dir / BUDGET_FILE).write_text(
        json.dumps({"budget_s": 180.0, "spent_s": 150.0, "spent_total_s": 150.0})
    )
    # `tune run --resume RUN_DIR`: --budget left out (the 4 h default is not given).
    resumed = tune(SearchSettings(), resume=run_dir, budget_given=False)
    _, settings = resumed._prepare_run_dir()
    assert settings.budget_s == 30.0
    given = tune(SearchSettings(budget_s=600.0), resume=run_dir, budget_given=True)
    assert given._prepare_run_dir()[1].budget_s == 600.0

    parser = build_parser(only="tune")
    assert parser.parse_args(["tune", "run", "--resume", str(run_dir)]).budget_s is None
    assert parser.parse_args(["tune", "run", "--budget", "3m"]).budget_s == 180.0
