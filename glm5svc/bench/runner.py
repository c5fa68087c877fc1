"""Run sglang.bench_serving (the server venv's own, as a subprocess) once per ladder level.

The telemetry window of a level opens when bench_serving prints that its warm-up is done
and the timed run starts, and closes when it prints its result header, so energy and power
cover the measured requests only. Versions that print neither get a window over the whole
process, and the level says so (`window_scope`).

Longer than 400 lines: a level's whole life (command, environment, telemetry windows keyed
to bench_serving's markers, time limit, stop and group kill) stays in one place, so the
markers, the windows and the process group cannot drift apart.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from glm5svc.bench.plan import BenchPlan
from glm5svc.bench.power import WindowSampler, level_telemetry, unavailable
from glm5svc.bench.request_prompts import RequestPromptsError, dataset_arguments, write_dataset
from glm5svc.bench.results import LevelResult
from glm5svc.bench.serving_figures import BenchLineError, last_result_line, parse_bench_line
from glm5svc.child_group import ChildGroup, spawn
from glm5svc.http_fetch import FetchError, bearer, fetch_bytes

# Printed by bench_serving 0.3 .. 0.5.x (matched by content, as the wording around varies).
MEASURED_RUN_STARTS = "Starting main benchmark run"
MEASURED_RUN_ENDS = "Serving Benchmark Result"
MEASURED_RUN_DELAY_S = 1.0  # bench_serving's time.sleep(1.0) after the start marker
RAW_LINES_FILE = "bench_serving.jsonl"
HEALTH_TIMEOUT_S = 30.0
STOP_GRACE_S = 5.0


class BenchTerminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP to `glm5svc bench`: stop like ^C, ending bench_serving's group."""


def raise_terminated(signum, frame) -> None:
    raise BenchTerminated(signal.Signals(signum).name)


@dataclass(frozen=True)
class BenchEvent:
    """Progress, for a progress bar or the service's STATUS= line."""

    kind: str  # "level-start", "measuring", "level-done", "stopped", "finished"
    concurrency: int | None
    index: int  # 0-based position in the ladder
    total: int
    message: str
    level: LevelResult | None = None


ProgressCallback = Callable[[BenchEvent], None]


def bench_serving_command(
    plan: BenchPlan,
    concurrency: int,
    num_prompts: int,
    output_file: Path,
    dataset: Path | None = None,
) -> list[str]:
    """`dataset`: the run's prompts of a request file (glm5svc/bench/request_prompts.py)."""
    if plan.request_file is not None:
        if dataset is None:
            raise ValueError("a request file's run needs its dataset file")
        workload = dataset_arguments(dataset)
    else:
        workload = [
            "--dataset-name", "random-ids",
            "--random-input-len", str(plan.input_len),
            "--random-output-len", str(plan.output_len),
            "--random-range-ratio", "1.0",
        ]  # fmt: skip
    return [
        plan.python,
        "-m",
        "sglang.bench_serving",
        "--backend", "sglang",
        "--base-url", plan.base_url,
        "--model", plan.model,
        "--tokenizer", plan.tokenizer,
        *workload,
        "--num-prompts", str(num_prompts),
        "--max-concurrency", str(concurrency),
        "--request-rate", "inf",
        "--warmup-requests", str(plan.warmup_requests),
        "--seed", str(plan.seed),
        "--output-file", str(output_file),
        "--disable-tqdm",
    ]  # fmt: skip


def bench_serving_env(plan: BenchPlan) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"  # the run markers must arrive when printed
    # Offline-safe: a served name that is not a local path must not send transformers
    # to a model hub (it retries for about a minute per level when there is no network).
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    env.pop("API_KEY", None)
    env.pop("OPENAI_API_KEY", None)
    if plan.api_key:
        env["OPENAI_API_KEY"] = plan.api_key  # bench_serving sends it as a Bearer token
    return env


