"""A whole tune: host facts read once, the space, the guard, the trials, the outputs.

The run directory holds everything: study.db (Optuna's SQLite store), tune.json (what a
resumed run must measure the same: workload, settings, space, start), one folder per
engine start under starts/ (its configuration, serve's log, every window), one record
per trial under trials/ (a start's live values are several trials), and the outputs.

Longer than 400 lines: the run directory's preparation and resume, the plan, the search's
wiring and the executor with its retry share the tune's state and stay together.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from glm5svc.atomic_file import write_atomic
from glm5svc.bench.sweep import new_run_dir, telemetry_sampler
from glm5svc.config import Config, config_from_mapping, resolve_config_path
from glm5svc.config_yaml import parse_yaml, read_config_bytes, read_regular_bytes
from glm5svc.errors import ConfigError, Glm5Error
from glm5svc.facts import HostFacts
from glm5svc.json_output import now_utc
from glm5svc.nvml import NvmlUnavailable
from glm5svc.preflight.gpu import list_gpu_processes
from glm5svc.profiles import load_profile
from glm5svc.serve.phases import start_breakdown
from glm5svc.tune.budget import BudgetLedger, Left, budget_left
from glm5svc.tune.confirmation import of_run
from glm5svc.tune.estimate import Estimate, estimate
from glm5svc.tune.guard import TakeOver
from glm5svc.tune.host_figures import START_FILE, STARTS_DIR, estimate_inputs
from glm5svc.tune.outputs import STUDY_FILE, write_outputs
from glm5svc.tune.render import Renderer, trial_mapping, write_trial_config
from glm5svc.tune.retry import FIRST_ATTEMPT_DIR, keep_first_attempt, outside_the_candidate
from glm5svc.tune.search import Search, SearchSettings, Workload, bench_plan_for, load_shape
from glm5svc.tune.space import Space, apply_candidate, load_space, space_from_dict, start_value
from glm5svc.tune.trial import TrialOutcome, TrialRequest, run_trial

GPU_FREE_WAIT_S = 60.0
STOP_RESERVE_S = 10.0  # the last trial's drain and stop, within the budget
OUTPUTS_S = 5.0  # the tables, the plot and the summary


@dataclass(frozen=True)
class TuneRequest:
    config_path: Path | None
    workload: Workload
    settings: SearchSettings
    space_path: Path | None = None
    run_dir: Path | None = None
    resume: Path | None = None
    take_over: bool = False
    disk_read_gbps: float | None = None  # None: measured with a short read
    budget_given: bool = False  # --budget on the command line (a resume's replaces what is left)


def read_mapping(path: Path) -> dict[str, Any]:
    try:
        text = read_config_bytes(path)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the configuration: {exc.strerror or exc}") from None
    data = parse_yaml(text, str(path)).data
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections")
    return data or {}


STUDY_KEYS = {"workload": dict, "settings": dict, "space": dict, "start": dict}
STUDY_DB = "study.db"


def _short(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _study_error(path: Path, key: str, cause: str) -> ConfigError:
    return ConfigError(
        f"{path}: {key}: {cause}. Fix: --resume a run directory that `glm5svc tune run` "
        "wrote (its tune.json and study.db unchanged), or start a new tune without --resume"
    )


def read_study(run_dir: Path) -> dict[str, Any]:
    """tune.json of a run directory, its shape checked, and its study.db checked to be an
    SQLite database Optuna wrote; ConfigError naming file, key, cause and fix."""
    path = Path(run_dir) / STUDY_FILE
    try:
        saved = json.loads(read_regular_bytes(path).decode("utf-8"))
    except FileNotFoundError:
        raise _study_error(path, "(file)", "no such file: not a tune run directory") from None
    except OSError as exc:
        raise _study_error(path, "(file)", f"cannot read: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise _study_error(path, "(file)", f"not JSON ({_short(exc)})") from None
    if not isinstance(saved, dict):
        raise _study_error(path, "(top level)", f"a JSON {type(saved).__name__}, not an object")
    for key, kind in STUDY_KEYS.items():
        if not isinstance(saved.get(key), kind):
            found = "missing" if key not in saved else f"a {type(saved[key]).__name__}"
            held = ", ".join(STUDY_KEYS)
            raise _study_error(path, key, f"{found}, expected an object (a tune.json holds {held})")
    _check_study_db(Path(run_dir) / STUDY_DB)
    return saved


def _check_study_db(path: Path) -> None:
    """study.db, when there, must be an SQLite database with Optuna's tables."""
    if not path.exists():
        return
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
    except sqlite3.Error as exc:
        raise _study_error(path, "(file)", f"not an SQLite database ({exc})") from None
    if "studies" not in tables:
        raise _study_error(path, "(file)", "an SQLite database without Optuna's tables")


