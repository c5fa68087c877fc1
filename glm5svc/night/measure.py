"""The night's measurements, one method for both sides: engine starts of glm5.service, each
measured by `glm5svc bench` on the tune's workload (its steady windows at the tune's
concurrency), the starts kept in the step's data as each is measured, so a night killed
between two starts continues with the next (compare.py judges them). Each start is
measured only on the configuration its side names: glm5.service's /status gives the sha256
of the file it started on, and a start on another one fails the step (nothing to measure);
a restart records its intent before it acts (state.py)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from glm5svc.config import Config
from glm5svc.errors import Glm5Error
from glm5svc.night import units
from glm5svc.night.children import Finished, glm5svc_argv, run_child
from glm5svc.night.compare import Spread
from glm5svc.night.fleet_turn import FleetTurn
from glm5svc.night.serving import running_sha256, wait_serving
from glm5svc.night.state import NightState


class BenchFailed(Glm5Error):
    """A start did not serve, or its bench gave too few windows: the night fails there."""


class Benches:
    def __init__(self, state: NightState, config: Config, stop: threading.Event, turn: FleetTurn):
        self.state = state
        self.config = config
        self.stop = stop
        self.turn = turn

    def starts(
        self, step: str, side: str, restart_first: bool, runs: str | None = None
    ) -> dict[str, Any]:
        """`verdict_starts` engine starts of `side`, each benched: a start measured before
        an interruption is kept (the step's data holds it), the next one restarted. `runs`:
        the sha256 of the configuration each start must run (None: not checked)."""
        wanted = int(self.state.plan.get("verdict_starts") or 1)
        data = self.state.data(step)
        starts: list[list[float]] = data.setdefault("starts", [])
        began = time.monotonic()
        while len(starts) < wanted:
            if starts or restart_first:
                self.restart(step, side, len(starts) + 1, runs)
            else:
                check_runs(self.config, runs, side)
            starts.append(self.bench(side)["throughputs"])
            self.state.save()  # a start measured is kept through a kill
        windows = [v for s in starts for v in s]
        wall_s = round(time.monotonic() - began + float(data.get("wall_s") or 0), 1)
        means = ", ".join(f"{sum(s) / len(s):,.1f}" for s in starts)
        return {
            "detail": f"{side}: {len(starts)} start(s) of {len(starts[0])} windows, means "
            f"{means} tok/s ({wall_s:.0f} s)",
            "throughputs": windows,
            "starts": starts,
            "wall_s": wall_s,
        }

    def restart(self, step: str, side: str, number: int, runs: str | None) -> None:
        """A fresh start of glm5.service on the configuration it has, serving (on `runs`)
        before the bench; its intent recorded first; the fleet's turn taken as for any
        restart."""
        self.turn.wait_for_turn(self.stop)
        self.state.intend(step, f"restart glm5.service for the {side}'s start {number}")
        units.act("restart")
        self.state.fulfilled(step)
        why = wait_serving(self.config, self.stop)
        if why:
            raise BenchFailed(f"glm5.service does not serve after the {side}'s restart: {why}")
        check_runs(self.config, runs, side)
        self.turn.back_in_rotation(self.stop)

    def bench(self, side: str) -> dict[str, Any]:
        began = time.monotonic()
        argv = glm5svc_argv(
            self.state.config_path,
            "bench",
            *workload_args(self.state.workload, tune=False),
            "--windows",
            str(self.state.windows),
            "--baseline",
            "none",
            "--results-dir",
            str(self.state.night_dir / side),
            "--json",
        )
        done = run_child(argv, f"bench-{side}", self.state.night_dir, self.stop)
        throughputs = bench_windows(done)
        if len(throughputs) < 2:
            raise BenchFailed(
                f"the {side} bench gave {len(throughputs)} window(s), two at least are needed "
                f"(exit status {done.returncode}: {done.error()})"
            )
        wall_s = round(time.monotonic() - began, 1)
        mean = sum(throughputs) / len(throughputs)
        return {
            "detail": f"{side}: {len(throughputs)} windows, mean {mean:,.1f} tok/s "
            f"({wall_s:.0f} s)",
            "throughputs": throughputs,
            "wall_s": wall_s,
            "summary": (done.document or {}).get("run_dir"),
        }


def check_runs(config: Config, runs: str | None, side: str) -> None:
    """A failure when glm5.service started on another configuration than `runs` (the
    sha256 in its /status; None: not checked): the start would not measure the side's."""
    if runs:
        refuse_other(running_sha256(config), runs, side)


def refuse_other(running: str | None, runs: str, side: str) -> None:
    if running != runs:
        what = "applied" if side == "morning" else f"{side}'s"
        raise BenchFailed(
            f"glm5.service does not run the {what} configuration (sha256 {runs[:12]}; "
            f"it started on {(running or 'an unknown one')[:12]}): nothing to measure"
        )


def workload_args(workload: dict[str, Any], tune: bool) -> list[str]:
    """The workload as `tune run`'s options (tune) or `bench`'s (one level: the concurrency)."""
    args = ["--concurrency" if tune else "--ladder", str(workload["concurrency"])]
    if workload.get("request_file"):
        return [*args, "--request-file", str(workload["request_file"])]
    for key, flag in (("input_len", "--input-len"), ("output_len", "--output-len")):
        if workload.get(key):
            args += [flag, str(workload[key])]
    return args


def starts_of(data: dict[str, Any]) -> list[list[float]]:
    """A bench step's starts, each its windows (a state written before the starts were
    kept: its windows, one start)."""
    return data.get("starts") or [data["throughputs"]]


def tune_spread(tune_dir: Path) -> Spread:
    """The start-to-start spread the tune's starts showed (its summary.json), else the
    prior."""
    try:
        summary = json.loads((tune_dir / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return Spread.prior()
    return Spread.of_tune(summary) if isinstance(summary, dict) else Spread.prior()


def bench_windows(done: Finished) -> list[float]:
    """The measured windows of the bench's one level (its steady throughputs)."""
    levels = (done.document or {}).get("levels") or []
    steady = (levels[0].get("steady") or {}) if levels else {}
    return [float(v) for v in steady.get("throughputs") or []]
