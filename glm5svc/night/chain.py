"""The night on the box, step by step (state.STEPS), each step resumable and idempotent.

Longer than 400 lines: the steps in their order and each one's failure path beside it, in
one class; what they look at on the box is in box.py, the state in state.py.

evening   the configuration as it serves, kept byte for byte (evening.yaml); glm5.service up
baseline  `glm5svc bench` on the tune's workload, on fresh engine starts of the evening's
          configuration (plan `verdict_starts` of them, glm5.service restarted before each
          unless the evening step just started it): the evening's starts and windows
tune      `glm5svc tune run --take-over` (or `--resume` its folder), within what the budget
          leaves after the morning's steps; glm5.service is started again after it whatever
          happened to the tune
apply     `glm5svc tune apply` only a confirmed overlay (it restarts glm5.service)
morning   the same bench against the tuned service, as many starts (the apply's restart
          the first), each start checked to run the applied file (its sha256 in /status)
compare   morning against evening over their starts, at the tune's start-to-start spread,
          with a non-inferiority margin (compare.py)
rollback  the evening's configuration back and glm5.service restarted on it: when the
          morning is worse beyond the noise or not shown within the margin, or does not
          come up, and after any failure or stop (then the night's outcome says failed or
          stopped)
report    report.md and report.json in the night's folder, the last night's record

Every failure and every stop ends in `rollback`: glm5.service serves the evening's
configuration. A night killed at any point (SIGKILL, a reboot) runs again from its state
file: the step that was running runs again, the tune with `--resume`.

What can go wrong on the way, and what the night does:
- whatever breaks a step (an error, a bug, a disk that refuses the state file) ends it
  `failed` and the rollback runs; from then on a save the disk refuses is said on stderr
  (the journal) and kept aside (state.py), never raised;
- the apply, a restart and the rollback record their intent before they act; glm5.service
  is restarted unless the configuration it started on (its /status: the file's sha256) is
  the file's, so a night killed between the overlay's write and the restart restarts it;
- a configuration file changed during the night by someone else (not the evening's, not
  the overlay the night wrote) is drift: the apply and the rollback leave it in place and
  the night ends `unchanged`, naming it (a file that does not load is put aside, named,
  and the evening's put back);
- the rollback and the report say what serves, looked at, not assumed.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from glm5svc.atomic_file import write_atomic
from glm5svc.config import Config
from glm5svc.errors import Glm5Error
from glm5svc.night import box, units
from glm5svc.night.box import first_line, keep_aside
from glm5svc.night.children import Stopped, glm5svc_argv, run_child
from glm5svc.night.compare import compare_mornings
from glm5svc.night.fleet_turn import FleetTurn
from glm5svc.night.measure import Benches, refuse_other, starts_of, tune_spread, workload_args
from glm5svc.night.report import write_report, write_textfile
from glm5svc.night.serving import running_sha256, wait_serving
from glm5svc.night.state import NightState, current_night, file_sha256, set_current

EXIT_CONFIG = 78  # tune apply refused the overlay (not confirmed, measured elsewhere)
RESTART_GUESS_S = 120.0  # a start of glm5.service before one is measured
MARGIN_S = 60.0
NOT_WITHIN_WHY = "not shown within the margin of the evening"


class StepFailed(Glm5Error):
    """A step could not do its part; the night restores the evening's configuration."""


