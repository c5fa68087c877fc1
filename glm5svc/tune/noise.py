"""Where the spread of windows comes from: each window's throughput against what the
per-second recorder (glm5svc/bench/seconds.py) saw beside it.

A window is a row: its throughput (uncached prompt + output tokens/s, the engine's
counters; `objective` swaps in its output tokens/s, the tune's default objective) and
the means of its seconds, the candidate sources (SOURCES): the GPUs' SM
and memory clocks, power and temperature, the share of seconds throttled (power, thermal
or hardware slowdown; idle is not a throttle), the running batch and the queue, the
prefill share of the tokens computed, forward passes per second and the share of decode
passes that ran in a CUDA graph, the client's requests in flight and its mean send gap.

- `attribute`: over the windows, each source's share of the throughput's variance alone
  (the R^2 of a line through it), then the sources taken greedily (the best adjusted R^2
  first), each only while what it adds passes a partial F test at 5 % shared among the
  sources it was the best of (so the shares add up and chance correlations with a dozen
  sources are not fitted), and the residual: the spread no recorded source explains.
- `spread`: the window-to-window spread within starts (pooled) and the spread from start
  to start (the starts' means; the between-start part of a one-way random-effects split).
- `removable`: both spreads again for other measured quantities, the warm-up windows
  left out (but in the one that shows what they add): throughput per running request,
  per forward pass (tokens a pass: the batch) and the passes a second (the step time)
  apart, throughput at the mean SM clock, what is left after the fitted sources (the
  floor that nothing recorded removes), and each variant's windows on their own.

Pure functions over rows; `rows_from_folder` builds them from a noise scenario's
recording (start{N}-windows.json beside start{N}/seconds.jsonl, lab/gpu/noise_scenario.py)
or a tune run's folder (starts/NNN/seconds.jsonl, cut into windows of a given length).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from glm5svc.bench.seconds import SECONDS_FILE, read_seconds
from glm5svc.student_t import t_quantile

SOURCES = ("sm_clock_mhz", "memory_clock_mhz", "power_w", "temperature_c", "throttled",
           "running", "queued", "prefill_share", "passes_per_s", "decode_graph_share",
           "in_flight", "send_gap_ms")  # fmt: skip
# NVML clock-event reasons that slow the GPU (nvml.h nvmlClocksEventReason*): software
# power cap, hardware slowdown, software and hardware thermal, power brake. Idle (0x1),
# application clocks (0x2) and display clocks (0x100) are not a throttle under load.
THROTTLES = 0x4 | 0x8 | 0x20 | 0x40 | 0x80
WARMUP = "warmup"
# Forward passes a second are how the throughput happens (tokens = passes x tokens a pass),
# not why it moved: a figure beside the causes, never fitted among them.
CAUSES = tuple(name for name in SOURCES if name != "passes_per_s")


@dataclass(frozen=True)
class Row:
    """One window."""

    start: int
    index: int
    kind: str  # warmup | time (fixed length) | flush | count | seconds (cut from a tune's)
    throughput: float
    sources: dict[str, float | None] = field(default_factory=dict)
    output: float | None = None  # output tokens/s


def objective(rows: Sequence[Row], name: str) -> list[Row]:
    """The rows with `throughput` as the objective counts it: "total" (uncached prompt +
    output tokens/s, as recorded) or "output" (output tokens/s, benchmark.objective's
    default); a row without its output figure cannot be counted as output."""
    if name == "total":
        return list(rows)
    if name != "output":
        raise ValueError(f"objective {name!r}: total or output")
    if any(r.output is None for r in rows):
        raise ValueError("a window has no output tokens/s: count the total instead")
    return [Row(r.start, r.index, r.kind, r.output, r.sources, r.output) for r in rows]


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _advance(first: dict, last: dict, key: str) -> float | None:
    a, b = first.get(key), last.get(key)
    return None if a is None or b is None else b - a


def _passes(line: dict, prefix: str, graphed: bool | None = None) -> float | None:
    passes = line.get("passes")
    if not passes:
        return None
    return sum(v for mode, v in passes.items() if mode.startswith(prefix)
               and (graphed is None or mode.endswith("cuda_graph") == graphed))  # fmt: skip


def sources_of(lines: Sequence[dict]) -> dict[str, float | None]:
    """The candidate sources over a window's seconds (at least two lines for the rates)."""
    found: dict[str, float | None] = {
        name: _mean([line.get(name) for line in lines])
        for name in (
            "sm_clock_mhz",
            "memory_clock_mhz",
            "power_w",
            "temperature_c",
            "running",
            "queued",
            "in_flight",
        )  # fmt: skip
    }
    reasons = [line.get("throttle_reasons") for line in lines]
    known = [int(r) for r in reasons if r is not None]
    found["throttled"] = sum(1 for r in known if r & THROTTLES) / len(known) if known else None
    first, last = (lines[0], lines[-1]) if len(lines) >= 2 else ({}, {})
    seconds = _advance(first, last, "t")
    prefill, decode = _advance(first, last, "prefill_compute"), _advance(first, last, "decode")
    computed = (prefill or 0) + (decode or 0)
    found["prefill_share"] = prefill / computed if prefill is not None and computed > 0 else None
    gaps, gap_s = _advance(first, last, "gaps"), _advance(first, last, "gap_total_s")
    found["send_gap_ms"] = 1000 * gap_s / gaps if gaps and gap_s is not None else None
    steps = [_passes(line, "decode") for line in (first, last)] if first else [None, None]
    graphed = [_passes(line, "decode", True) for line in (first, last)] if first else [None]
    if None in steps or not seconds:
        found["passes_per_s"] = found["decode_graph_share"] = None
    else:
        advance = steps[1] - steps[0]
        found["passes_per_s"] = advance / seconds
        found["decode_graph_share"] = (graphed[1] - graphed[0]) / advance if advance > 0 else None
    return found


