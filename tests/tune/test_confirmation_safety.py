"""The confirmation's safety, on the real Search with the stand-in executor: a resume confirms
the current best (never inherits an earlier best's confirmation) and `tune apply` refuses an
overlay its confirmation did not test; confirming starts stay out of the screening
evidence; a cap that rides along with a restart gain without its own comparison saying
better is not written; a cut confirmation is recorded as cut, with what it measured, and a
resume continues it; a better cap below the start's is confirmed in one start, live."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from glm5svc.tune.apply import NotConfirmed, refused_by_confirmation
from glm5svc.tune.confirmation import CONFIRMED, CUT, FAILED, NOT_RUN, of_run
from glm5svc.tune.evidence import paired_windows, start_records_of
from glm5svc.tune.evidence import setting_key as _key
from glm5svc.tune.in_start import InStartConfirmation
from glm5svc.tune.outputs import SUMMARY_FILE, TUNED_FILE, write_outputs
from glm5svc.tune.report import result_lines
from glm5svc.tune.search import Search, SearchSettings
from glm5svc.tune.space import Knob, Space
from tests.tune.test_search import CAP, Executor

GRAPHS = "tuning.cuda_graph"


@pytest.fixture(autouse=True)
def no_plot(monkeypatch):
    monkeypatch.setattr("glm5svc.tune.outputs._write_plot", lambda *args: None)


def tune(run_dir: Path, space: Space, start: dict, executor, stop=lambda search: False,
         **settings) -> tuple[Search, dict]:  # fmt: skip
    """A Search (resumed when `run_dir` holds one) and what the tune writes for it, as
    glm5svc/tune/session.py does; `stop(search)` is its signal."""
    run_dir.mkdir(parents=True, exist_ok=True)
    holder: list[Search] = []
    search = Search(space, {}, start, SearchSettings(**settings), run_dir, executor,
                    should_stop=lambda: stop(holder[0]))  # fmt: skip
    holder.append(search)
    executor.search = search
    search.replay()
    search.run()
    summary = write_outputs(
        run_dir, search.records, search.best, start,
        {**of_run(search, str(run_dir)).to_summary(), "stopped_by": search.stopped_by},
        search.settings, lambda a, b: search.combo_key(a) == search.combo_key(b),
        search.combo_key,
    )  # fmt: skip
    return search, summary


def confirming_calls(executor) -> list:
    """The engine starts the executor made after the search's pick (the confirmation's)."""
    return executor.calls[executor.picked_at :] if executor.picked_at is not None else []


class Watched(Executor):
    """The stand-in engine, noting how many starts it had made when the search picked."""

    picked_at: int | None = None
    search: Search | None = None

    def __call__(self, number, candidate, mapping, decide, deadline, live_values):
        if self.picked_at is None and self.search and self.search.picked_at is not None:
            self.picked_at = len(self.calls)
        return super().__call__(number, candidate, mapping, decide, deadline, live_values)


# ----- a resume confirms the current best ------------------------------------------------

CAP_AND_GRAPHS = Space(
    [Knob(CAP, (8, 64), restart=False), Knob(GRAPHS, (False, True), kv_pool=True)], "test"
)
GRAPHS_OFF_CAP_8 = {CAP: 8, GRAPHS: False}


def cap_then_graphs(candidate) -> float:
    """A cap of 8 bounds the load (64 serves 4x); CUDA graphs on serve 1.5x."""
    return 1000.0 * min(candidate[CAP], 32) / 8 * (1.5 if candidate[GRAPHS] else 1.0)


def test_a_resume_confirms_its_new_best_and_never_inherits_the_old_ones(tmp_path):
    """Run 1 (one start: the screen, and cap 64 confirmed on fresh rounds in it) confirms
    cap 64; the resume screens graphs on, which becomes the best: it owes, and makes, its
    own confirmation; the overlay written is the one that confirmation tested."""
    run_dir = tmp_path / "run"
    first, summary = tune(run_dir, CAP_AND_GRAPHS, GRAPHS_OFF_CAP_8, Executor(cap_then_graphs),
                          max_trials=1)  # fmt: skip
    assert first.best.candidate == {CAP: 64, GRAPHS: False}
    assert summary["confirmation"] == CONFIRMED
    assert summary["overlay"] == {"tuning": {"max_running_requests": 64}}
    first_said = summary["confirmation_detail"]

    resumed = Watched(cap_then_graphs, seed=2)
    search, summary = tune(run_dir, CAP_AND_GRAPHS, GRAPHS_OFF_CAP_8, resumed)
    new_best = {CAP: 64, GRAPHS: True}
    assert search.best.candidate == new_best
    made = confirming_calls(resumed)
    assert made, "the new best was written without a confirming start of its own"
    assert {json.dumps(c, sort_keys=True) for c, _ in made} == {
        json.dumps(c, sort_keys=True) for c in (GRAPHS_OFF_CAP_8, new_best)
    }  # fresh starts of the start and of the new overlay, as written
    assert summary["confirmation"] == CONFIRMED
    assert summary["confirmation_detail"] != first_said
    overlay = {"tuning": {"max_running_requests": 64, "cuda_graph": True}}
    assert summary["overlay"] == overlay == summary["confirmation_for"]["overlay"]
    refused_by_confirmation(run_dir)  # the confirmation is of exactly this overlay


def test_tune_apply_refuses_an_overlay_its_confirmation_did_not_test(tmp_path):
    """What today's resume wrote: tuned.yaml holding graphs on and cap 64 under run 1's
    confirmation of cap 64 alone. `tune apply` refuses it, naming the resume that confirms
    it; so it does a summary that names no tested configuration (an older glm5svc)."""
    run_dir = tmp_path / "run"
    tune(run_dir, CAP_AND_GRAPHS, GRAPHS_OFF_CAP_8, Executor(cap_then_graphs), max_trials=2)
    refused_by_confirmation(run_dir)
    tuned = run_dir / TUNED_FILE
    tuned.write_text(yaml.safe_dump({"tuning": {"max_running_requests": 64, "cuda_graph": True}}))
    with pytest.raises(NotConfirmed) as caught:
        refused_by_confirmation(run_dir)
    said = str(caught.value)
    assert "is not the configuration its confirmation tested" in said
    assert f"`glm5svc tune run --resume {run_dir}`" in said

    summary = json.loads((run_dir / SUMMARY_FILE).read_text())
    del summary["confirmation_for"]
    (run_dir / SUMMARY_FILE).write_text(json.dumps(summary))
    tuned.write_text(yaml.safe_dump(summary["overlay"]))
    with pytest.raises(NotConfirmed) as caught:
        refused_by_confirmation(run_dir)
    assert "does not name the configuration its confirmation tested" in str(caught.value)


def test_a_confirmation_an_older_glm5svc_recorded_holds_for_its_own_best(tmp_path):
    """A study whose confirmation names only its best's record (an older glm5svc): a resume
    that finds no other best keeps it, makes no start, and names the overlay it tested, so
    `tune apply` accepts the run the resume rewrote."""
    run_dir = tmp_path / "run"
    first, _ = tune(run_dir, CAP_AND_GRAPHS, GRAPHS_OFF_CAP_8, Executor(cap_then_graphs),
                    max_trials=2)  # fmt: skip
    decided = first.study.user_attrs["confirmation"]
    older = {k: decided[k] for k in ("outcome", "text", "best", "gain")}
    first.study.set_user_attr("confirmation", older)
    again = Executor(cap_then_graphs)
    search, summary = tune(run_dir, CAP_AND_GRAPHS, GRAPHS_OFF_CAP_8, again, max_trials=2)
    assert again.calls == []
    assert summary["confirmation"] == CONFIRMED
    assert summary["confirmation_for"]["overlay"] == {"tuning": {"max_running_requests": 64}}
    refused_by_confirmation(run_dir)


# ----- confirming starts stay out of the screening evidence ------------------------------


def test_confirming_starts_are_never_screening_evidence(tmp_path):
    """After run 1's confirming start of cap 64 (both caps, live), the resume's screen of
    graphs on compares against cap 64's screening start only: no start model row, no
    paired window comes from a confirming start."""
    run_dir = tmp_path / "run"
    tune(run_dir, CAP_AND_GRAPHS, GRAPHS_OFF_CAP_8, Executor(cap_then_graphs), max_trials=2)
    search, _ = tune(run_dir, CAP_AND_GRAPHS, GRAPHS_OFF_CAP_8, Watched(cap_then_graphs))
    confirming = [r for r in search.records if r.confirming]
    assert confirming
    rows = start_records_of(search.records, search.combo_key)
    # Each row is a screening record's mean (a start may hold both: the in-start
    # confirmation's fresh rounds are records of their own); none is a confirming one's.
    screening = {(_key(r.candidate), r.start): r.mean for r in search.records
                 if not r.confirming and r.status == "measured"}  # fmt: skip
    assert rows and all(screening[(row.setting, row.order)] == row.throughput for row in rows)
    only_confirming = {r.start for r in confirming} - {start for _, start in screening}
    assert not {row.order for row in rows} & only_confirming
    cap_64 = {CAP: 64, GRAPHS: False}
    mine, _ = paired_windows(search.records, cap_64, GRAPHS_OFF_CAP_8)
    screened = sum(
        len(r.runs) for r in search.records
        if r.candidate == cap_64 and not r.confirming and r.status == "measured"
    )  # fmt: skip
    assert len(mine) == screened  # the confirming start's pairs are not among them


@pytest.fixture
def fresh_start_confirmation(monkeypatch):
    """The confirmation by a fresh engine start, as when the start that found the cap could
    not confirm it in place (in_start.py; cut, or its engine not the overlay as written)."""
    monkeypatch.setattr(InStartConfirmation, "for_start", classmethod(lambda *a: None))


# ----- a knob whose own comparison is not better is not written --------------------------

THREE_CAPS = Space(
    [Knob(CAP, (64, 256, 1024), restart=False), Knob(GRAPHS, (True, False), kv_pool=True)],
    "test",
)
GRAPHS_ON_CAP_64 = {CAP: 64, GRAPHS: True}


def graphs_off(cap_gain: float = 1.0):
    """Graphs off serve 1.5x; a cap above 64 serves `cap_gain` (1.0: no effect)."""
    return lambda c: 1000.0 * (1.5 if not c[GRAPHS] else 1.0) * (cap_gain if c[CAP] > 64 else 1)


def test_a_no_effect_cap_riding_with_a_restart_gain_is_not_written(
    tmp_path, fresh_start_confirmation
):
    """Graphs off is a real +50 %; the cap has no effect, and the screen's best has graphs
    off at cap 256 (the best of three noisy caps, this seed). The overlay holds graphs off
    only, the cap stays at the start's 64, the confirmation tests exactly that, and the
    summary and tuned.yaml say why."""
    run_dir = tmp_path / "run"
    executor = Watched(graphs_off(), noise=0.03, seed=3)
    search, summary = tune(run_dir, THREE_CAPS, GRAPHS_ON_CAP_64, executor)
    assert search.best.candidate == {CAP: 256, GRAPHS: False}  # the cap rides along
    assert summary["best_changes"] == {"tuning": {"max_running_requests": 256, "cuda_graph": False}}
    assert summary["confirmation"] == CONFIRMED, summary["confirmation_detail"]
    assert summary["written_setting"] == {CAP: 64, GRAPHS: False}
    assert summary["overlay"] == {"tuning": {"cuda_graph": False}}
    assert confirming_calls(executor) and all(c[CAP] == 64 for c, _ in confirming_calls(executor))
    assert "its own comparison is not better" in summary["left_at_start"][0]
    tuned = (run_dir / TUNED_FILE).read_text()
    assert "Not written: max_running_requests stays at the start's 64" in tuned
    said = [line for line in result_lines(summary) if line.startswith("not written: ")]
    assert said == [f"not written: {summary['left_at_start'][0]}"]
    assert yaml.safe_load(tuned) == {"tuning": {"cuda_graph": False}}


def test_a_cap_with_its_own_gain_is_written_beside_the_restart_gain(tmp_path):
    executor = Watched(graphs_off(cap_gain=1.4), noise=0.01)
    search, summary = tune(tmp_path / "run", THREE_CAPS, GRAPHS_ON_CAP_64, executor)
    assert search.best.candidate[CAP] > 64
    assert summary["confirmation"] == CONFIRMED
    assert summary["overlay"]["tuning"]["cuda_graph"] is False
    assert summary["overlay"]["tuning"]["max_running_requests"] > 64
    assert summary["left_at_start"] == []


# ----- a cut confirmation is recorded as cut and resumable -------------------------------

CAP_ONLY = Space([Knob(CAP, (8, 64), restart=False)], "test")
CAP_8 = {CAP: 8}


class Confirming(Watched):
    """Cap 64 serves 2x; the confirming start's windows of cap 64 swing (x2, x0.25), so its
    first look is undecided; a signal once it has measured `cut_at` rounds."""

    def __init__(self, cut_at: int | None = None, swing: bool = True):
        super().__init__(lambda c: 1000.0 * (2.0 if c[CAP] == 64 else 1.0))
        self.cut_at, self.swing, self.rounds = cut_at, swing, 0
        base = self.model

        def model(c):
            if self.search.picked_at is None or not self.swing or c[CAP] != 64:
                return base(c)
            self.rounds += 1
            return base(c) * (2.0 if self.rounds % 2 else 0.25)

        self.model = model

    def stopped(self) -> bool:
        return self.cut_at is not None and self.rounds >= self.cut_at


SETTINGS = {"max_repeats": 4}  # the confirming start plans 8 pairs, looked at 4 and 8


@pytest.mark.parametrize(("cut_at", "measured"), [(6, 6), (2, 2)])
def test_a_cut_confirmation_is_recorded_as_cut_with_what_it_measured(
    tmp_path, fresh_start_confirmation, cut_at, measured
):
    """A signal in the second half of the confirming start (after its undecided first look)
    or before halfway: the run records "cut" with the pairs measured, never "failed" or
    "no confirming start was made", and names the resume that continues it."""
    run_dir = tmp_path / "run"
    executor = Confirming(cut_at)
    search, summary = tune(run_dir, CAP_ONLY, CAP_8, executor,
                           stop=lambda s: executor.stopped(), **SETTINGS)  # fmt: skip
    assert len(confirming_calls(executor)) == 1  # one confirming start was made
    assert summary["confirmation"] == CUT, summary["confirmation_detail"]
    assert summary["confirmation"] not in (FAILED, NOT_RUN)
    detail = summary["confirmation_detail"]
    assert detail.startswith("its confirming start was cut: stopped by a signal")
    assert f"measured so far: {measured} of 8 paired windows" in detail
    assert summary["confirmation_command"].startswith(f"glm5svc tune run --resume {run_dir}")
    assert summary["overlay"] == {}
    with pytest.raises(NotConfirmed):
        refused_by_confirmation(run_dir)


def test_a_resume_continues_a_cut_confirmation_to_its_planned_look(
    tmp_path, fresh_start_confirmation
):
    """Cut after 6 of 8 planned pairs: the resume's confirming start measures the 2 left
    and the verdict is the planned second look over all 8 (the cut start's 6 and its 2)."""
    run_dir = tmp_path / "run"
    executor = Confirming(cut_at=6)
    tune(run_dir, CAP_ONLY, CAP_8, executor, stop=lambda s: executor.stopped(), **SETTINGS)
    resumed = Confirming(swing=False)
    search, summary = tune(run_dir, CAP_ONLY, CAP_8, resumed, **SETTINGS)
    assert [live for _, live in resumed.calls] == [(64, 8)]  # the confirmation only
    assert resumed.decided[0][-1] == 2  # the two pairs the plan still wanted
    assert summary["confirmation"] in (CONFIRMED, FAILED)  # decided, not cut again
    assert "over 8 paired window(s), look 2" in summary["confirmation_detail"]


# ----- a better cap below the start's, confirmed in one start -----------------------------

LOWER_CAP = Space([Knob(CAP, (1024, 64), restart=False)], "test")
CAP_1024 = {CAP: 1024}


def test_a_better_cap_below_the_starts_is_confirmed_in_one_start_live(tmp_path):
    """Cap 64 serves 10 % more than the start's 1024. The engine started with 1024 sets 64
    live, so one fresh start measures both caps in paired windows and confirms it."""
    executor = Watched(lambda c: 1000.0 * (1.1 if c[CAP] == 64 else 1.0), noise=0.02)
    search, summary = tune(tmp_path / "run", LOWER_CAP, CAP_1024, executor)
    assert search.best.candidate == {CAP: 64}
    made = confirming_calls(executor)
    assert made == [(CAP_1024, (64, 1024))]  # started as the start, 64 set live beside it
    assert summary["confirmation"] == CONFIRMED, summary["confirmation_detail"]
    assert "set live on an engine started as the start" in summary["confirmation_detail"]
    assert summary["overlay"] == {"tuning": {"max_running_requests": 64}}
    verdicts = [r.verdict for r in search.records if r.confirming]
    assert sorted(verdicts) == [
        "the confirmation: the overlay's cap, set live",
        "the confirmation: the start as written",
    ]
