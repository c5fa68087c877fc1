"""One measured figure of a setting on a running engine: fresh prompts, a flushed cache, a
warm-up that waits for the plateau, then steady windows.

- Every run sends new prompts: run i of a measurement uses seed `seed + i` (warm-up runs
  seeds from WARMUP_SEED_OFFSET on), so the i-th window of every level, trial and side
  sends the same prompts as the i-th of any other, and windows pair across candidates.
- Before each run the radix cache is flushed (POST /flush_cache), unless the workload
  declares prefix sharing (benchmark.prefix_sharing); the engine's own counters before
  and after say how many prompt tokens were cached, and a run with more than the workload
  declares is flagged, never counted.
- A run is sized so that its steady window (glm5svc/bench/steady.py) lasts at least
  `window_s`; warm-up runs go on until two consecutive windows agree within the tolerance,
  bounded in time (a fresh engine compiles kernels per shape: its first runs are slow).
bench_serving stays the load generator; its own figures are kept beside the window's.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from glm5svc.bench.counter_window import CounterWindow
from glm5svc.bench.engine_sampler import (
    SAMPLE_INTERVAL_S,
    EngineSampler,
    SteadyRefused,
    flush_radix_cache,
    server_info_problem,
)
from glm5svc.bench.plan import BenchPlan
from glm5svc.bench.results import LevelResult
from glm5svc.bench.runner import (
    BenchEvent,
    BenchTerminated,
    ProgressCallback,
    done_message,
    failed_level,
    reason_to_stop_before,
    run_level,
)
from glm5svc.bench.steady import (
    SteadyWindow,
    TokenCounts,
    cached_share_flag,
    completion_rate,
    prompts_for_window,
    steady_window,
    window_for_prompts,
    windows_agree,
)
from glm5svc.http_fetch import bearer

WARMUP_SEED_OFFSET = 1_000_000
WINDOW_SAMPLES = 5
RESIZE_MARGIN = 1.2
MAX_GROWTH = 10.0
MAX_PROMPTS = 200_000


@dataclass
class WindowRun:
    """One bench_serving run and the steady window the engine's counters gave."""

    name: str
    seed: int
    prompts: int
    level: LevelResult
    window: SteadyWindow | None
    run_tokens: TokenCounts | None  # the whole run, ramps included
    flushed: bool
    flag: str | None = None  # why its figure does not count
    # The steady window's figures, through the one window definition a tune's windows use
    # (glm5svc/bench/counter_window.py): throughput, cached share, TTFT and ITL percentiles
    # from the engine's histograms over the window.
    counters: CounterWindow | None = None

    @property
    def throughput(self) -> float | None:
        if self.flag or self.window is None or not self.window.ok:
            return None
        return self.counters.throughput if self.counters else self.window.throughput

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "seed": self.seed,
            "prompts": self.prompts,
            "flushed": self.flushed,
            "flag": self.flag,
            "throughput": self.throughput,
            "window": self.window.to_dict() if self.window else None,
            "counters": self.counters.to_dict() if self.counters else None,
            "run_tokens": (
                {
                    "uncached_input": self.run_tokens.uncached_input,
                    "cached_input": self.run_tokens.cached_input,
                    "output": self.run_tokens.output,
                    "cached_share": self.run_tokens.cached_share,
                }
                if self.run_tokens
                else None
            ),
            "bench_serving_total_tok_s": (
                self.level.metrics.total_throughput if self.level.metrics else None
            ),
            "error": self.level.error,
        }


@dataclass
class Measurement:
    """The warm-up and the windows of one setting at one concurrency."""

    concurrency: int
    warmup: list[WindowRun] = field(default_factory=list)
    runs: list[WindowRun] = field(default_factory=list)
    warmup_settled: bool = False
    error: str | None = None

    @property
    def throughputs(self) -> list[float]:
        return [r.throughput for r in self.runs if r.throughput is not None]

    def to_dict(self) -> dict[str, Any]:
        return {
            "concurrency": self.concurrency,
            "warmup_settled": self.warmup_settled,
            "error": self.error,
            "warmup": [r.to_dict() for r in self.warmup],
            "windows": [r.to_dict() for r in self.runs],
            "throughputs": self.throughputs,
        }