def rows_from_windows(start: int, windows: Sequence[dict], lines: Sequence[dict]) -> list[Row]:
    """Windows with their wall-clock bounds (began_unix, ended_unix), each with the seconds
    recorded within them."""
    rows = []
    for window in windows:
        began, ended = window["began_unix"] - 0.5, window["ended_unix"] + 0.5
        inside = [line for line in lines if began <= line["unix"] <= ended]
        rows.append(Row(start, window["index"], window["kind"], window["throughput"],
                        sources_of(inside), window.get("output_throughput")))  # fmt: skip
    return rows


def rows_from_lines(start: int, lines: Sequence[dict], window_s: float,
                    warmup_s: float = 0.0) -> list[Row]:  # fmt: skip
    """Consecutive windows of `window_s` cut from the seconds alone (their counters), the
    first `warmup_s` marked warm-up: a tune's start, whose own windows carry no clock."""
    rows: list[Row] = []
    usable = [
        line for line in lines if line.get("decode") is not None and line.get("t") is not None
    ]
    at = 0
    while at < len(usable):
        began = usable[at]["t"]
        inside = [line for line in usable[at:] if line["t"] <= began + window_s + 1e-6]
        if len(inside) < 2 or inside[-1]["t"] - began < 0.75 * window_s:
            break
        first, last = inside[0], inside[-1]
        tokens = (last["prefill_compute"] - first["prefill_compute"]) + (
            last["decode"] - first["decode"]
        )
        kind = WARMUP if began < warmup_s else "seconds"
        seconds = last["t"] - first["t"]
        rows.append(Row(start, len(rows), kind, tokens / seconds, sources_of(inside),
                        (last["decode"] - first["decode"]) / seconds))  # fmt: skip
        at += len(inside) - 1  # the last line of one window opens the next
    return rows


def rows_from_folder(folder: Path, window_s: float = 10.0, warmup_s: float = 20.0) -> list[Row]:
    """A noise scenario's folder (start{N}-windows.json) or a tune run's (starts/NNN/)."""
    rows: list[Row] = []
    scenario = sorted(folder.glob("start*-windows.json"))
    for path in scenario:
        number = int(path.name.removeprefix("start").split("-")[0])
        _, lines = read_seconds(folder / f"start{number}" / SECONDS_FILE)
        windows = json.loads(path.read_text(encoding="utf-8"))["windows"]
        rows += rows_from_windows(number, windows, lines)
    if not scenario:
        for start_dir in sorted((folder / "starts").glob("[0-9][0-9][0-9]")):
            if (start_dir / SECONDS_FILE).is_file():
                _, lines = read_seconds(start_dir / SECONDS_FILE)
                rows += rows_from_lines(int(start_dir.name), lines, window_s, warmup_s)
    if not rows:
        raise ValueError(
            f"{folder}: no windows with their seconds (start<N>-windows.json beside "
            f"start<N>/{SECONDS_FILE}, or starts/NNN/{SECONDS_FILE}): give a noise "
            "scenario's recorded/noise folder or a tune run's folder"
        )
    return rows


