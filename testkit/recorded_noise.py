"""The real engine's noise, resampled from its recorded counter reads.

The GPU lab's precision scenario (lab/gpu/precision_scenario.py) reads the engine's /metrics
about once a second through each engine start under one constant load, the live
running-request cap moved through a schedule of phases (phase 0 is the warm-up), and keeps
every read: `start{N}-reads.json`. From those reads, per recorded start and cap, the
per-interval advance of the output tokens (the decode counter) and of the total tokens
(prefill computed + decode), with each interval's length.

A stand-in engine draws from them:
- a start's level: one recorded start's mean for the cap over the pooled mean of every
  recorded start of that cap (so stand-in starts spread as the recorded ones did: with few
  recorded starts, that spread is itself uncertain, and `Recording.describe` says so);
- a window of W seconds: the rate over one contiguous block of W seconds of a recorded
  series of that cap, from any start, at a uniformly drawn offset, turning back at either
  end (the series played forward then backward: a moving-block bootstrap on the series
  reflected, so a block never jumps from the series' last second to its first, which under
  a drift would be a step the engine never made; the autocorrelation within W seconds is
  the engine's own), relative to that series' mean, times the start's level and the pooled
  mean;
- the windows of one A B B A block: consecutive blocks of one such stretch, each after the
  settle, so adjacent windows share the drift the recorded engine showed (which the
  A B B A order is there to cancel). Blocks of windows are drawn independently.
"""

from __future__ import annotations

import json
import math
import random
import statistics
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
H200_PRECISION = REPO / "tests" / "fixtures" / "real_engine" / "sglang-0.5.11-h200-precision"
FEW_STARTS = 5  # fewer recorded starts than this: their spread is a rough estimate
OUTPUT, TOTAL = "output", "total"


class RecordingError(ValueError):
    """A recording that cannot be resampled: which file, and what is wrong with it."""


@dataclass(frozen=True)
class Series:
    """One recorded start's settled seconds at one cap: token advances per read interval."""

    start: int  # the recorded start's number (start{N}-reads.json)
    cap: int
    output: tuple[float, ...]  # output tokens in each interval
    total: tuple[float, ...]  # prefill computed + output tokens in each interval
    seconds: tuple[float, ...]  # each interval's length

    def reflected(self, position: int) -> int:
        n = len(self.seconds)
        turn = position % (2 * n)
        return turn if turn < n else 2 * n - 1 - turn

    def rate(self, metric: str) -> float:
        return math.fsum(self._tokens(metric)) / math.fsum(self.seconds)

    def _tokens(self, metric: str) -> tuple[float, ...]:
        return self.output if metric == OUTPUT else self.total

    def block(self, offset: int, length: int, metric: str) -> float:
        """The rate over `length` intervals from `offset` of the series reflected at its ends
        (positions n..2n-1 are the series backwards, then it repeats)."""
        picked = [self.reflected(offset + i) for i in range(length)]
        tokens = self._tokens(metric)
        return math.fsum(tokens[i] for i in picked) / math.fsum(self.seconds[i] for i in picked)


def series_of_start(data: dict, start: int, settle_s: float) -> list[Series]:
    """A start's measured phases as series: consecutive phases at one cap are one series
    (the engine ran on through them); the first `settle_s` after a cap change is left out,
    as the tune leaves it out, and so is the warm-up (phase 0)."""
    reads, phases = data["reads"], {p["index"]: p for p in data["phases"]}
    segment_of: dict[int, int] = {}  # phase: the first phase of its run at one cap
    for index in sorted(phases):
        previous = phases.get(index - 1)
        same = previous is not None and index - 1 != 0 and previous["cap"] == phases[index]["cap"]
        segment_of[index] = segment_of[index - 1] if same else index
    by_segment: dict[int, list[tuple[float, float, float]]] = {}
    for before, after in zip(reads, reads[1:], strict=False):
        phase = after["phase"]
        if phase == 0 or phase not in phases or before["phase"] not in phases:
            continue  # the warm-up, or a phase never logged
        segment = segment_of[phase]
        if segment_of[before["phase"]] != segment:
            continue  # across a cap change
        previous = phases.get(segment - 1)
        if previous is not None and previous["cap"] != phases[segment]["cap"]:
            if before["t"] < phases[segment]["began"] + settle_s:
                continue
        seconds = after["t"] - before["t"]
        output = after["decode"] - before["decode"]
        total = output + after["prefill_compute"] - before["prefill_compute"]
        if seconds <= 0 or output < 0 or total < 0:
            raise RecordingError(
                f"start {start}: the reads at t={before['t']} and t={after['t']} go backwards "
                "(a counter reset or reads out of order): record that start again"
            )
        by_segment.setdefault(segment, []).append((output, total, seconds))
    found = []
    for segment, rows in sorted(by_segment.items()):
        output, total, seconds = (tuple(column) for column in zip(*rows, strict=True))
        found.append(Series(start, phases[segment]["cap"], output, total, seconds))
    return found