class Measurer:
    """Runs on one engine at one concurrency (the plan's window, warm-up and sharing);
    keeps the prompt count that gives a window."""

    def __init__(
        self,
        plan: BenchPlan,
        concurrency: int,
        run_dir: Path,
        sampler=None,
        should_stop: Callable[[], bool] | None = None,
        on_progress: Callable[[str], None] = lambda text: None,
    ):
        self.plan = plan
        self.concurrency = concurrency
        self.run_dir = run_dir
        self.sampler = sampler
        self.should_stop = should_stop
        self.on_progress = on_progress
        self.prompts = plan.prompts_for(concurrency)
        self.headers = bearer(plan.api_key)
        self.too_long: str | None = None  # why no run can give a window of window_s
        self.engine_checked = False  # its /get_server_info, once

    def run(self, name: str, seed: int) -> WindowRun:
        """One run and its window; SteadyRefused when the engine's answers rule the
        measurement out (no /flush_cache, no token counters, a server info bench_serving
        cannot read)."""
        if not self.engine_checked:
            if problem := server_info_problem(self.plan.base_url, self.headers):
                raise SteadyRefused(problem)
            self.engine_checked = True
        flushed = False
        if self.plan.prefix_sharing <= 0:
            flush_radix_cache(self.plan.base_url, self.headers)
            flushed = True
        # At least WINDOW_SAMPLES reads inside the shortest window, at most two a second.
        interval = min(SAMPLE_INTERVAL_S, self.plan.window_s / WINDOW_SAMPLES)
        engine = EngineSampler(self.plan.base_url, self.headers, interval)
        engine.start()
        # bench_serving's own warm-up sends the run's first prompts once more, so they would
        # be cached when the run sends them: the measurer's warm-up runs replace it.
        plan = self.plan.with_overrides(num_prompts=self.prompts, seed=seed, warmup_requests=0)
        try:
            level, _ = run_level(
                plan, self.concurrency, self.run_dir / name, self.sampler,
                should_stop=self.should_stop,
            )  # fmt: skip
        finally:
            samples = engine.stop()
        run = WindowRun(name, seed, self.prompts, level, None, None, flushed)
        if not level.ok:
            run.flag = level.error or "the run did not complete"
            return run
        if len(samples) < 3:
            if engine.missing is not None and not samples:
                raise engine.missing  # no read had them: every run would read the same
            run.flag = "; ".join(engine.errors[-1:]) or "the engine's /metrics could not be read"
            return run
        run.run_tokens = TokenCounts.between(samples[0], samples[-1])
        window = steady_window(samples, self.concurrency, self.plan.window_s)
        run.window = window
        if window.reads is not None:
            first, last = window.reads
            run.counters = CounterWindow.between(engine.reads[first], engine.reads[last])
        self._resize(samples, window, level)
        if not window.ok:
            run.flag = f"{window.reason}; {self.too_long}" if self.too_long else window.reason
        else:
            run.flag = cached_share_flag(window.tokens, self.plan.prefix_sharing)
        return run

    def _resize(self, samples, window: SteadyWindow, level: LevelResult) -> None:
        rate = completion_rate(samples, window)
        if rate is None and level.metrics and level.metrics.request_throughput:
            rate = level.metrics.request_throughput
        wanted = self.prompts
        if rate:
            wanted = prompts_for_window(rate, self.concurrency, self.plan.window_s)
        if window.start_s is not None and 0 < window.duration_s < self.plan.window_s:
            # Too short a window: the ramps took more of the run than the rate says.
            grow = min(MAX_GROWTH, RESIZE_MARGIN * self.plan.window_s / window.duration_s)
            wanted = max(wanted, math.ceil(self.prompts * grow))
        self.prompts = min(MAX_PROMPTS, max(self.prompts, wanted))
        if rate and wanted > MAX_PROMPTS:
            longest = window_for_prompts(rate, self.concurrency, MAX_PROMPTS)
            self.too_long = (
                f"a {self.plan.window_s:g} s window needs about {wanted:,} prompts at the "
                f"measured {rate:.3g} requests/s, over the {MAX_PROMPTS:,} one run sends: "
                f"set benchmark.window_s to at most {longest:g}"
            )

    def measure(self, seed: int, windows: int | None = None) -> Measurement:
        """Warm up to the plateau, then `windows` measured windows (seeds seed, seed+1...)."""
        result = Measurement(self.concurrency)
        try:
            self.warm_up(result, seed)
            if result.error:  # the warm-up's run failed or was stopped: its own words
                return result
            for index in range(windows or self.plan.windows):
                if self.should_stop is not None and self.should_stop():
                    result.error = "stopped"
                    break
                self.on_progress(f"window {index + 1}")
                run = self.run(f"c{self.concurrency}-w{index + 1:02d}", seed + index)
                result.runs.append(run)
                if run.level.error:
                    result.error = run.level.error
                    break
        except SteadyRefused as exc:
            result.error = str(exc)
        return result

    def warm_up(self, result: Measurement, seed: int) -> None:
        started = time.monotonic()
        last: float | None = None
        index = 0
        while time.monotonic() - started < self.plan.warmup_max_s:
            if self.should_stop is not None and self.should_stop():
                return
            self.on_progress(f"warm-up {index + 1}")
            run = self.run(
                f"c{self.concurrency}-warmup{index + 1:02d}", seed + WARMUP_SEED_OFFSET + index
            )
            result.warmup.append(run)
            index += 1
            if run.level.error:
                result.error = run.level.error
                return
            value = run.window.throughput if run.window and run.window.ok else None
            if value is not None and last is not None:
                if windows_agree(last, value, self.plan.warmup_tolerance_pct / 100):
                    result.warmup_settled = True
                    return
            last = value if value is not None else last


