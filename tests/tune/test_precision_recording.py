"""The H200 precision recording (lab/gpu/precision_scenario.py) read by its figures: the
curve the tune's window comes from, the start spread its prior comes from, and the TTFT
that only a streaming client sees."""

from __future__ import annotations

from glm5svc.tune.decision import PRIOR_START_SPREAD
from lab.gpu.precision_figures import FIXTURE, figures, load, segments


def test_the_recording_has_every_read_of_each_start_and_its_phases():
    starts = load(FIXTURE)
    assert len(starts) >= 3
    for start in starts:
        times = [read["t"] for read in start["reads"]]
        assert times == sorted(times) and len(times) > 60
        gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
        assert max(gaps) < 3  # read about every second
    caps = {part.cap for part in segments(starts)}
    assert {64, 192, 1024} <= caps


def test_windows_spread_less_as_they_grow_and_more_above_the_concurrency():
    curve = figures(FIXTURE)["curve"]["output"]
    above = curve["above"]
    assert above[5]["cv"] > above[10]["cv"] > above[20]["cv"]
    assert curve["below"][5]["cv"] < above[5]["cv"]


def test_the_prior_is_no_narrower_than_the_starts_the_h200_showed():
    spread = figures(FIXTURE)["start_spread"]["output"]
    shown = [v["spread"] for v in spread.values() if v["spread"] is not None]
    assert shown and PRIOR_START_SPREAD >= max(shown)


def test_non_streamed_ttft_in_sglang_s_histogram_is_the_whole_request():
    """The histogram's TTFT median is many times the streaming probes' at cap 1024, while its
    inter-token latency is close to theirs (1-14 % apart over the recorded phases)."""
    rows = [r for r in figures(FIXTURE)["latency"] if r["cap"] == 1024]
    assert rows
    for row in rows:
        assert row["histogram_ttft_p50_ms"] > 10 * row["streamed_ttft_p50_ms"]
        assert abs(row["histogram_itl_p50_ms"] / row["streamed_itl_p50_ms"] - 1) < 0.15
