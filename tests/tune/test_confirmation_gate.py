"""No overlay unless confirmed: the real Search on the stand-in executor, its verdict on the
best (confirmed, failed, cut, never run), what the writer leaves (tuned.yaml with the change
only when confirmed, else words and `{}`), and `tune apply`'s answer to each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from glm5svc.cli import main
from glm5svc.commands.tune import _print_result
from glm5svc.errors import EXIT_CONFIG
from glm5svc.tune.apply import apply_tune
from glm5svc.tune.confirmation import CONFIRMED, CUT, FAILED, NO_CHANGE, NOT_RUN, of_run
from glm5svc.tune.outputs import write_outputs
from glm5svc.tune.report import result_lines
from glm5svc.tune.search import Search, SearchSettings
from glm5svc.tune.space import Knob, Space
from glm5svc.tune.trial import TrialOutcome
from tests.tune.test_search import Executor

GRAPHS = "tuning.cuda_graph"
SPACE = Space([Knob(GRAPHS, (True, False))], "test")
START = {GRAPHS: True}


def graphs_off(gain: float, holds=lambda: True):
    """Graphs off is `gain` better while `holds()`, else no better."""
    return lambda c: 5000.0 * (gain if not c[GRAPHS] and holds() else 1.0)


class Stopping(Executor):
    """The stand-in engine, and a ^C (should_stop) once graphs off is the best: at once
    (`during` False: the confirmation never begins), or when the confirmation starts the
    overlay (`during`: that start is cut, as trial.py cuts one)."""

    def __init__(self, model, during: bool):
        super().__init__(model)
        self.during, self.stopped, self.search = during, False, None

    def __call__(self, number, candidate, mapping, decide, deadline, live_values):
        if self.during and winning(self) and not candidate[GRAPHS]:
            self.calls.append((candidate, live_values))
            self.stopped = True
            return TrialOutcome("interrupted", failure="stopped while the engine was starting")
        return super().__call__(number, candidate, mapping, decide, deadline, live_values)

    def should_stop(self) -> bool:
        return self.stopped or (not self.during and winning(self))


@pytest.fixture(autouse=True)
def no_plot(monkeypatch):
    """plot.png is not what these tests check (matplotlib costs seconds a test)."""
    monkeypatch.setattr("glm5svc.tune.outputs._write_plot", lambda *args: None)


def tune(run_dir: Path, executor, **settings):
    """A Search and what the tune writes for it, as glm5svc/tune/session.py does."""
    stopping = isinstance(executor, Stopping)
    search = Search(
        SPACE, {}, START, SearchSettings(**settings), run_dir, executor,
        should_stop=executor.should_stop if stopping else (lambda: False),
    )  # fmt: skip
    executor.search = search
    search.replay()
    search.run()
    found = of_run(search, str(run_dir))
    summary = write_outputs(
        run_dir, search.records, search.best, START,
        {**found.to_summary(), "stopped_by": search.stopped_by}, search.settings,
        lambda a, b: search.combo_key(a) == search.combo_key(b), search.combo_key,
    )  # fmt: skip
    return search, summary


def winning(executor) -> bool:
    best = executor.search.best if getattr(executor, "search", None) else None
    return best is not None and best.candidate == {GRAPHS: False}


def config(tmp_path: Path) -> Path:
    path = tmp_path / "glm5.yaml"
    path.write_text("tuning: {cuda_graph: true}\n")
    return path


def refused(run_dir: Path, config_path: Path) -> str:
    with pytest.raises(Exception) as caught:
        apply_tune(run_dir, str(config_path), restart=False, force=True)
    assert getattr(caught.value, "exit_status", None) == EXIT_CONFIG
    return str(caught.value)


def test_a_confirmation_that_does_not_bear_the_gain_out_writes_no_overlay(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    executor = Executor(lambda c: 0.0)  # graphs off is better until it is the best
    executor.model = graphs_off(3.0, holds=lambda: not winning(executor))
    search, summary = tune(run_dir, executor)
    assert search.best.candidate == {GRAPHS: False} and search.confirmed is False
    assert (summary["confirmed"], summary["confirmation"]) == (False, FAILED)
    assert "its gain was not reproduced by a fresh engine start" in summary["confirmation_detail"]
    assert summary["overlay"] == {} and summary["best_changes"] == {"tuning": {"cuda_graph": False}}
    tuned = (run_dir / "tuned.yaml").read_text()
    assert yaml.safe_load(tuned) == {} and "Nothing to apply: the confirmation failed" in tuned
    assert "cuda_graph: false" in tuned  # what the best would change, as a comment
    said = refused(run_dir, config(tmp_path))
    assert "the confirmation failed: its gain was not reproduced" in said
    assert "--resume" not in said  # a resume would not confirm it


@pytest.mark.parametrize(("during", "status"), [(True, CUT), (False, NOT_RUN)])
def test_a_confirmation_cut_or_never_run_writes_no_overlay_and_a_resume_makes_it(
    tmp_path, during, status
):
    """^C during the confirmation's start of the overlay (start 3, after the start's fresh
    one), or right after the candidate's start (the confirmation never begins): no overlay,
    apply refuses naming it and the resume that confirms it; that resume makes the
    confirmation, and then the overlay is written."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    executor = Stopping(graphs_off(3.0), during=during)
    search, summary = tune(run_dir, executor)
    assert (summary["confirmed"], summary["confirmation"]) == (False, status)
    assert summary["overlay"] == {} and yaml.safe_load((run_dir / "tuned.yaml").read_text()) == {}
    command = summary["confirmation_command"]
    assert command.startswith(f"glm5svc tune run --resume {run_dir} --budget ")
    assert command in (run_dir / "tuned.yaml").read_text()
    said = refused(run_dir, config(tmp_path))
    headline = "was interrupted" if during else "never ran"
    assert f"the confirmation {headline}" in said and command in said
    assert "not reproduced" not in said

    resumed = Executor(graphs_off(3.0))
    search, summary = tune(run_dir, resumed)
    # The confirmation only, fresh starts of the start and the overlay as written, going on
    # from the starts it measured whole: the cut one (the overlay's) is made again.
    made = [{GRAPHS: False}] if during else [START, {GRAPHS: False}]
    assert [c for c, _ in resumed.calls][: len(made)] == made
    assert all(r.confirming for r in search.records[-len(resumed.calls) :])
    assert (summary["confirmed"], summary["confirmation"]) == (True, CONFIRMED)
    assert summary["overlay"] == {"tuning": {"cuda_graph": False}}