class Night:
    def __init__(
        self,
        state: NightState,
        config: Config,
        stop: threading.Event,
        log: Callable[[str], None] = print,
    ):
        self.state = state
        self.config = config
        self.stop = stop
        self.log = log
        self.turn = FleetTurn(config, state, log)
        self.restart_error: str | None = None  # glm5.service's start after the tune, failed
        self.recorded = True
        self.in_step: str | None = None  # the step running, until its end is saved
        self.benches = Benches(state, config, stop, self.turn)

    # ----- the chain ----------------------------------------------------------------

    def run(self) -> str:
        """The night to its end; its outcome. `recorded` says whether the report was written
        (else it went to stderr, and the night's unit runs again to write it)."""
        state = self.state
        try:
            if state.outcome is None:
                self._chain()
        except Stopped as exc:
            state.lenient = True
            self._cut("stopped", self._with_restart_error(str(exc)))
        except Exception as exc:  # whatever breaks the night, the evening's comes back
            state.lenient = True
            self._cut("failed", first_line(exc))
        state.lenient = True  # from here on the disk may refuse: act, then say what it refused
        if state.outcome in ("rolled_back", "failed", "stopped"):
            try:
                self._once("rollback", self.rollback)
            except Exception as exc:
                state.end_step("rollback", "failed", first_line(exc))
                state.outcome = "failed"
                state.headline = f"{state.headline}; the rollback failed: {first_line(exc)}"
        self.recorded = True
        try:
            self._once("report", self.report)
        except Exception as exc:  # report.md went to stderr; the unit's next run writes it
            state.end_step("report", "failed", f"not written: {first_line(exc)}")
            self.recorded = False
        results = self.config.service.results_dir
        why = write_textfile(self.config.service.night_textfile, results, state)
        if why:
            self.log(f"night: the textfile for node_exporter: {why}")
        if self.recorded and current_night(results) == state.night_dir:
            try:
                set_current(results, None)  # ended: nothing to continue at boot
            except OSError as exc:
                self.log(f"night: cannot remove {results}/night-current: {exc}")
                self.recorded = False
        return state.outcome or "failed"

    def _with_restart_error(self, why: str) -> str:
        if self.restart_error:
            return f"{why}; glm5.service did not start after the tune: {self.restart_error}"
        return why

    def _cut(self, outcome: str, why: str) -> None:
        """The running step ends `outcome`; the night's outcome says which and why."""
        running = (s for s, e in self.state.steps.items() if e.get("status") == "running")
        step = next(running, self.in_step)  # in_step: its end was not saved
        if step is not None:
            self.state.end_step(step, outcome, why)
        where = f"during {step}" if step else "before its first step"
        if outcome == "stopped":
            self._decide(outcome, f"stopped by the operator {where}: {why}")
        else:
            self._decide(outcome, f"{step or 'the night'} failed: {why}")

    def _chain(self) -> None:
        self._once("evening", self.evening)
        self._once("baseline", self.baseline)
        tuned = self._once("tune", self.tune)
        if not tuned.get("apply"):
            self._decide("unchanged", tuned.get("why") or "nothing to apply")
            return
        applied = self._once("apply", self.apply)
        if not applied.get("applied"):
            self._decide("unchanged", applied.get("why") or "tune apply refused the overlay")
            return
        if applied.get("came_up") is False:
            self._decide("rolled_back", f"the tuned service did not come up: {applied['why']}")
            return
        morning = self._once("morning", self.morning)
        if not morning.get("serving"):
            self._decide("rolled_back", f"the tuned service did not come up: {morning['why']}")
            return
        verdict = self._once("compare", self.compare)
        if verdict["rollback"]:
            why = "worse beyond the noise" if verdict["verdict"] == "worse" else NOT_WITHIN_WHY
            self._decide("rolled_back", f"the morning is {why}: {verdict['text']}")
        else:
            self._decide("tuned", f"the confirmed overlay serves: {verdict['text']}")

    def _once(self, name: str, step: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """Run `step` unless it is done; its data either way."""
        if self.state.status_of(name) in ("done", "skipped"):
            return self.state.data(name)
        if self.stop.is_set() and name not in ("rollback", "report"):
            raise Stopped(f"before {name}")
        self.in_step = name
        self.state.begin_step(name)
        self.log(f"night: {name}")
        data = step()
        self.state.end_step(name, "done", data.pop("detail"), **data)
        self.in_step = None
        return self.state.data(name)

    def _decide(self, outcome: str, headline: str) -> None:
        self.state.outcome, self.state.headline = outcome, headline
        self.state.note(f"outcome: {outcome}: {headline}")

    # ----- the steps ----------------------------------------------------------------

    def evening(self) -> dict[str, Any]:
        evening = self.state.evening_config
        config_path = Path(self.state.config_path)
        if not evening.exists():  # a second run keeps the first copy: it is the evening's
            write_atomic(evening, config_path.read_bytes(), mode=0o600)
        began = time.monotonic()
        started = units.ensure_started()
        start_s = round(time.monotonic() - began, 1) if started else None
        why = wait_serving(self.config, self.stop)
        if why:
            raise StepFailed(f"glm5.service does not serve the evening's configuration: {why}")
        detail = f"kept {config_path} as {evening.name}; glm5.service serves" + (
            f" (started it: {start_s:.0f} s)" if started else ""
        )
        return {"detail": detail, "start_s": start_s}

    def baseline(self) -> dict[str, Any]:
        # The morning's starts are fresh; so are the evening's (an engine up for days is
        # not what the morning measures): restarted unless the evening step started it.
        # Each start measured is checked to run the evening's file (its sha256 in /status).
        fresh = self.state.data("evening").get("start_s") is not None
        evening = file_sha256(self.state.evening_config)
        return self.benches.starts("baseline", "evening", restart_first=not fresh, runs=evening)

    def tune(self) -> dict[str, Any]:
        state = self.state
        budget_s = self._tune_budget_s()
        if budget_s < self._restart_s():
            return {
                "detail": f"skipped: the budget leaves {budget_s:.0f} s for the tune, "
                "less than one engine start",
                "apply": False,
                "why": "the budget left no room for the tune",
            }
        self.turn.wait_for_turn(self.stop)
        resume = (state.tune_dir / "tune.json").is_file()
        where = ["--resume", str(state.tune_dir)] if resume else ["--run-dir", str(state.tune_dir)]
        argv = glm5svc_argv(
            state.config_path,
            "tune",
            "run",
            "--take-over",
            "--json",
            *where,
            "--budget",
            f"{budget_s:.0f}s",
            *workload_args(state.workload, tune=True),
            *state.tune_args,
        )
        if not resume and state.tune_dir.exists():  # cut before its run began: nothing measured
            for leftover in sorted(state.tune_dir.rglob("*"), reverse=True):
                leftover.rmdir() if leftover.is_dir() else leftover.unlink()
        try:
            done = run_child(argv, "tune", state.night_dir, self.stop)
        finally:
            hand_back(self.config.server.cache_dir)
            self._start_after_tune()  # a tune killed mid-way never started it again
            self.turn.back_in_rotation(self.stop)
        if self.restart_error:
            raise StepFailed(f"glm5.service did not start after the tune: {self.restart_error}")
        summary = done.document or {}
        if done.returncode != 0:
            raise StepFailed(f"glm5svc tune run exited {done.returncode}: {done.error()}")
        confirmed, overlay = summary.get("confirmed"), summary.get("overlay") or {}
        dropped = ((summary.get("plan") or {}).get("dropped")) or []
        facts = {
            "run_dir": str(state.tune_dir),
            "resumed": resume,
            "budget_s": round(budget_s),
            "confirmed": confirmed,
            "confirmation": summary.get("confirmation"),
            "overlay": overlay,
            "gain": summary.get("gain"),
            "best": (summary.get("best") or {}).get("setting"),
            "stopped_by": summary.get("stopped_by"),
            "dropped": [d.get("knob") or d for d in dropped],
        }
        if not overlay:
            why = "no setting measured better than the evening's"
        elif confirmed is not True:
            why = f"the best was not confirmed ({summary.get('confirmation') or 'no reason'})"
        else:
            why = None
        detail = why or f"confirmed overlay {overlay}"
        return {"detail": f"tune: {detail}", "apply": why is None, "why": why, **facts}

    def apply(self) -> dict[str, Any]:
        drift = box.drift(self.state)
        if drift:
            return {"detail": f"not applied: {drift}", "applied": False, "why": drift}
        self.turn.wait_for_turn(self.stop)
        argv = glm5svc_argv(
            self.state.config_path, "tune", "apply", str(self.state.tune_dir), "--json"
        )
        self.state.intend("apply", "run `tune apply`: the overlay into the configuration "
                          "file, then glm5.service restarted on it")  # fmt: skip
        done = run_child(argv, "apply", self.state.night_dir, self.stop)
        written = file_sha256(Path(self.state.config_path))
        if done.returncode == EXIT_CONFIG:
            why = f"tune apply refused it: {done.error()}"
            return {"detail": why, "applied": False, "why": why}
        if done.returncode != 0:
            if written == file_sha256(self.state.evening_config):
                raise StepFailed(f"glm5svc tune apply exited {done.returncode}: {done.error()}")
            why = f"tune apply wrote the overlay, then: {done.error()}"
            return {"detail": why, "applied": True, "came_up": False, "why": why,
                    "written_sha256": written}  # fmt: skip
        result = done.document or {}
        self.state.data("apply")["written_sha256"] = written
        self.state.fulfilled("apply")
        try:
            # Unless tune apply's own restart did; a rerun after a kill between its write
            # and its restart finds glm5.service on the evening's file, and restarts it.
            restarted = box.serve_the_file(self.state, self.config, "apply")
        except units.UnitError as exc:
            why = f"glm5.service does not start on the tuned configuration: {exc}"
            return {"detail": why, "applied": True, "came_up": False, "why": why,
                    "written_sha256": written}  # fmt: skip
        changed = result.get("changed") or self.state.data("apply").get("changed")
        how = "restarted it on the file" if restarted else "glm5.service restarted"
        return {
            "detail": f"applied {changed}; {how}",
            "applied": True,
            "changed": changed,
            "backup": result.get("backup") or self.state.data("apply").get("backup"),
            "written_sha256": written,
        }

    def morning(self) -> dict[str, Any]:
        why = wait_serving(self.config, self.stop)
        if why:
            return {"detail": f"glm5.service does not serve: {why}", "serving": False, "why": why}
        running = running_sha256(self.config)
        applied = self.state.data("apply").get("written_sha256")
        if applied:  # before it takes traffic again
            refuse_other(running, applied, "morning")
        self.turn.back_in_rotation(self.stop)
        measured = self.benches.starts("morning", "morning", restart_first=False, runs=applied)
        return {**measured, "serving": True, "measured_sha256": running}

    def compare(self) -> dict[str, Any]:
        evening, morning = (starts_of(self.state.data(step)) for step in ("baseline", "morning"))
        spread = tune_spread(self.state.tune_dir)
        comparison = compare_mornings(evening, morning, spread).to_dict()
        return {"detail": comparison["text"], **comparison}

    def rollback(self) -> dict[str, Any]:
        config_path = Path(self.state.config_path)
        kept = self.state.evening_config
        evening = kept.read_bytes() if kept.exists() else None
        drift = box.drift(self.state)
        aside = None
        if drift and box.loads(config_path):  # an operator's edit: it stays, and serves
            self._decide("unchanged", f"{drift}; the night's own end was: {self.state.headline}")
            box.serve_the_file(self.state, self.config, "rollback")
            why = wait_serving(self.config, threading.Event())
            return {"detail": f"not rolled back: {drift}", "restored": False, "drift": True,
                    "serving": why is None, "why": why}  # fmt: skip
        if drift:  # an edit that does not load: kept aside, the evening's back
            aside = keep_aside(config_path, "broken")
        now = file_sha256(config_path)
        changed = evening is not None and now != file_sha256(kept)
        if changed:
            target = config_path.resolve()  # written through a link, as tune apply does
            mode = target.stat().st_mode & 0o7777 if target.exists() else 0o644
            self.state.intend("rollback", f"put {kept.name} back into {config_path}")
            write_atomic(target, evening, mode=mode)
            self.state.fulfilled("rollback")
        if units.is_active() and running_sha256(self.config) != file_sha256(config_path):
            # it serves the tuned setting: the others first, as for any restart
            self.turn.wait_for_turn(threading.Event(), bounded=False)
        box.serve_the_file(self.state, self.config, "rollback")
        why = wait_serving(self.config, threading.Event())
        running = running_sha256(self.config) if why is None else None
        if why is None and evening is not None and running != file_sha256(kept):
            why = f"it runs another configuration (sha256 {(running or 'unknown')[:12]})"
        put_aside = f"; the edited file that does not load is kept as {aside}" if aside else ""
        if why:
            self.state.outcome = "failed"
            self.state.headline = (
                f"{self.state.headline}; and glm5.service does not serve "
                f"the evening's configuration: {why}{put_aside}"
            )
            return {
                "detail": f"glm5.service does not serve after the rollback: {why}{put_aside}",
                "restored": changed,
                "serving": False,
            }
        if aside:
            self.state.headline = f"{self.state.headline}{put_aside}"
        self.turn.back_in_rotation(threading.Event())
        what = "put the evening's configuration back and restarted" if changed else "kept"
        return {
            "detail": f"{what} glm5.service: it serves the evening's configuration{put_aside}",
            "restored": changed,
            "serving": True,
        }

    def report(self) -> dict[str, Any]:
        serving = box.serving_line(self.state, self.config)
        path = write_report(self.state, self.config.service.results_dir, serving)
        return {"detail": f"wrote {path}"}

    # ----- helpers ------------------------------------------------------------------

    def _start_after_tune(self) -> None:
        """glm5.service started again after the tune; a failure is kept (restart_error) for
        the step or the stop to report, never raised over what ended the tune."""
        try:
            units.ensure_started()
        except units.UnitError as exc:
            self.restart_error = first_line(exc)
            self.state.note(f"tune: glm5.service did not start after the tune: {exc}")

    def _restart_s(self) -> float:
        measured = self.state.data("evening").get("start_s")
        planned = (self.state.plan.get("tune") or {}).get("start_s")
        return float(measured or planned or RESTART_GUESS_S)

    def _tune_budget_s(self) -> float:
        """What is left before the deadline once the morning's steps are set aside: the
        morning bench (as long as the evening's), the apply's restart and a rollback's."""
        deadline = datetime.fromisoformat(self.state.deadline_at).timestamp()
        reserve = float(self.state.data("baseline").get("wall_s") or 0) + 2 * self._restart_s()
        return deadline - time.time() - reserve - MARGIN_S


def hand_back(cache_dir: Path | None) -> None:
    """The engine's caches the trials wrote (as root, the night's user) to the owner of the
    cache folder: glm5.service (user glm5) reads and extends them at its next start."""
    if cache_dir is None or not Path(cache_dir).is_dir():
        return
    owner = Path(cache_dir).stat()
    for path in Path(cache_dir).rglob("*"):
        try:
            found = path.lstat()
            if (found.st_uid, found.st_gid) != (owner.st_uid, owner.st_gid):
                os.lchown(path, owner.st_uid, owner.st_gid)
        except OSError:
            continue  # gone meanwhile, or not ours to change: the next start says so