def run_level(
    plan: BenchPlan,
    concurrency: int,
    run_dir: Path,
    sampler: WindowSampler | None = None,
    on_measuring: Callable[[], None] | None = None,
    no_telemetry_reason: str = "no telemetry sampler",
    should_stop: Callable[[], bool] | None = None,
) -> tuple[LevelResult, str | None]:
    """Run bench_serving at one concurrency; returns the result and its raw JSON line.

    `should_stop` is watched while the level runs: when it turns true (the service is
    stopping), bench_serving's group is ended at once, so its requests leave the drain."""
    requested = plan.prompts_for(concurrency)
    logs = run_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    output_file = logs / f"c{concurrency}.jsonl"
    output_file.unlink(missing_ok=True)
    log_path = logs / f"c{concurrency}.log"
    started = time.monotonic()
    dataset = None
    if plan.request_file is not None:
        try:
            dataset = write_dataset(
                plan, requested, logs / f"c{concurrency}-requests.jsonl", bench_serving_env(plan)
            )
        except RequestPromptsError as exc:
            return failed_level(concurrency, requested, started, str(exc)), None
    command = bench_serving_command(plan, concurrency, requested, output_file, dataset)
    windows = _Windows(sampler, f"c={concurrency}", no_telemetry_reason)
    try:
        group = spawn(
            command,
            death_signal=signal.SIGTERM,  # it never outlives us
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            env=bench_serving_env(plan),
        )  # in its own group, so a timeout or ^C ends bench_serving's whole group
    except OSError as exc:
        windows.abandon()
        error = f"cannot run {plan.python}: {exc}"
        return failed_level(concurrency, requested, started, error), None
    proc = group.popen
    timed_out = threading.Event()
    level_timeout = plan.timeout_for(concurrency)
    timer = _start_timer(group, level_timeout, timed_out)
    stopped = threading.Event()
    if should_stop is not None:
        threading.Thread(
            target=_stop_when, args=(should_stop, group, stopped), name="bench-stop", daemon=True
        ).start()
    tail: list[str] = []
    try:
        with open(log_path, "w", encoding="utf-8") as log:
            log.write("$ " + " ".join(command) + "\n")
            for line in proc.stdout:  # type: ignore[union-attr]
                log.write(line)
                tail = (tail + [line.rstrip()])[-20:]
                if MEASURED_RUN_STARTS in line and windows.start_measured() and on_measuring:
                    on_measuring()
                elif MEASURED_RUN_ENDS in line:
                    windows.end_measured()
        returncode = proc.wait()
    except BaseException:
        _end_group(group)
        windows.abandon()
        raise
    finally:
        if timer:
            timer.cancel()
    stats, scope = windows.finish()
    raw_line = _read_line(output_file)
    metrics, error = None, None
    if raw_line is not None:
        try:
            metrics = parse_bench_line(raw_line)
        except BenchLineError as exc:
            error = f"bench_serving wrote an unreadable result: {exc}"
    if stopped.is_set():
        error = "stopped: the service is stopping"
    elif timed_out.is_set():
        error = (
            f"bench_serving did not finish within {level_timeout:.0f} s and was stopped "
            "(glm5svc bench --level-timeout; the default comes from the level's workload)"
        )
    elif returncode != 0:
        error = f"bench_serving exited with status {returncode}: {_last_error_line(tail)}"
    elif metrics is None and error is None:
        error = f"bench_serving wrote no result line: {_last_error_line(tail)}"
    elif metrics is not None and metrics.completed < requested:
        error = f"only {metrics.completed} of {requested} requests completed"
    telemetry = (
        level_telemetry(
            stats,
            metrics.total_output_tokens if metrics else None,
            metrics.total_input_tokens if metrics else None,
        )
        if stats is not None
        else unavailable(windows.reason)
    )
    result = LevelResult(
        concurrency=concurrency,
        requested=requested,
        metrics=metrics,
        telemetry=telemetry,
        returncode=returncode,
        wall_s=time.monotonic() - started,
        window_scope=scope,
        error=error,
        log_file=str(log_path.relative_to(run_dir)),
    )
    return result, raw_line


def run_ladder(
    plan: BenchPlan,
    run_dir: Path,
    sampler: WindowSampler | None = None,
    on_progress: ProgressCallback | None = None,
    no_telemetry_reason: str = "no telemetry sampler",
    should_stop: Callable[[], bool] | None = None,
) -> tuple[list[LevelResult], str | None]:
    """Every level in order; stops at the first failure. Returns (levels, stopped_reason)."""
    emit = on_progress or (lambda event: None)
    total = len(plan.ladder)
    levels: list[LevelResult] = []
    raw_path = run_dir / RAW_LINES_FILE
    for index, concurrency in enumerate(plan.ladder):
        reason = reason_to_stop_before(plan, concurrency, should_stop)
        if reason is not None:
            emit(BenchEvent("stopped", concurrency, index, total, reason))
            return levels, reason
        prompts = plan.prompts_for(concurrency)
        emit(
            BenchEvent(
                "level-start", concurrency, index, total,
                f"benchmarking concurrency {concurrency} ({index + 1}/{total}), "
                f"{prompts} prompts, warming up",
            )
        )  # fmt: skip

        def measuring(c: int = concurrency, i: int = index) -> None:
            emit(BenchEvent("measuring", c, i, total, f"benchmarking concurrency {c}: measuring"))

        try:
            level, raw_line = run_level(
                plan, concurrency, run_dir, sampler, measuring, no_telemetry_reason, should_stop
            )
        except KeyboardInterrupt as exc:
            how = f" by {exc}" if isinstance(exc, BenchTerminated) else ""
            reason = f"interrupted{how} during concurrency {concurrency}"
            emit(BenchEvent("stopped", concurrency, index, total, reason))
            return levels, reason
        if raw_line is not None:
            _append_raw(raw_path, concurrency, raw_line)
        levels.append(level)
        emit(BenchEvent("level-done", concurrency, index, total, done_message(level), level))
        if not level.ok:
            reason = f"stopped at concurrency {concurrency}: {level.error}"
            emit(BenchEvent("stopped", concurrency, index, total, reason, level))
            return levels, reason
    emit(BenchEvent("finished", None, total, total, f"benchmark finished: {total} levels"))
    return levels, None


