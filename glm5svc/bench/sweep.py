"""A whole benchmark run: results directory, telemetry, the ladder, verdicts, files."""

from __future__ import annotations

import contextlib
import errno
import shutil
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from glm5svc.bench import provenance
from glm5svc.bench.baselines import load_baseline
from glm5svc.bench.measure import run_steady_ladder
from glm5svc.bench.outputs import write_results
from glm5svc.bench.plan import BenchPlan
from glm5svc.bench.results import BenchSummary
from glm5svc.bench.runner import ProgressCallback, run_ladder
from glm5svc.bench.verdicts import all_verdicts
from glm5svc.errors import ConfigError, Glm5Error
from glm5svc.json_output import now_utc
from glm5svc.records import PlanSummary
from glm5svc.telemetry import Sampler


@dataclass(frozen=True)
class Judgement:
    """Thresholds for the verdicts (config.benchmark) and the baseline to compare with."""

    knee_gain_pct: float = 10.0
    underused_power_share: float = 0.6
    regression_threshold_pct: float = 5.0
    baseline: str | None = None

    @classmethod
    def from_config(cls, config: Any, baseline: str | None = None) -> Judgement:
        """The config's thresholds; `baseline` (a --baseline) replaces benchmark.baseline,
        which must load (ConfigError naming the key), as `validate` checks."""
        bench = config.benchmark
        if baseline is None and bench.baseline:
            try:
                load_baseline(bench.baseline)
            except ConfigError as exc:
                raise ConfigError(
                    f"benchmark.baseline: {exc}; set it to one of those, or null for no comparison",
                    problems=exc.problems,
                ) from None
        return cls(
            knee_gain_pct=bench.knee_gain_pct,
            underused_power_share=bench.underused_power_share,
            regression_threshold_pct=bench.regression_threshold_pct,
            baseline=baseline if baseline is not None else bench.baseline,
        )


RUN_DIR_MODE = 0o750
WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EFBIG, errno.EACCES}