def cv(values: Sequence[float]) -> float | None:
    """The spread: standard deviation over mean."""
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    return statistics.stdev(values) / mean if mean else None


def _fit(y: np.ndarray, columns: list[np.ndarray]) -> tuple[float, np.ndarray]:
    """R^2 and residuals of least squares with an intercept."""
    design = np.column_stack([np.ones_like(y), *columns])
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    residual = y - design @ coef
    total = float(((y - y.mean()) ** 2).sum())
    return (1 - float((residual**2).sum()) / total if total > 0 else 0.0), residual


def _adjusted(r2: float, n: int, k: int) -> float:
    return 1 - (1 - r2) * (n - 1) / (n - k - 1) if n - k - 1 > 0 else -math.inf


@dataclass(frozen=True)
class Attribution:
    n: int
    mean: float
    spread: float | None  # the throughput's CV over these windows
    alone: dict[str, float]  # each source's R^2 on its own
    slopes: dict[str, float]  # tokens/s per unit of the source, alone
    chosen: list[tuple[str, float]]  # sources taken in turn, with the R^2 each added
    explained: float  # R^2 of the chosen together
    residual_spread: float | None  # the CV left after them
    left_out: list[str]  # sources unknown in some window or constant

    def to_dict(self) -> dict[str, Any]:
        return {"n": self.n, "mean": self.mean, "spread": self.spread, "alone": self.alone,
                "slopes": self.slopes, "chosen": [list(c) for c in self.chosen],
                "explained": self.explained, "residual_spread": self.residual_spread,
                "left_out": self.left_out}  # fmt: skip


def attribute(rows: Sequence[Row], sources: Sequence[str] = CAUSES) -> Attribution:
    """The throughput's variance over `rows`, by source (see the module's docstring)."""
    y = np.array([r.throughput for r in rows], dtype=float)
    mean = float(y.mean()) if len(y) else 0.0
    usable: dict[str, np.ndarray] = {}
    left_out = []
    for name in sources:
        values = [r.sources.get(name) for r in rows]
        if (
            None in values
            or len(values) < 3
            or max(values) - min(values) <= 1e-12 * (abs(max(values)) + 1)
        ):
            left_out.append(name)
            continue
        usable[name] = np.array(values, dtype=float)
    alone, slopes = {}, {}
    for name, x in usable.items():
        alone[name] = round(_fit(y, [x])[0], 4)
        slopes[name] = round(float(np.polyfit(x, y, 1)[0]), 4)
    chosen: list[tuple[str, float]] = []
    r2, residual = 0.0, y - y.mean()
    while True:
        candidates = [name for name in usable if name not in dict(chosen)]
        k = len(chosen) + 1
        scored = []
        for name in candidates:
            fit_r2, fit_residual = _fit(y, [usable[c] for c, _ in chosen] + [usable[name]])
            scored.append((_adjusted(fit_r2, len(y), k), fit_r2, name, fit_residual))
        if not scored:
            break
        adjusted, fit_r2, name, fit_residual = max(scored, key=lambda s: s[0])
        dof = len(y) - k - 1
        if dof < 1:
            break
        # Taken only while what it adds is beyond chance: its partial F test at 5 %, shared
        # among the sources it was the best of (Bonferroni).
        unexplained = max(1 - fit_r2, 1e-12) / dof
        if (fit_r2 - r2) / unexplained <= t_quantile(1 - 0.025 / len(candidates), dof) ** 2:
            break
        chosen.append((name, round(fit_r2 - r2, 4)))
        r2, residual = fit_r2, fit_residual
    left = float(np.sqrt((residual**2).sum() / max(1, len(y) - len(chosen) - 1)))
    return Attribution(len(y), round(mean, 1), cv(list(y)), alone, slopes, chosen,
                       round(r2, 4), left / mean if mean else None, left_out)  # fmt: skip