@dataclass(frozen=True)
class Recording:
    source: str
    series: tuple[Series, ...]

    def caps(self) -> list[int]:
        return sorted({s.cap for s in self.series})

    def of_cap(self, cap: int) -> list[Series]:
        found = [s for s in self.series if s.cap == cap]
        if not found:
            raise RecordingError(
                f"{self.source}: no settled seconds at cap {cap}; recorded caps: {self.caps()}"
            )
        return found

    def seconds_at(self, cap: int) -> float:
        return math.fsum(math.fsum(s.seconds) for s in self.of_cap(cap))

    def start_means(self, cap: int, metric: str) -> dict[int, float]:
        """Each recorded start's rate at the cap (its series together)."""
        by_start: dict[int, list[Series]] = {}
        for s in self.of_cap(cap):
            by_start.setdefault(s.start, []).append(s)
        return {
            start: math.fsum(math.fsum(s._tokens(metric)) for s in rows)
            / math.fsum(math.fsum(s.seconds) for s in rows)
            for start, rows in sorted(by_start.items())
        }

    def pooled_mean(self, cap: int, metric: str) -> float:
        return statistics.fmean(self.start_means(cap, metric).values())

    def start_spread(self, cap: int, metric: str) -> float:
        """The standard deviation of the starts' log means (0 with one start)."""
        logs = [math.log(m) for m in self.start_means(cap, metric).values()]
        return statistics.stdev(logs) if len(logs) > 1 else 0.0

    def describe(self, cap: int, metric: str) -> str:
        starts = len(self.start_means(cap, metric))
        text = (
            f"{self.source}: cap {cap}, {starts} recorded start(s), "
            f"{self.seconds_at(cap):.0f} settled seconds, {metric} tokens "
            f"{self.pooled_mean(cap, metric):,.0f}/s, start-to-start spread "
            f"{self.start_spread(cap, metric):.1%}"
        )
        if starts < FEW_STARTS:
            text += (
                f" (only {starts} recorded start(s): the start-to-start spread resampled is "
                "a rough estimate, and a wider real one would raise false promotion)"
            )
        return text


def load_recording(folder: Path, settle_s: float) -> Recording:
    paths = sorted(folder.glob("start*-reads.json"), key=lambda p: _start_number(p))
    if not paths:
        raise RecordingError(
            f"{folder}: no start*-reads.json (the GPU lab's precision scenario writes them "
            "under recorded/precision/)"
        )
    series: list[Series] = []
    for path in paths:
        try:
            data = json.loads(path.read_text())
            series += series_of_start(data, _start_number(path), settle_s)
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise RecordingError(f"{path}: not a precision recording ({exc!r})") from exc
    if not series:
        raise RecordingError(f"{folder}: no settled seconds after the warm-up in any start")
    return Recording(str(folder), tuple(series))


def _start_number(path: Path) -> int:
    digits = path.name.removeprefix("start").split("-", 1)[0]
    if not digits.isdigit():
        raise RecordingError(f"{path}: expected a name start<N>-reads.json")
    return int(digits)


@dataclass(frozen=True)
class Level:
    """A stand-in start: the recorded start it resamples and its level per metric."""

    recorded_start: int
    output: float
    total: float


