"""The resampler of recorded engine reads (testkit/recorded_noise.py) and the stand-in engine
built on it (testkit/recorded_engine.py), on small recordings written here."""

from __future__ import annotations

import random
import statistics

import pytest

from glm5svc.tune.trial import CONTINUE, STOP
from testkit.recorded_engine import RecordedEngine
from testkit.recorded_noise import (
    OUTPUT,
    RecordingError,
    Resampler,
    load_recording,
    series_of_start,
    synthetic_reads,
    write_recording,
)


def test_the_warm_up_the_settle_and_the_cap_change_are_left_out():
    data = synthetic_reads([(1024, 5), (1024, 6), (64, 8)], rates=[100.0])
    series = series_of_start(data, 1, settle_s=3.0)
    assert [(s.cap, len(s.seconds)) for s in series] == [(1024, 5), (64, 4)]
    # 1024: the 6 reads of phase 1 give 5 intervals (the one from the warm-up is across
    # phases); 64: 7 intervals inside the phase, those that began in its first 3 s left out.
    assert all(rate == 100.0 for rate in series[0].output)
    assert all(total == 110.0 for total in series[0].total)  # prefill + output tokens


def test_phases_at_one_cap_in_a_row_are_one_series():
    data = synthetic_reads([(1024, 5), (1024, 6), (64, 8), (64, 5), (1024, 6)], rates=[100.0])
    series = series_of_start(data, 1, settle_s=3.0)
    # 1024 after the warm-up: 5 intervals; 64: 7 + 4 + the one between its two phases, less
    # the 3 s after the change; 1024 again: 5, less 3.
    assert [(s.cap, len(s.seconds)) for s in series] == [(1024, 5), (64, 9), (1024, 2)]


def test_a_counter_that_goes_back_is_refused_by_start():
    data = synthetic_reads([(1024, 3), (1024, 4)], rates=[100.0])
    data["reads"][-1]["decode"] = 0.0
    with pytest.raises(RecordingError, match="start 7: .* go backwards"):
        series_of_start(data, 7, settle_s=0)


def test_a_folder_without_reads_says_what_writes_them(tmp_path):
    with pytest.raises(RecordingError, match="precision scenario writes them"):
        load_recording(tmp_path, settle_s=4)


def test_a_block_is_the_window_long_and_turns_back_at_the_ends(tmp_path):
    rates = [float(r) for r in range(10, 130, 10)]  # 12 distinct seconds
    folder = write_recording(tmp_path / "rec", [synthetic_reads([(256, 2), (256, 13)], rates)])
    recording = load_recording(folder, settle_s=0)
    (series,) = recording.of_cap(256)
    assert len(series.seconds) == 12
    resampler = Resampler(recording, 256, window_s=5.0, rng=random.Random(1))
    assert resampler.block_intervals == 5 and not resampler.too_long()
    tokens = series.output
    backwards = tokens + tokens[::-1]  # at the end the series turns back, then repeats
    for offset in range(24):
        picked = [backwards[(offset + i) % 24] for i in range(5)]
        assert series.block(offset, 5, OUTPUT) == pytest.approx(sum(picked) / 5)
    last, before = tokens[11], tokens[10]
    assert series.block(10, 4, OUTPUT) == pytest.approx((before + last + last + before) / 4)
    assert Resampler(recording, 256, window_s=7.0, rng=random.Random(1)).too_long()


def test_the_windows_of_a_block_follow_each_other_in_one_series(tmp_path):
    rates = [float(r) for r in range(10, 130, 10)]  # 12 distinct seconds
    folder = write_recording(tmp_path / "rec", [synthetic_reads([(256, 2), (256, 13)], rates)])
    recording = load_recording(folder, settle_s=0)
    (series,) = recording.of_cap(256)
    resampler = Resampler(recording, 256, window_s=2.0, rng=random.Random(4))
    level = resampler.start_level()
    windows = [w[OUTPUT] for w in resampler.windows(level, 4, gap_s=1.0)]
    # one second left out before each 2 s window: windows 3 s apart, forward or backward
    means = {
        offset: [series.block(offset + 1 + 3 * i, 2, OUTPUT) for i in range(4)]
        for offset in range(24)
    }
    assert any(windows == pytest.approx(expected) for expected in means.values()), windows


def test_a_resampled_series_keeps_its_mean(tmp_path):
    starts = [synthetic_reads([(256, 2), (256, 21)], [90.0, 130.0, 100.0, 80.0], t0=10.0 * n)
              for n in range(3)]  # fmt: skip
    starts[1] = synthetic_reads([(256, 2), (256, 21)], [120.0, 150.0, 110.0, 140.0])
    recording = load_recording(write_recording(tmp_path / "rec", starts), settle_s=0)
    for series in recording.of_cap(256):
        n = len(series.seconds)
        blocks = [series.block(offset, 7, OUTPUT) for offset in range(2 * n)]
        assert statistics.fmean(blocks) == pytest.approx(series.rate(OUTPUT))
    resampler = Resampler(recording, 256, window_s=7.0, rng=random.Random(3))
    levels = [resampler.start_level() for _ in range(3000)]
    assert {level.recorded_start for level in levels} == {1, 2, 3}
    means = recording.start_means(256, OUTPUT)
    assert statistics.fmean(means.values()) == pytest.approx(recording.pooled_mean(256, OUTPUT))
    # One start's windows average to its own mean; over starts, to the pooled mean.
    level = next(lv for lv in levels if lv.recorded_start == 2)
    windows = [resampler.window(level)[OUTPUT] for _ in range(4000)]
    expected = recording.pooled_mean(256, OUTPUT) * level.output
    assert statistics.fmean(windows) == pytest.approx(expected, rel=0.01)
    assert recording.start_spread(256, OUTPUT) > 0.05  # start 2 runs higher
    assert "only 3 recorded start(s)" in recording.describe(256, OUTPUT)


def test_the_stand_in_measures_a_b_b_a_and_asks_after_every_round(tmp_path):
    recording = load_recording(
        write_recording(tmp_path / "rec", [synthetic_reads([(256, 2), (256, 30)], [100.0])]),
        settle_s=0,
    )
    resampler = Resampler(recording, 256, window_s=5.0, rng=random.Random(0))
    engine = RecordedEngine(resampler, lambda s: 1.1 if s["cap"] == 2 else 1.0, "cap", 5.0)
    asked: list[int] = []

    def decide(runs):
        asked.append(len(runs))
        return CONTINUE if len(asked) < 2 else STOP

    outcome = engine(0, {"other": 1}, {}, decide, 0.0, (1, 2))
    assert asked == [2, 4]  # after rounds 1 and 2: two values a round
    assert [r.live_value for r in outcome.runs] == [1, 2, 2, 1]
    assert [r.round for r in outcome.runs] == [0, 0, 1, 1]
    flat = {r.live_value: r.output_throughput for r in outcome.runs}
    assert flat[2] == pytest.approx(1.1 * flat[1])  # a constant recording: the truth alone
    assert outcome.runs[0].throughput == pytest.approx(100.0)  # the objective: output tokens
    assert outcome.runs[0].total_throughput == pytest.approx(110.0)  # 100 output + 10 prefill
    assert engine.starts == 1 and engine.windows == 4
    failing = RecordedEngine(resampler, lambda s: 1.0, None, 5.0, fail_start=lambda n, c: True)
    assert failing(0, {}, {}, decide, 0.0, ()).status == "failed"