def spread(rows: Sequence[Row], values: Sequence[float] | None = None) -> dict[str, Any]:
    """Within starts (pooled over them) and from start to start, of `values` (default the
    throughput), one per row."""
    figures = list(values) if values is not None else [r.throughput for r in rows]
    by_start: dict[int, list[float]] = {}
    for row, value in zip(rows, figures, strict=True):
        by_start.setdefault(row.start, []).append(value)
    grand = statistics.fmean(figures) if figures else 0.0
    within = [statistics.variance(v) for v in by_start.values() if len(v) >= 2]
    within_var = statistics.fmean(within) if within else None
    means = [statistics.fmean(v) for v in by_start.values()]
    between = None
    if len(means) >= 2 and within_var is not None:
        per_start = statistics.fmean(len(v) for v in by_start.values())
        between = max(0.0, statistics.variance(means) - within_var / per_start)
    return {
        "windows": len(figures),
        "starts": len(by_start),
        "mean": round(grand, 2),
        "within_start": math.sqrt(within_var) / grand if within_var is not None and grand else None,
        "start_means": [round(m, 2) for m in means],
        "start_to_start": cv(means),
        "between_starts": math.sqrt(between) / grand if between is not None and grand else None,
    }


def removable(rows: Sequence[Row], sources: Sequence[str] = CAUSES) -> dict[str, dict]:
    """The spreads of other measured quantities (module docstring); a quantity whose source
    is unknown in some window is left out."""
    measured = [r for r in rows if r.kind != WARMUP]
    found = {"throughput": spread(measured), "with the warm-up windows": spread(rows)}
    per_request = [r.throughput / r.sources["running"] for r in measured
                   if r.sources.get("running")]  # fmt: skip
    if measured and len(per_request) == len(measured):
        found["per running request"] = spread(measured, per_request)
    per_pass = [r.throughput / r.sources["passes_per_s"] for r in measured
                if r.sources.get("passes_per_s")]  # fmt: skip
    if measured and len(per_pass) == len(measured):
        found["per forward pass"] = spread(measured, per_pass)  # the batch, not the step time
        found["forward passes a second"] = spread(
            measured, [r.sources["passes_per_s"] for r in measured]
        )
    clocks = [r.sources.get("sm_clock_mhz") for r in measured]
    if measured and None not in clocks:
        mean_clock = statistics.fmean(clocks)
        found["at the mean SM clock"] = spread(
            measured, [r.throughput * mean_clock / c for r, c in zip(measured, clocks, strict=True)]
        )
    if len(measured) >= 3:
        fitted = attribute(measured, sources)
        if fitted.chosen:
            y = np.array([r.throughput for r in measured])
            columns = [np.array([r.sources[name] for r in measured]) for name, _ in fitted.chosen]
            _, residual = _fit(y, columns)
            found["after the fitted sources"] = spread(measured, list(residual + y.mean()))
    for kind in sorted({r.kind for r in measured} - {"time", "seconds"}):
        found[f"{kind} windows"] = spread([r for r in measured if r.kind == kind])
    return found


def report(rows: Sequence[Row], sources: Sequence[str] = CAUSES) -> dict[str, Any]:
    """The attribution over every measured window, and over the fixed-length ones within
    each start's own mean (the start-to-start part taken out), the spreads, what removes."""
    measured = [r for r in rows if r.kind != WARMUP]
    fixed = [r for r in measured if r.kind in ("time", "seconds")]
    by_start: dict[int, list[Row]] = {}
    for row in fixed:
        by_start.setdefault(row.start, []).append(row)
    centred = []  # each start's windows about its own means, the sources' too
    grand = statistics.fmean(r.throughput for r in fixed) if fixed else 0.0
    for start_rows in by_start.values():
        mean = statistics.fmean(r.throughput for r in start_rows)
        means = {name: _mean([r.sources.get(name) for r in start_rows]) for name in sources}
        centred += [Row(r.start, r.index, r.kind, r.throughput - mean + grand,
                        {name: None if r.sources.get(name) is None else
                         r.sources[name] - means[name] for name in sources}, r.output)
                    for r in start_rows]  # fmt: skip
    return {
        "windows": attribute(fixed, sources).to_dict() if len(fixed) >= 3 else None,
        "within_starts": attribute(centred, sources).to_dict() if len(centred) >= 3 else None,
        "spread": spread(measured),
        "removable": removable(rows, sources),
        "start_sources": {start: {name: _mean([r.sources.get(name) for r in rs])
                                  for name in SOURCES} for start, rs in by_start.items()},
    }  # fmt: skip