class Tune:
    def __init__(
        self,
        request: TuneRequest,
        on_progress: Callable[[str, dict[str, Any]], None] = lambda e, d: None,
        should_stop: Callable[[], bool] = lambda: False,
    ):
        self.request = request
        self._progress = on_progress
        self.ledger: BudgetLedger | None = None
        self.resumed_budget: Left | None = None
        self.should_stop = should_stop
        self.config_path = resolve_config_path(request.config_path)
        self.mapping = read_mapping(self.config_path)
        self.config: Config = config_from_mapping(self.mapping, str(self.config_path))
        # Host facts once: every trial's plan is made from these.
        facts = HostFacts.read(self.config)
        gpus, model = facts.gpus, facts.model
        sglang = facts.sglang_version(load_profile(self.config.server.profile))
        self.facts = facts
        self.facts_summary = {
            "gpus": f"{gpus.count} x {gpus.names[0] if gpus.names else 'GPU'} ({gpus.sm}, "
            f"from {gpus.source})",
            "driver": gpus.driver_version,
            "sglang": sglang.label,
            "model": model.architecture,
            "identity": measured_on(self.config, facts),
        }
        self.renderer = Renderer(facts, check_with_sglang=sglang.installed)
        space = load_space(
            request.space_path,
            self.config,
            model.moe,
            sglang.version,
            refuse=lambda name, value: self.renderer.limit_refusal(
                apply_candidate(self.mapping, {name: value})
            ),
        )
        self.space: Space = space.for_concurrency(request.workload.concurrency)
        self.start = {k.name: start_value(self.config, k.name) for k in self.space.knobs}
        self.guard = TakeOver(request.take_over)
        self.run_dir: Path | None = None
        self.measured: list[TrialOutcome] = []  # every attempt's outcome, this run
        self.hard_deadline = float("inf")
        self.budget_spent: str | None = None

    def _prepare_run_dir(self) -> tuple[Workload, SearchSettings]:
        request = self.request
        if request.resume:
            self.run_dir = Path(request.resume)
            saved = read_study(self.run_dir)
            try:
                self.space = space_from_dict(saved["space"])
                workload = Workload.from_dict(saved["workload"])
                settings = self._resumed_settings(saved["settings"])
            except (KeyError, TypeError, ValueError) as exc:
                raise _study_error(
                    self.run_dir / STUDY_FILE, "space/workload/settings", _short(exc)
                ) from None
            self.start = {k.name: start_value(self.config, k.name) for k in self.space.knobs}
            if saved.get("start") != _jsonable(self.start):
                raise ConfigError(
                    f"--resume {self.run_dir}: the configuration's settings differ from the ones "
                    "this study started from; resume with that configuration or start a new tune"
                )
            return workload, settings
        if request.run_dir:
            self.run_dir = Path(request.run_dir)
            if (self.run_dir / STUDY_FILE).exists():
                raise ConfigError(
                    f"--run-dir {self.run_dir} holds a tune already: --resume it, or choose "
                    "another directory"
                )
            self.run_dir.mkdir(parents=True, exist_ok=True)
        else:
            self.run_dir = new_run_dir(self.config.service.results_dir, "", under="tune")
        saved = {
            "config": str(self.config_path),
            "workload": request.workload.to_dict(),
            "settings": request.settings.to_dict(),
            "space": self.space.to_dict(),
            "space_file": str(request.space_path.absolute()) if request.space_path else None,
            "start": _jsonable(self.start),
        }
        (self.run_dir / STUDY_FILE).write_text(json.dumps(saved, indent=2), encoding="utf-8")
        return request.workload, request.settings

    def plan(self, settings: SearchSettings | None = None) -> tuple[Estimate, list[str]]:
        """The tune's estimate from this configuration, host and (resumed) run so far."""
        settings = settings or self.request.settings
        resumed = Path(self.request.resume) if self.request.resume else None
        if resumed is not None and settings is self.request.settings:
            try:
                saved = json.loads((resumed / STUDY_FILE).read_text(encoding="utf-8"))
                settings = self._resumed_settings(saved["settings"])
                self.space = space_from_dict(saved["space"])
            except (OSError, ValueError, KeyError, TypeError):
                pass
        try:
            moe_backend = self.renderer.plan(self.config).flag_value("--moe-runner-backend")
        except Glm5Error:
            moe_backend = self.config.tuning.moe_runner_backend
        inputs, notes = estimate_inputs(
            self.config, self.facts, self.space, settings, self.request.disk_read_gbps,
            resumed, moe_backend,
        )  # fmt: skip
        return estimate(inputs), notes

    def _resumed_settings(self, saved: dict[str, Any]) -> SearchSettings:
        """The saved study's settings, with this run's trial limits, and the budget given
        with --resume, else what the last run left of its own (budget.json)."""
        settings = self.request.settings.resumed(saved)
        given = settings.budget_s if self.request.budget_given else None
        self.resumed_budget = budget_left(
            Path(self.request.resume), float(saved.get("budget_s") or settings.budget_s), given
        )
        return settings.model_copy(update={"budget_s": self.resumed_budget.budget_s})

    def on_progress(self, event: str, data: dict[str, Any]) -> None:
        """Every step of the run: the time spent recorded in the run directory, then shown."""
        if self.ledger is not None:
            self.ledger.record()
        self._progress(event, data)

    def run(self) -> dict[str, Any]:
        started_at = now_utc()
        self.started = time.monotonic()
        workload, settings = self._prepare_run_dir()
        spent_before = self.resumed_budget.spent_s if self.resumed_budget else 0.0
        self.ledger = BudgetLedger(self.run_dir, settings.budget_s, self.started, spent_before)
        planned, notes = self.plan(settings)
        if self.resumed_budget is not None:
            notes = [f"the budget of this resumed run: {self.resumed_budget.note}", *notes]
        lines = [
            f"run directory: {self.run_dir} (while it runs: glm5svc tune show {self.run_dir})",
            *planned.lines(),
            *[f"plan: {note}" for note in notes],
        ]
        self.on_progress("plan", {"lines": lines, "run_dir": str(self.run_dir)})
        full_space = self.space
        if planned.dropped:
            self.space = replace(
                self.space,
                knobs=[k for k in self.space.knobs if k.name in planned.kept],
                left_out=self.space.left_out
                + [f"{d.knob}: dropped, the first pass would not fit the budget"
                   for d in planned.dropped],
            )  # fmt: skip
        # The budget is a bound: the trial's stop and the outputs fit in it too.
        self.hard_deadline = self.started + settings.budget_s - STOP_RESERVE_S - OUTPUTS_S
        self.budget_spent: str | None = None
        self.guard.begin(self.config)
        search = None
        telemetry_status = None
        try:
            with telemetry_sampler(config=self.config) as (sampler, telemetry_status):
                executor = self._executor(
                    workload, sampler, settings.window_s, settings.settle_s,
                    settings.trial_timeout_s,
                )  # fmt: skip
                search = Search(
                    self.space,
                    self.mapping,
                    self.start,
                    settings,
                    self.run_dir,
                    executor,
                    render=lambda m: self.renderer.refusal(trial_mapping(m, self.run_dir)),
                    on_progress=self.on_progress,
                    should_stop=lambda: self.should_stop() or self.budget_spent is not None,
                    stop_reason=lambda: None if self.should_stop() else self.budget_spent,
                )
                search.replay()  # first: "begin" counts the trials from before
                self.on_progress("begin", {"run_dir": str(self.run_dir), "search": search})
                search.run()
                if self.budget_spent and not self.should_stop():
                    search.stopped_by = self.budget_spent
        finally:
            self.guard.restore()
            if search is not None:
                confirmation = of_run(search, str(self.run_dir))
                self.summary = write_outputs(
                    self.run_dir,
                    search.records,
                    search.best,
                    self.start,
                    {
                        "started_at": started_at,
                        "finished_at": now_utc(),
                        "config": str(self.config_path),
                        "facts": self.facts_summary,
                        "workload": workload.to_dict(),
                        "settings": settings.to_dict(),
                        "space": full_space.to_dict(),
                        "searched": [k.name for k in self.space.knobs],
                        "plan": planned.to_dict(),
                        "stopped_by": search.stopped_by,
                        **confirmation.to_summary(),
                        "confirmation_gain": search.confirmation_gain,
                        "timeline": {
                            "decided_s": round(search.picked_at - self.started, 1)
                            if search.picked_at
                            else None,
                            "wall_s": round(time.monotonic() - self.started, 1),
                            "budget_s": settings.budget_s,
                            "spent_before_s": spent_before,
                        },
                        "service": list(self.guard.log),
                        "telemetry": telemetry_status,
                        "bench_plan": {"ladder": [workload.concurrency]},
                    },
                    settings,
                    lambda a, b: search.combo_key(a) == search.combo_key(b),
                    search.combo_key,
                )
            self.ledger.record()
        return self.summary

    def _executor(self, workload: Workload, sampler, window_s: float | None, settle_s: float,
                  trial_timeout_s: float):  # fmt: skip

        def execute(number, candidate, mapping, decide, deadline, live_values) -> TrialOutcome:
            trial_dir = self.run_dir / STARTS_DIR / f"{number:03d}"
            outcome, held = attempt(number, mapping, decide, deadline, trial_dir, live_values)
            why = outside_the_candidate(
                outcome.status, outcome.failure, outcome.diagnosis, held,
                _text(Path(outcome.serve_log)) if outcome.serve_log else "",
            )  # fmt: skip
            if why and self._time_for_a_trial():
                first = outcome.failure
                keep_first_attempt(trial_dir)
                self.on_progress("trial-phase", {"number": number, "phase": f"again ({why})"})
                outcome, held = attempt(number, mapping, decide, deadline, trial_dir, live_values)
                outcome.diagnosis.insert(
                    0, f"tried again: the first attempt failed outside the candidate ({why}: "
                    f"{first}); its files are in {FIRST_ATTEMPT_DIR}/",
                )  # fmt: skip
            if not self._time_for_a_trial():
                left = max(0.0, self.hard_deadline - time.monotonic())
                self.budget_spent = (
                    f"the time budget is spent: {left:.0f} s left, a trial needs about "
                    f"{self._shortest_trial_s():.0f} s"
                )
            return outcome

        def attempt(number, mapping, decide, deadline, trial_dir, live_values):
            trial = trial_mapping(mapping, trial_dir)
            path = trial_dir / "config.yaml"
            write_trial_config(trial, path)
            config = config_from_mapping(trial, str(path))
            held = _wait_for_free_gpus(self.should_stop)
            plan = bench_plan_for(config, workload, window_s)
            outcome = run_trial(
                TrialRequest(
                    number=number,
                    config=config,
                    config_path=path,
                    trial_dir=trial_dir,
                    bench=plan,
                    load=load_shape(workload, plan, self.facts.model.vocab_size),
                    objective=workload.objective,
                    settle_s=settle_s,
                    decide=decide,
                    # The engine is ready and warm within --trial-timeout; no measured run
                    # starts that cannot end by the budget's deadline, and the one running
                    # at that deadline is cut.
                    deadline=min(time.monotonic() + trial_timeout_s, deadline, self.hard_deadline),
                    measure_deadline=min(deadline, self.hard_deadline - self._run_s()),
                    sampler=sampler,
                    should_stop=lambda: (
                        self.should_stop() or time.monotonic() >= self.hard_deadline
                    ),
                    live_knob=self.space.live_knob.name if live_values else None,
                    live_values=tuple(live_values),
                    on_progress=lambda text: self.on_progress(
                        "trial-phase", {"number": number, "phase": text}
                    ),
                )
            )
            if held:
                outcome.diagnosis.append(f"GPU memory held by others at start: {held}")
            breakdown = start_breakdown(_text(trial_dir / "serve.log").splitlines())
            write_atomic(trial_dir / START_FILE, json.dumps(breakdown.to_dict(), indent=2))
            self.measured.append(outcome)
            return outcome, held

        return execute

    def _run_s(self) -> float:
        walls = [r.wall_s for o in self.measured for r in o.runs]
        return max(walls) if walls else 0.0

    def _shortest_trial_s(self) -> float:
        """A start, the warm-up, the fewest measured runs and the stop, as measured so
        far (0 before the first trial: nothing to go by)."""
        starts = [o.ready_after_s for o in self.measured if o.ready_after_s]
        if not starts:
            return 0.0
        runs = self.request.settings.min_repeats + 1
        stops = [o.stop.get("stop_s") or 0.0 for o in self.measured]
        return sum(starts) / len(starts) + runs * self._run_s() + max(stops)

    def _time_for_a_trial(self) -> bool:
        return self.hard_deadline - time.monotonic() >= self._shortest_trial_s()


def measured_on(config: Config, facts: HostFacts) -> dict[str, Any]:
    """What a tune's figures hold for: these GPUs, this model, this sglang."""
    sglang = facts.sglang_version(load_profile(config.server.profile))
    return {
        "gpu_count": facts.gpus.count,
        "gpu_name": facts.gpus.names[0] if facts.gpus.names else None,
        "model_path": str(config.model.path),
        "model_architecture": facts.model.architecture,
        "sglang_version": sglang.version,
    }


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""


def _wait_for_free_gpus(should_stop: Callable[[], bool]) -> str | None:
    """Wait until no process holds GPU memory (the last trial's engine frees it within
    seconds); what still holds it after the wait, else None. Without NVML: None."""
    deadline = time.monotonic() + GPU_FREE_WAIT_S
    while True:
        try:
            holders = list_gpu_processes()
        except NvmlUnavailable:
            return None
        if not holders:
            return None
        if time.monotonic() >= deadline or should_stop():
            return ", ".join(f"pid {pid} on GPU {gpu} ({mib} MiB)" for gpu, pid, mib in holders)
        time.sleep(1.0)


def _jsonable(values: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(values, default=str))