def test_a_resume_of_a_confirmed_run_keeps_its_confirmation(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    tune(run_dir, Executor(graphs_off(3.0)))
    again = Executor(graphs_off(3.0))
    search, summary = tune(run_dir, again)
    assert again.calls == []  # every setting measured, the best confirmed
    assert (summary["confirmed"], summary["confirmation"]) == (True, CONFIRMED)
    assert summary["overlay"] == {"tuning": {"cuda_graph": False}}


def test_nothing_better_than_the_start_is_no_change_and_apply_changes_nothing(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    search, summary = tune(run_dir, Executor(graphs_off(0.5)))
    assert (summary["confirmed"], summary["confirmation"]) == (False, NO_CHANGE)
    assert summary["overlay"] == summary["best_changes"] == {}
    path = config(tmp_path)
    result = apply_tune(run_dir, str(path), restart=False, force=True)
    assert result["changed"] == {} and "nothing to apply" in result["messages"][0]
    assert path.read_text() == "tuning: {cuda_graph: true}\n"
    assert json.loads((run_dir / "summary.json").read_text())["confirmation"] == NO_CHANGE
    assert (
        result_lines(summary)[-1] == "nothing to apply: no setting measured better than the start"
    )


@pytest.mark.parametrize(
    ("gain", "holds", "last"),
    [
        (3.0, True, "apply it: glm5svc tune apply "),
        (3.0, False, "not applied: the confirmation failed: its gain was not reproduced"),
    ],
)
def test_tune_show_ends_with_the_head_lines_the_run_printed(tmp_path, capsys, gain, holds, last):
    """The best, its gain, the confirmation, how it stopped, and apply it (or why nothing
    is applied, in apply's words): the same at the run's end and in `tune show`."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    executor = Executor(lambda c: 0.0)
    executor.model = graphs_off(gain, holds=lambda: holds or not winning(executor))
    search, summary = tune(run_dir, executor)
    _print_result(summary)
    printed = capsys.readouterr().out.splitlines()
    assert main(["tune", "show", str(run_dir)]) == 0
    shown = capsys.readouterr().out.splitlines()
    head = result_lines(summary)
    assert printed[-len(head) :] == head == shown[-len(head) :]
    assert head[0].startswith("best: trial ") and head[-1].startswith(last)
    assert any(line.startswith("confirmation: ") for line in head)
    if holds:  # confirmed: the overlay written, and said so
        assert (summary["confirmed"], summary["confirmation"]) == (True, CONFIRMED)
        assert summary["confirmation_detail"].startswith("confirmed by a fresh test")
        assert summary["confirmation_command"] is None
        overlay = {"tuning": {"cuda_graph": False}}
        assert summary["overlay"] == summary["best_changes"] == overlay
        assert yaml.safe_load((run_dir / "tuned.yaml").read_text()) == overlay