class Resampler:
    """Starts and windows of one cap, drawn from a recording (seeded)."""

    def __init__(self, recording: Recording, cap: int, window_s: float, rng: random.Random):
        self.recording, self.cap, self.rng = recording, cap, rng
        self.series = recording.of_cap(cap)
        interval = statistics.median(x for s in self.series for x in s.seconds)
        self.interval_s = interval
        self.block_intervals = max(1, round(window_s / interval))
        self.pooled = {m: recording.pooled_mean(cap, m) for m in (OUTPUT, TOTAL)}
        self.means = {m: recording.start_means(cap, m) for m in (OUTPUT, TOTAL)}
        self.own = [{m: s.rate(m) for m in (OUTPUT, TOTAL)} for s in self.series]
        self.weights = [len(s.seconds) for s in self.series]
        self.longest = max(len(s.seconds) for s in self.series)

    def too_long(self) -> bool:
        """The window is over half the longest recorded series: its blocks overlap so much
        (or turn back and repeat seconds) that their spread understates the engine's."""
        return 2 * self.block_intervals > self.longest

    def window_spread(self, metric: str) -> float:
        """The standard deviation of a window's log rate within a start: every block of
        every series, relative to its series' mean."""
        logs = [
            math.log(s.block(offset, self.block_intervals, metric) / s.rate(metric))
            for s in self.series
            for offset in range(len(s.seconds))
        ]
        return statistics.pstdev(logs)

    def start_level(self) -> Level:
        start = self.rng.choice(sorted(self.means[OUTPUT]))
        return Level(
            start,
            *(self.means[m][start] / self.pooled[m] for m in (OUTPUT, TOTAL)),
        )

    def windows(self, level: Level, count: int, gap_s: float = 0.0) -> list[dict[str, float]]:
        """`count` consecutive windows' output and total tokens/s at this start's level, each
        after a gap of `gap_s` (the settle after a cap change), cut in turn from one stretch
        of a recorded series drawn as `window` draws its block: the drift they share is the
        engine's, as in an A B B A block."""
        index = self.rng.choices(range(len(self.series)), weights=self.weights)[0]
        series = self.series[index]
        cursor = self.rng.randrange(2 * len(series.seconds))  # forward or backward
        gap = round(gap_s / self.interval_s)
        found = []
        for _ in range(count):
            cursor += gap
            found.append(
                {
                    m: self.pooled[m]
                    * getattr(level, m)
                    * series.block(cursor, self.block_intervals, m)
                    / self.own[index][m]
                    for m in (OUTPUT, TOTAL)
                }
            )
            cursor += self.block_intervals
        return found

    def window(self, level: Level) -> dict[str, float]:
        """One window's output and total tokens/s at this start's level."""
        return self.windows(level, 1)[0]


def synthetic_reads(schedule: list[tuple[int, int]], rates: list[float], t0: float = 100.0,
                    prefill_per_s: float = 10.0) -> dict:  # fmt: skip
    """A recording in the precision scenario's format, for tests: reads one second apart
    through phases [(cap, seconds)], the output tokens of second i rates[i % len(rates)],
    the prefill a constant rate."""
    reads, phases = [], []
    t, decode, prefill, second = t0, 0.0, 0.0, 0
    for index, (cap, seconds) in enumerate(schedule):
        phases.append({"index": index, "cap": cap, "began": t, "seconds": float(seconds)})
        for _ in range(seconds):
            reads.append({"t": t, "phase": index, "cap": cap, "running": 1, "queued": 0,
                          "completed": 0, "prefill_compute": prefill, "prefill_cache": 0,
                          "decode": decode, "ttft": [], "itl": []})  # fmt: skip
            t += 1.0
            decode += rates[second % len(rates)]
            prefill += prefill_per_s
            second += 1
    return {"reads": reads, "phases": phases, "streamed": [], "fired_up_s": 1.0}


def write_recording(folder: Path, starts: list[dict]) -> Path:
    """Each start's reads as start{N}-reads.json (N from 1)."""
    folder.mkdir(parents=True, exist_ok=True)
    for number, data in enumerate(starts, start=1):
        (folder / f"start{number}-reads.json").write_text(json.dumps(data))
    return folder
