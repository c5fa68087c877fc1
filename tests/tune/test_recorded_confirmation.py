"""No overlay without a confirmation: the real Search on the recorded-noise stand-in engine
(testkit/recorded_engine.py) promotes a clear restart gain, and the tune's files
(glm5svc.tune.outputs.write_outputs) carry it only when a fresh start confirmed it; a
confirming start that failed, was cut, or was never made writes no change, and
`tune apply` refuses the run."""

from __future__ import annotations

import random

import pytest

from glm5svc.tune.apply import NotConfirmed, refused_by_confirmation
from glm5svc.tune.confirmation import of_run
from glm5svc.tune.outputs import TUNED_FILE, write_outputs
from glm5svc.tune.search import Search
from glm5svc.tune.settings import SearchSettings
from glm5svc.tune.space import Knob, Space
from testkit.recorded_engine import RecordedEngine
from testkit.recorded_noise import Resampler, load_recording, synthetic_reads, write_recording

GRAPHS = "tuning.cuda_graph"
SPACE = Space([Knob(GRAPHS, (False, True), kv_pool=True)], "test")
START = {GRAPHS: False}
WINDOW_S = 5.0


@pytest.fixture
def recording(tmp_path):
    """Three starts within 2 % of each other, seconds within 5 %."""
    starts = [
        synthetic_reads([(256, 3), (256, 40)], [v * level for v in (100.0, 104.0, 97.0, 101.0)])
        for level in (1.0, 1.02, 0.99)
    ]
    return load_recording(write_recording(tmp_path / "recorded", starts), settle_s=0)


def tune(tmp_path, recording, **options):
    """A tune of CUDA graphs (+30 %). `options`: `fail_confirming` (the starts made after
    the pick fail), `stop(search, engine)` (the search's and the engine's stop signal), the
    search's `settings`. The confirming starts are those made after the search's pick."""
    stop = options.pop("stop", lambda search, engine: False)
    fail_confirming = options.pop("fail_confirming", False)
    settings = SearchSettings(window_s=WINDOW_S, **options.pop("settings", {}))
    resampler = Resampler(recording, 256, WINDOW_S, random.Random(0))
    holder: list[Search] = []
    engine = RecordedEngine(
        resampler,
        lambda s: 1.3 if s[GRAPHS] else 1.0,
        None,
        WINDOW_S,
        fail_start=lambda number, candidate: fail_confirming and holder[0].picked_at is not None,
    )
    run_dir = tmp_path / "run"
    run_dir.mkdir(parents=True)
    engine.should_stop = lambda: stop(holder[0], engine)
    search = Search(SPACE, {}, START, settings, run_dir, engine,
                    should_stop=lambda: stop(search, engine))  # fmt: skip
    holder.append(search)
    search.run()
    summary = write_outputs(
        run_dir, search.records, search.best, START,
        {"stopped_by": search.stopped_by, **of_run(search, str(run_dir)).to_summary()},
        settings, lambda a, b: search.combo_key(a) == search.combo_key(b), search.combo_key,
    )  # fmt: skip
    return search, engine, summary, run_dir


def screening_starts(tmp_path, recording) -> int:
    """The starts the search made before its pick, in the tune with nothing in its way."""
    picked: list[int] = []

    def at_pick(search, engine):
        if search.picked_at is not None and not picked:
            picked.append(engine.starts)
        return False

    tune(tmp_path / "screen", recording, stop=at_pick)
    return picked[0]


def after_the_pick_and_a_start(search, engine, seen={}):  # noqa: B006 - one tune's memory
    """Stops once a start made after the pick has begun: the confirming start is cut."""
    if search.picked_at is None:
        return False
    seen.setdefault(id(search), engine.starts)
    return engine.starts > seen[id(search)]


def assert_nothing_written(search, summary, run_dir):
    assert search.best.candidate == {GRAPHS: True}  # the screen promoted the gain
    assert search.confirmed is not True
    assert summary["overlay"] == {}, (search.confirmed, search.confirmation)
    assert (run_dir / TUNED_FILE).read_text().rstrip().endswith("{}")
    with pytest.raises(NotConfirmed):
        refused_by_confirmation(run_dir)


def test_a_confirmed_gain_is_written(tmp_path, recording):
    search, engine, summary, run_dir = tune(tmp_path, recording)
    assert search.confirmed is True, search.confirmation
    assert summary["overlay"] == {"tuning": {"cuda_graph": True}}
    refused_by_confirmation(run_dir)  # nothing to refuse


def test_a_failed_confirming_start_writes_nothing(tmp_path, recording):
    search, engine, summary, run_dir = tune(tmp_path, recording, fail_confirming=True)
    assert "failed" in search.confirmation
    assert_nothing_written(search, summary, run_dir)


def test_a_confirming_start_cut_by_a_signal_writes_nothing(tmp_path, recording):
    search, engine, summary, run_dir = tune(tmp_path, recording, stop=after_the_pick_and_a_start)
    assert search.confirmation.startswith("not confirmed: the confirmation was cut")
    assert_nothing_written(search, summary, run_dir)


def test_a_signal_before_the_confirming_start_writes_nothing(tmp_path, recording):
    screened = screening_starts(tmp_path, recording)
    search, engine, summary, run_dir = tune(
        tmp_path, recording, stop=lambda search, engine: search.picked_at is not None
    )
    assert engine.starts == screened  # no confirming start was made
    assert search.confirmation.startswith("not confirmed: the confirmation was cut")
    assert_nothing_written(search, summary, run_dir)


def test_no_trial_left_for_the_confirming_start_writes_nothing(tmp_path, recording):
    screened = screening_starts(tmp_path, recording)
    search, engine, summary, run_dir = tune(tmp_path, recording, settings={"max_trials": screened})
    assert engine.starts <= screened
    assert "--max-trials" in search.confirmation
    assert_nothing_written(search, summary, run_dir)