def new_run_dir(results_root: Path, kind: str, under: str = "bench") -> Path:
    """results_root/<under>/<UTC timestamp>[-<kind>], made unique (tune's runs too)."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + (f"-{kind}" if kind else "")
    base = Path(results_root) / under
    for n in range(1000):
        candidate = base / (stamp + (f"-{n}" if n else ""))
        try:
            candidate.mkdir(parents=True)
        except FileExistsError:
            continue
        except OSError as exc:
            raise Glm5Error(
                f"cannot make the run directory {candidate}: {exc.strerror or exc}; "
                "free space there or choose another place (service.results_dir, glm5svc "
                "bench --results-dir, glm5svc tune --run-dir)"
            ) from None
        candidate.chmod(RUN_DIR_MODE)  # results are not for other users (plans, logs)
        return candidate
    raise RuntimeError(f"cannot make a new run directory under {base}")


@contextlib.contextmanager
def telemetry_sampler(sampler: Any = None, config: Any = None) -> Iterator[tuple[Any, str]]:
    """(sampler to measure with, or None; "available" or why not). Starts one if not given,
    and stops only what it started."""
    if sampler is not None:
        yield _usable(sampler)
        return
    if config is not None and not config.telemetry.enabled:
        yield None, "disabled in the configuration (telemetry.enabled: false)"
        return
    own = Sampler.from_config(config.telemetry) if config is not None else Sampler()
    own.start()
    try:
        yield _usable(own)
    finally:
        own.stop()


def _usable(sampler: Any) -> tuple[Any, str]:
    if getattr(sampler, "available", True):
        return sampler, "available"
    snapshot = sampler.snapshot() if hasattr(sampler, "snapshot") else None
    return None, (getattr(snapshot, "reason", None) or "NVML not available")


def run_benchmark(
    plan: BenchPlan,
    results_root: Path,
    judgement: Judgement,
    *,
    kind: str = "sweep",
    sampler: Any = None,
    config: Any = None,
    on_progress: ProgressCallback | None = None,
    run_dir: Path | None = None,
    should_stop: Callable[[], bool] | None = None,
    launch_plan: PlanSummary | None = None,
) -> BenchSummary:
    """`launch_plan`: the summary of the plan the service launched, recorded as the run's
    provenance (else the plan is built from `config` here)."""
    plan.validate()
    baseline = load_baseline(judgement.baseline) if judgement.baseline else None
    made_here = run_dir is None
    run_dir = Path(run_dir) if run_dir else new_run_dir(results_root, kind)
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        return _measure_and_write(
            plan, run_dir, made_here, kind, judgement, baseline, sampler, config, on_progress,
            should_stop, launch_plan,
        )  # fmt: skip
    except OSError as exc:  # a full or failing disk: say where, and keep no half-written run
        if exc.errno not in WRITE_ERRNOS:
            raise
        if made_here:
            shutil.rmtree(run_dir, ignore_errors=True)
        where = exc.filename or run_dir
        raise Glm5Error(
            f"cannot write the benchmark results: {where}: {exc.strerror or exc}; "
            f"nothing was kept{' (removed ' + str(run_dir) + ')' if made_here else ''}. "
            "Free space there or choose another place (service.results_dir, glm5svc bench "
            "--results-dir)"
        ) from None


def _measure_and_write(
    plan, run_dir, made_here, kind, judgement, baseline, sampler, config, on_progress, should_stop,
    launch_plan,
) -> BenchSummary:  # fmt: skip
    started = now_utc()
    with telemetry_sampler(sampler, config) as (measuring, telemetry_status):
        # Provenance (a subprocess, the launch plan) and the plot's matplotlib import are
        # prepared while the first level runs, not added to the run's wall time.
        prep = _Background(lambda: _prepare(plan, measuring or sampler, config, launch_plan))
        ladder = run_steady_ladder if plan.steady else run_ladder
        levels, stopped = ladder(
            plan, run_dir, measuring, on_progress, telemetry_status, should_stop
        )
    facts = prep.result()
    summary = BenchSummary(
        run_id=run_dir.name,
        kind=kind,
        started_at=started,
        finished_at=now_utc(),
        plan=plan.describe(),
        levels=levels,
        stopped_reason=stopped,
        telemetry_status=telemetry_status,
        provenance=facts,
        results_dir=str(run_dir),
    )
    summary.verdicts = all_verdicts(
        levels,
        judgement.knee_gain_pct,
        judgement.underused_power_share,
        baseline,
        judgement.regression_threshold_pct,
        summary.plan,
    )
    if stopped and not any(level.metrics for level in levels):
        # Nothing measured: no results directory that looks like a run.
        stopped = _nothing_measured(stopped, levels, plan)
        summary.stopped_reason = stopped
        summary.results_dir = None
        if made_here:
            shutil.rmtree(run_dir, ignore_errors=True)
        return summary
    summary.verdicts["judgement"] = {
        "knee_gain_pct": judgement.knee_gain_pct,
        "underused_power_share": judgement.underused_power_share,
        "regression_threshold_pct": judgement.regression_threshold_pct,
        "baseline": judgement.baseline,
    }
    write_results(summary, run_dir)
    return summary


def _nothing_measured(reason: str, levels: list, plan: BenchPlan) -> str:
    if any(level.returncode not in (0, None) for level in levels):
        reason += (
            f"; bench_serving ran with {plan.python} (benchmark.python, else server.python; "
            "glm5svc bench --python overrides): it needs sglang and what sglang.bench_serving "
            "imports"
        )
    return reason + "; nothing was measured, so no results were kept"


def _prepare(
    plan: BenchPlan, sampler: Any, config: Any, launch_plan: PlanSummary | None
) -> dict[str, Any]:
    facts = provenance.collect(plan.python, sampler, config, plan, launch_plan)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.figure  # noqa: F401 (warm import for the plot)
    except ImportError:
        pass
    return facts


class _Background:
    """Run a function in a daemon thread; result() waits for it (and re-raises)."""

    def __init__(self, func: Callable[[], Any]):
        self._value: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(func,), daemon=True)
        self._thread.start()

    def _run(self, func: Callable[[], Any]) -> None:
        try:
            self._value = func()
        except BaseException as exc:  # handed to the caller of result()
            self._error = exc

    def result(self) -> Any:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value