def reason_to_stop_before(
    plan: BenchPlan, concurrency: int, should_stop: Callable[[], bool] | None
) -> str | None:
    """Why the ladder stops before this level (asked to, or the server is not healthy)."""
    if should_stop is not None and should_stop():
        return f"asked to stop before concurrency {concurrency}"
    healthy, why = server_health(plan)
    if not healthy:
        return f"server not healthy before concurrency {concurrency}: {why}"
    return None


def server_health(plan: BenchPlan, timeout: float = HEALTH_TIMEOUT_S) -> tuple[bool, str]:
    """GET /health (SGLang answers 200 when it can generate); (ok, why not)."""
    url = plan.base_url.rstrip("/") + "/health"
    try:
        status, _ = fetch_bytes(url, timeout_s=timeout, headers=bearer(plan.api_key))
    except FetchError as exc:
        if exc.status is not None:
            return False, f"/health answered HTTP {exc.status}"
        return False, f"cannot reach {plan.base_url}: {exc.cause}"
    return status == 200, f"HTTP {status}"


class _Windows:
    """The telemetry window of one level: whole process at first, then the measured run.

    bench_serving (0.4 .. 0.5.x) sleeps 1 s between printing the start marker and starting
    its clock; the measured window opens after that idle second, so that energy per token
    is not diluted by it."""

    def __init__(self, sampler: WindowSampler | None, label: str, no_sampler_reason: str):
        self.sampler = sampler
        self.label = label
        self.reason = no_sampler_reason if sampler is None else "no window"
        self.current: Any = None
        self.scope: str | None = None
        self.stats: Any = None
        self.started = False
        self.lock = threading.Lock()
        self.timer: threading.Timer | None = None
        if sampler is not None:
            self.current = sampler.open_window(label + " (process)")
            self.scope = "whole-process"

    def start_measured(self) -> bool:
        """Switch to the measured run's window soon; True the first time the run starts."""
        if self.started:
            return False
        self.started = True
        if self.sampler is None:
            self.scope = "measured-run"
        else:
            self.timer = threading.Timer(MEASURED_RUN_DELAY_S, self._switch)
            self.timer.daemon = True
            self.timer.start()
        return True

    def _switch(self) -> None:
        with self.lock:
            if self.sampler is None or self.scope != "whole-process" or self.current is None:
                return
            self.sampler.close_window(self.current)
            self.current = self.sampler.open_window(self.label)
            self.scope = "measured-run"

    def end_measured(self) -> None:
        self._cancel_timer()
        with self.lock:
            if self.sampler is not None and self.current is not None and self.stats is None:
                self.stats = self.sampler.close_window(self.current)
                self.current = None

    def finish(self) -> tuple[Any, str | None]:
        self.end_measured()
        return self.stats, self.scope

    def abandon(self) -> None:
        self._cancel_timer()
        with self.lock:
            if self.sampler is not None and self.current is not None:
                self.sampler.close_window(self.current)
                self.current = None

    def _cancel_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer.join()


def _start_timer(group: ChildGroup, limit: float | None, flag: threading.Event):
    if not limit:
        return None

    def expire() -> None:
        flag.set()
        _end_group(group)

    timer = threading.Timer(limit, expire)
    timer.daemon = True
    timer.start()
    return timer


def _stop_when(should_stop: Callable[[], bool], group: ChildGroup, flag) -> None:
    while group.poll() is None:
        if should_stop():
            flag.set()
            _end_group(group)
            return
        time.sleep(0.2)


def _end_group(group: ChildGroup) -> None:
    """SIGTERM to bench_serving's group, SIGKILL after STOP_GRACE_S."""
    if group.poll() is None:
        group.stop(STOP_GRACE_S, first_signal_to="group")


def _read_line(output_file: Path) -> str | None:
    try:
        return last_result_line(output_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None


def _append_raw(path: Path, concurrency: int, raw_line: str) -> None:
    # The raw line as bench_serving wrote it; one per level, in ladder order.
    with open(path, "a", encoding="utf-8") as out:
        out.write(raw_line.rstrip("\n") + "\n")
        out.flush()
        os.fsync(out.fileno())


def _last_error_line(tail: list[str]) -> str:
    for line in reversed(tail):
        text = line.strip()
        if text and not text.startswith(("[transformers]", "Fail to set RLIMIT")):
            return text[:300]
    return "(no output)"


def failed_level(concurrency: int, requested: int, started: float, error: str) -> LevelResult:
    return LevelResult(
        concurrency=concurrency,
        requested=requested,
        metrics=None,
        telemetry=unavailable("the level did not run"),
        returncode=None,
        wall_s=time.monotonic() - started,
        error=error,
    )


def done_message(level: LevelResult) -> str:
    m = level.metrics
    if m is None or m.total_throughput is None:
        return f"concurrency {level.concurrency}: no result ({level.error})"
    return (
        f"concurrency {level.concurrency}: {m.total_throughput:,.0f} total tok/s, "
        f"{level.completed}/{level.requested} completed"
    )