def level_from(measurement: Measurement) -> LevelResult:
    """The level a ladder reports: the last window's run, with the mean of the measured
    windows as its throughput figures (bench_serving's own stay in `steady`), or the
    failure that ended the measurement."""
    every = measurement.warmup + measurement.runs
    last = every[-1].level if every else None
    values = measurement.throughputs
    error = measurement.error
    if error is None and not values:
        flags = [r.flag for r in measurement.runs if r.flag]
        error = "no steady window counted: " + (flags[-1] if flags else "no run measured")
    if last is None:
        last = failed_level(measurement.concurrency, 0, time.monotonic(), error or "no run")
    metrics = last.metrics
    if not values and metrics is not None:
        # bench_serving's own figure counts the ramps: no level figure without a window.
        metrics = replace(metrics, total_throughput=None, output_throughput=None)
    if values and metrics is not None:
        outputs = [
            r.window.output_throughput
            for r in measurement.runs
            if r.throughput is not None and r.window and r.window.output_throughput
        ]
        metrics = replace(
            metrics,
            total_throughput=math.fsum(values) / len(values),
            output_throughput=math.fsum(outputs) / len(outputs) if outputs else None,
        )
    log_file = f"runs/{every[-1].name}/{last.log_file}" if every and last.log_file else None
    return replace(
        last,
        metrics=metrics,
        error=error if error else last.error,
        log_file=log_file,
        steady=measurement.to_dict(),
    )


def run_steady_ladder(
    plan: BenchPlan,
    run_dir: Path,
    sampler=None,
    on_progress: ProgressCallback | None = None,
    no_telemetry_reason: str = "no telemetry sampler",
    should_stop: Callable[[], bool] | None = None,
) -> tuple[list[LevelResult], str | None]:
    """Every level in order, each warmed up and measured in steady windows; stops at the
    first failure. Returns (levels, stopped_reason)."""
    emit = on_progress or (lambda event: None)
    total = len(plan.ladder)
    levels: list[LevelResult] = []
    for index, concurrency in enumerate(plan.ladder):
        reason = reason_to_stop_before(plan, concurrency, should_stop)
        if reason is not None:
            emit(BenchEvent("stopped", concurrency, index, total, reason))
            return levels, reason
        emit(
            BenchEvent(
                "level-start", concurrency, index, total,
                f"benchmarking concurrency {concurrency} ({index + 1}/{total}), warming up",
            )
        )  # fmt: skip

        def progress(text: str, c: int = concurrency, i: int = index) -> None:
            kind = "level-start" if text.startswith("warm-up") else "measuring"
            emit(BenchEvent(kind, c, i, total, f"benchmarking concurrency {c}: {text}"))

        measurer = Measurer(plan, concurrency, run_dir / "runs", sampler, should_stop, progress)
        try:
            measurement = measurer.measure(plan.seed)
        except KeyboardInterrupt as exc:
            how = f" by {exc}" if isinstance(exc, BenchTerminated) else ""
            reason = f"interrupted{how} during concurrency {concurrency}"
            emit(BenchEvent("stopped", concurrency, index, total, reason))
            return levels, reason
        level = level_from(measurement)
        levels.append(level)
        emit(BenchEvent("level-done", concurrency, index, total, done_message(level), level))
        if not level.ok:
            reason = f"stopped at concurrency {concurrency}: {level.error}"
            emit(BenchEvent("stopped", concurrency, index, total, reason, level))
            return levels, reason
    emit(BenchEvent("finished", None, total, total, f"benchmark finished: {total} levels"))
    return levels, None
