"""The noise attribution on synthetic windows whose sources are known: a source that drives
the throughput is found and its share measured, one that does not is not, the spreads
within and between starts come apart, and the measured quantities that remove a source's
spread do so. Also the windows cut from a recorder's seconds and read from a folder."""

from __future__ import annotations

import json
import random

import pytest

from glm5svc.tune.noise import (
    SOURCES,
    Row,
    attribute,
    objective,
    removable,
    report,
    rows_from_folder,
    rows_from_lines,
    sources_of,
    spread,
)

BASE = 6000.0


def windows(seed: int, starts: int = 3, per_start: int = 12, clock_effect: float = 1.0,
            start_effect: float = 0.0, noise: float = 0.01, warmup: int = 0,
            running_effect: float = 0.0) -> list[Row]:  # fmt: skip
    """Windows whose throughput is BASE x (clock / 1900) ** clock_effect x (running / 250) **
    running_effect x the start's factor x lognormal noise; the other sources random."""
    rng = random.Random(seed)
    rows = []
    for start in range(starts):
        factor = 1 + start_effect * (start - (starts - 1) / 2)
        for index in range(warmup + per_start):
            sources = {name: rng.uniform(0, 1) for name in SOURCES}
            clock = rng.gauss(1900, 60)
            running = rng.uniform(230, 262)
            sources.update(sm_clock_mhz=clock, running=running)
            value = BASE * (clock / 1900) ** clock_effect * factor * rng.lognormvariate(0, noise)
            value *= (running / 250) ** running_effect
            kind = "warmup" if index < warmup else "time"
            if kind == "warmup":
                value *= 0.7
            rows.append(Row(start, index, kind, value, sources))
    return rows


def test_a_source_that_drives_the_throughput_is_found_and_the_others_are_not():
    rows = windows(1)
    found = attribute(rows)
    assert found.chosen[0][0] == "sm_clock_mhz"
    assert found.alone["sm_clock_mhz"] > 0.8
    assert max(v for k, v in found.alone.items() if k != "sm_clock_mhz") < 0.3  # chance
    assert [name for name, _ in found.chosen] == ["sm_clock_mhz"]
    assert found.explained >= found.alone["sm_clock_mhz"] > 0.8
    assert found.residual_spread < found.spread / 2
    assert found.slopes["sm_clock_mhz"] == pytest.approx(BASE / 1900, rel=0.15)
    assert sum(share for _, share in found.chosen) == pytest.approx(found.explained, abs=1e-3)


def test_pure_noise_is_left_as_residual():
    found = attribute(windows(2, clock_effect=0.0, noise=0.05))
    assert found.explained < 0.25
    assert found.residual_spread == pytest.approx(found.spread, rel=0.2)


def test_two_sources_each_get_their_share():
    found = attribute(windows(3, running_effect=1.0))
    chosen = dict(found.chosen)
    assert {"sm_clock_mhz", "running"} <= set(chosen)
    assert found.explained > 0.8
    assert found.alone["running"] > 0.15 and found.alone["sm_clock_mhz"] > 0.15


def test_a_source_unknown_in_a_window_or_constant_is_left_out():
    rows = windows(4)
    rows[0].sources["power_w"] = None
    for row in rows:
        row.sources["queued"] = 0.0
    found = attribute(rows)
    assert {"power_w", "queued"} <= set(found.left_out)
    assert "power_w" not in found.alone


def test_the_spread_within_starts_and_between_them_come_apart():
    steady = spread(windows(5, clock_effect=0.0, start_effect=0.0, noise=0.03))
    moved = spread(windows(5, clock_effect=0.0, start_effect=0.2, noise=0.03))
    assert steady["within_start"] == pytest.approx(0.03, rel=0.35)
    assert moved["within_start"] == pytest.approx(0.03, rel=0.35)
    assert steady["between_starts"] < 0.02
    assert moved["between_starts"] == pytest.approx(0.2, rel=0.3)
    assert moved["start_to_start"] > 5 * steady["start_to_start"]
    assert len(moved["start_means"]) == moved["starts"] == 3


def test_what_removes_a_source_removes_its_spread():
    rows = windows(6, warmup=2)
    found = removable(rows)
    raw, measured = found["with the warm-up windows"], found["throughput"]
    assert measured["within_start"] < raw["within_start"]  # the warm-up windows run low
    assert found["at the mean SM clock"]["within_start"] < measured["within_start"] / 2
    assert found["after the fitted sources"]["within_start"] < 0.02
    by_batch = removable(windows(6, clock_effect=0.0, running_effect=1.0))
    assert (by_batch["per running request"]["within_start"]
            < by_batch["throughput"]["within_start"] / 2)  # fmt: skip
    assert by_batch["at the mean SM clock"]["within_start"] == pytest.approx(
        by_batch["throughput"]["within_start"], rel=0.2
    )  # the clock moved but drove nothing


def test_the_report_attributes_within_starts_without_the_start_effect():
    rows = windows(7, clock_effect=0.0, start_effect=0.3, noise=0.02)
    for row in rows:  # a source that only tells the starts apart
        row.sources["temperature_c"] = 40.0 + 10 * row.start + 0.01 * row.index
    found = report(rows)
    assert found["windows"]["alone"]["temperature_c"] > 0.8  # across starts it "explains"
    assert found["within_starts"]["alone"].get("temperature_c", 0.0) < 0.3  # within, not
    assert set(found["start_sources"]) == {0, 1, 2}


def lines_at(rate: float, seconds: int, **extra) -> list[dict]:
    """A recorder's lines: cumulative counters at `rate` tokens/s, a fifth of them prefill,
    8 decode passes a second (6 of them in a graph), 100 sends a second, 2 ms gaps."""
    lines = []
    for t in range(seconds + 1):
        lines.append({
            "t": float(t), "unix": 1000.0 + t, "prefill_compute": 0.2 * rate * t,
            "prefill_cache": 0.0, "decode": 0.8 * rate * t, "running": 250.0, "queued": 4.0,
            "passes": {"decode_cuda_graph": 6.0 * t, "decode_none": 2.0 * t,
                       "prefill_cuda_graph": 1.0 * t},
            "gaps": 100 * t, "gap_total_s": 0.2 * t, "in_flight": 256,
            "sm_clock_mhz": 1980.0, "throttle_reasons": 0x4 if t % 2 else 0x1, **extra,
        })  # fmt: skip
    return lines


def test_the_sources_of_a_window_come_from_its_seconds():
    found = sources_of(lines_at(1000.0, 10))
    assert found["prefill_share"] == pytest.approx(0.2)
    assert found["passes_per_s"] == pytest.approx(8.0)
    assert found["decode_graph_share"] == pytest.approx(0.75)
    assert found["send_gap_ms"] == pytest.approx(2.0)
    assert found["throttled"] == pytest.approx(5 / 11)  # the power cap, not idle
    assert found["running"] == 250 and found["power_w"] is None


def test_windows_cut_from_the_seconds_alone():
    rows = rows_from_lines(0, lines_at(1000.0, 35), window_s=10, warmup_s=10)
    assert [r.kind for r in rows] == ["warmup", "seconds", "seconds"]
    assert all(r.throughput == pytest.approx(1000.0) for r in rows)
    assert all(r.throughput == pytest.approx(800.0) for r in objective(rows, "output"))


def test_a_recorded_noise_folder_is_read_and_an_empty_one_refused(tmp_path):
    folder = tmp_path / "noise"
    (folder / "start1").mkdir(parents=True)
    lines = lines_at(1000.0, 30)
    header = {"schema": "glm5svc.seconds/1"}
    (folder / "start1" / "seconds.jsonl").write_text(
        "\n".join(json.dumps(x) for x in [header, *lines]) + "\n"
    )
    recorded = [{"kind": "time", "index": i, "throughput": 1000.0 + i, "output_throughput": 9.0,
                 "began_unix": 1000.0 + 10 * i, "ended_unix": 1010.0 + 10 * i}
                for i in range(3)]  # fmt: skip
    (folder / "start1-windows.json").write_text(json.dumps({"windows": recorded}))
    rows = rows_from_folder(folder)
    assert [(r.start, r.throughput) for r in rows] == [(1, 1000.0), (1, 1001.0), (1, 1002.0)]
    assert rows[1].sources["passes_per_s"] == pytest.approx(8.0)
    assert [r.throughput for r in objective(rows, "output")] == [9.0] * 3
    with pytest.raises(ValueError, match="no output tokens/s"):
        objective([Row(0, 0, "time", 1.0)], "output")
    with pytest.raises(ValueError, match="no windows with their seconds"):
        rows_from_folder(tmp_path / "empty")
