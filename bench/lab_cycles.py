#!/usr/bin/env python3
"""Cycles of `scripts/lab down` + `scripts/lab up`: how often the lab comes up, and how long
each phase takes (set-up, root filesystems, boot, site.yml, check run, bench).

    .venv/bin/python bench/lab_cycles.py --cycles 10 --cold-first [--out results/lab-cycles.json]
    .venv/bin/python bench/lab_cycles.py --cycles 5 --beside '.venv/bin/python -m pytest -q'
    .venv/bin/python bench/lab_cycles.py --parse LOG     # the phase table of a recorded `lab up`

--cold-first removes the lab's caches (root filesystems, stand-in repository, apt and pip
downloads: $GLM5_LAB_CACHE, default /var/cache/glm5-lab) before the first cycle. --beside CMD
runs a shell command again and again while the cycles run (a machine that is not idle: the
test suite); each of its runs is counted and logged. Each cycle's full output is kept beside
the JSON, with the summary of a failed one (--failure). The phases come from the step lines
`scripts/lab` prints, "== [<phase>] <what> (<seconds since the start>s)"; --parse reads them
from a recorded log (CI runs that on a recorded log: no root, no LXC, well under a second).
--failure is what `scripts/lab up` prints when it fails: the phase and step, the Ansible task
and host that failed with their error, the log, and what to run next.
Needs root and what `scripts/lab up` needs; one cycle takes minutes.

Longer than 400 lines: one benchmark: the cycles, the phase parser and the table it prints
read the same phase lines of scripts/lab and stay together.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.phases import write_json  # noqa: E402
from glm5svc.child_group import ChildGroup, spawn  # noqa: E402

PHASES = ("set-up", "root filesystems", "boot", "site.yml", "check run", "bench")
STEP = re.compile(r"^== \[(?P<phase>[^\]]+)\] (?P<what>.*) \((?P<seconds>\d+)s\)$")
DEFAULT_CACHE = "/var/cache/glm5-lab"
STOP_GRACE_S = 20.0  # for the command beside the cycles, after SIGTERM to its group


class LogError(ValueError):
    """The log is not the output of `scripts/lab up`."""


@dataclass
class UpRun:
    """The phases one `scripts/lab up` went through, in seconds, and whether it finished."""

    phases: dict[str, int] = field(default_factory=dict)
    finished: bool = False
    last_phase: str | None = None  # the phase it was in when it stopped

    @property
    def total_s(self) -> int:
        return sum(self.phases.values())


def parse_up_log(text: str) -> UpRun:
    """Phase durations from the step lines: a phase lasts from its first step line to the
    next phase's first one; "done" closes the last. Unknown phase names are errors."""
    marks: list[tuple[str, int]] = []
    for line in text.splitlines():
        match = STEP.match(line.strip())
        if not match:
            continue
        phase, seconds = match["phase"], int(match["seconds"])
        if phase not in PHASES and phase != "done":
            raise LogError(f"unknown phase '{phase}' in step line: {line.strip()}")
        if marks and seconds < marks[-1][1]:
            raise LogError(f"step line goes back in time ({seconds}s after {marks[-1][1]}s)")
        if not marks or marks[-1][0] != phase:
            if any(seen == phase for seen, _ in marks):
                raise LogError(f"phase '{phase}' appears twice, apart")
            marks.append((phase, seconds))
    if not marks:
        raise LogError("no step lines ('== [<phase>] ... (<n>s)'): not a `scripts/lab up` log")
    run = UpRun(finished=marks[-1][0] == "done")
    for (phase, start), (_next, end) in zip(marks, marks[1:], strict=False):
        run.phases[phase] = end - start
    if not run.finished:
        run.last_phase = marks[-1][0]
    return run


# Ansible's default callback: "TASK [role : name] ***", "fatal: [ct -> host]: UNREACHABLE! =>",
# "failed: [host] (item=x) =>", "[ERROR]: Task failed: ..." (ansible-core 2.19).
TASK = re.compile(r"^TASK \[(?P<task>.+)\] \*+$")
FAILED = re.compile(
    r"^(?:fatal|failed): \[(?P<host>[^\]]+)\](?: \(item=.*?\))?"
    r"(?:: (?P<status>FAILED|UNREACHABLE)!)? =>"
)
ERROR = re.compile(r"^\[ERROR\]: (?P<message>.+)$")
MSG = re.compile(r"^\s+msg: (?P<message>.+)$")
NEXT_STEPS = {
    "set-up": ["scripts/setup-dev.sh  (then scripts/lab up)"],
    "root filesystems": ["scripts/lab up  (the root filesystems are rebuilt where missing)"],
    "boot": ["scripts/lab down && scripts/lab up"],
    "site.yml": [
        "scripts/lab shell [host]  (look around)",
        "scripts/lab up  (site.yml again on the running lab)",
        "scripts/lab down && scripts/lab up  (from nothing)",
    ],
    "check run": ["scripts/lab check  (the check run again)", "scripts/lab down && scripts/lab up"],
    "bench": ["scripts/lab bench  (the bench step again)", "scripts/lab down && scripts/lab up"],
}


@dataclass
class Failure:
    """Where a `scripts/lab up` stopped: its last step line, and the Ansible task that failed
    in that step (if one did)."""

    phase: str | None = None
    step: str | None = None
    task: str | None = None
    host: str | None = None
    status: str | None = None  # FAILED or UNREACHABLE
    message: str | None = None
    stderr: str | None = None  # a failed command's first line of stderr


def find_failure(text: str) -> Failure:
    """The last step line and, after it, the last Ansible failure that was not ignored
    (its task, host and first error line); an error outside any task counts too."""
    failure = Failure()
    task = None
    pending: Failure | None = None  # a failure line whose message may follow
    lines = text.splitlines()
    for index, raw in enumerate(lines):
        line = raw.rstrip()
        if match := STEP.match(line.strip()):
            failure = Failure(phase=match["phase"], step=match["what"])
            task, pending = None, None
        elif match := TASK.match(line):
            task, pending = match["task"], None
        elif match := FAILED.match(line):
            if _ignored(lines, index):
                continue
            pending = Failure(failure.phase, failure.step, task, match["host"], match["status"])
            pending.message = _error_before(lines, index)
            pending.stderr = _stderr_after(lines, index)
            failure = pending
        elif pending is not None and pending.message is None and (match := MSG.match(line)):
            pending.message = match["message"].strip("'\"")
        elif (match := ERROR.match(line)) and task is None and failure.message is None:
            failure.message = match["message"]
    if failure.stderr:
        failure.message = f"{failure.message or 'failed'}; stderr: {failure.stderr}"
    if failure.message:
        failure.message = _shorten(failure.message)
    return failure


def _ignored(lines: list[str], index: int) -> bool:
    """Ansible prints "...ignoring" after the result of a failure it ignores."""
    for line in lines[index + 1 :]:
        if line.startswith("...ignoring"):
            return True
        if TASK.match(line) or FAILED.match(line) or line.startswith(("PLAY ", "ok: ")):
            return False
    return False


def _stderr_after(lines: list[str], index: int) -> str | None:
    """The first line of a failed command's stderr, from the result printed after it
    (`stderr: text`, or `stderr: |-` and the text indented below)."""
    for number, line in enumerate(lines[index + 1 : index + 60], start=index + 1):
        if line and not line[0].isspace():
            return None
        match = re.match(r"^(\s+)stderr: (.*)$", line)
        if not match:
            continue
        value = match[2].strip()
        if value in ("|-", "|", ">-", ">") and number + 1 < len(lines):
            value = lines[number + 1].strip()
        return value.strip("'\"") or None
    return None


def _error_before(lines: list[str], index: int) -> str | None:
    """The "[ERROR]: ..." line Ansible prints between a task's header and its result."""
    for line in reversed(lines[max(0, index - 40) : index]):
        if TASK.match(line):
            return None
        if match := ERROR.match(line):
            return match["message"]
    return None


def _shorten(message: str, limit: int = 240) -> str:
    message = " ".join(message.split())
    return message if len(message) <= limit else message[: limit - 3] + "..."


def format_failure(failure: Failure, log: str, rc: int | None = None) -> str:
    """The few lines `scripts/lab up` ends with when it fails."""
    code = f" (exit status {rc})" if rc is not None else ""
    lines = [f"scripts/lab up FAILED{code} in phase [{failure.phase or 'unknown'}]"]
    if failure.step:
        lines.append(f"  step:  {failure.step}")
    if failure.task or failure.host:
        where = f" on {failure.host}" if failure.host else ""
        status = f" ({failure.status or 'FAILED'})" if failure.host else ""
        lines.append(f"  task:  {failure.task or '(before any task)'}{where}{status}")
    if failure.message:
        lines.append(f"  error: {failure.message}")
    lines.append(f"  log:   {log}")
    commands = NEXT_STEPS.get(failure.phase or "", ["scripts/lab down && scripts/lab up"])
    lines.append("  next:  " + "\n         ".join(commands))
    return "\n".join(lines)


def format_table(rows: list[tuple[str, UpRun, str]]) -> str:
    """One line per cycle: the label, ok/FAILED, each phase, the total, a note."""
    header = ["cycle", "result", *PHASES, "total", "note"]
    lines = [header]
    for label, run, note in rows:
        result = "ok" if run.finished else f"FAILED in {run.last_phase}"
        cells = [_seconds(run.phases.get(p)) for p in PHASES]
        lines.append([label, result, *cells, _seconds(run.total_s), note])
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(header))]
    return "\n".join(
        "  ".join(str(cell).ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def _seconds(value: int | None) -> str:
    if value is None:
        return "-"
    return f"{value // 60}m{value % 60:02d}s" if value >= 60 else f"{value}s"


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.1f} {five:.1f} {fifteen:.1f}"


def _lab(action: str, log: Path) -> tuple[int, str]:
    """Run `scripts/lab ACTION`, its output teed to LOG and the terminal."""
    with log.open("w", encoding="utf-8") as out:
        proc = subprocess.Popen(
            [str(REPO / "scripts" / "lab"), action],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
        for line in proc.stdout:  # type: ignore[union-attr]
            out.write(line)
            if STEP.match(line.strip()):
                print(f"   {line.strip()}", flush=True)
        rc = proc.wait()
    return rc, log.read_text(encoding="utf-8")


def drop_caches(cache: Path) -> None:
    if cache.exists():
        shutil.rmtree(cache)
    print(f"-- dropped the lab's caches ({cache})", flush=True)


class Beside:
    """A shell command run again and again, in its own process group, until stopped."""

    def __init__(self, command: str, logs: Path):
        self.command, self.logs = command, logs
        self.runs: list[dict] = []
        self._stop = threading.Event()
        self._group: ChildGroup | None = None
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            index = len(self.runs) + 1
            log = self.logs / f"beside{index}.log"
            started = time.monotonic()
            with log.open("w", encoding="utf-8") as out:
                self._group = spawn(
                    ["/bin/sh", "-c", self.command], die_with_parent=False, cwd=REPO, stdout=out,
                    stderr=subprocess.STDOUT,
                )  # fmt: skip
                rc = self._group.wait(None)
            self.runs.append(
                {
                    "run": index,
                    "rc": rc,
                    "seconds": round(time.monotonic() - started),
                    "stopped": self._stop.is_set(),
                    "log": str(log),
                }
            )

    def stop(self) -> None:
        self._stop.set()
        if self._group is not None and self._group.poll() is None:
            self._group.stop(STOP_GRACE_S, first_signal_to="group")
        self._thread.join(timeout=30)

    def summary(self) -> str:
        done = [run for run in self.runs if not run["stopped"]]
        passed = sum(1 for run in done if run["rc"] == 0)
        return (
            f"beside: `{self.command}` ran {len(done)} time(s) to the end ({passed} exit 0), "
            f"{len(self.runs) - len(done)} stopped at the end"
        )


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())


def _commit() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    )
    return done.stdout.strip() or "unknown"


def run_cycles(cycles: int, cold_first: bool, out: Path, beside: str | None = None) -> int:
    logs = out.with_suffix("")
    logs.mkdir(parents=True, exist_ok=True)
    cache = Path(os.environ.get("GLM5_LAB_CACHE") or DEFAULT_CACHE)
    result: dict = {
        "cycles": [],
        "cold_first": cold_first,
        "cpus": os.cpu_count(),
        "commit": _commit(),
        "started": _now(),
        "beside": beside,
    }
    rows = []
    helper = Beside(beside, logs) if beside else None
    if helper:
        helper.start()
    try:
        for index in range(1, cycles + 1):
            rows.append(_cycle(index, cycles, cold_first, cache, logs, result))
            result["succeeded"] = sum(1 for c in result["cycles"] if c["ok"])
            if helper:
                result["beside_runs"] = list(helper.runs)
            write_json(out, result)
            print(format_table(rows[-1:]), flush=True)
    finally:
        if helper:
            helper.stop()
            result["beside_runs"] = helper.runs
    result["finished"] = _now()
    write_json(out, result)
    print(
        f"\n{result['succeeded']}/{cycles} cycles succeeded ({os.cpu_count()} CPUs, commit "
        f"{result['commit']}, {result['started']} - {result['finished']})"
    )
    if helper:
        print(helper.summary())
    print(format_table(rows))
    for cycle in result["cycles"]:
        if cycle.get("failure"):
            print(f"\ncycle {cycle['cycle']}:\n{cycle['failure']}")
    return 0 if result["succeeded"] == cycles else 1


def _cycle(index: int, cycles: int, cold_first: bool, cache: Path, logs: Path, result: dict):
    started = time.monotonic()
    load_before = _load()
    print(f"== cycle {index}/{cycles} (load average {load_before}, {_now()})", flush=True)
    down_rc, _ = _lab("down", logs / f"cycle{index}-down.log")
    if cold_first and index == 1:
        drop_caches(cache)
    up_log = logs / f"cycle{index}-up.log"
    rc, text = _lab("up", up_log)
    try:
        run = parse_up_log(text)
    except LogError as exc:
        run = UpRun(last_phase=f"(no phases: {exc})")
    run.finished = run.finished and rc == 0 and down_rc == 0
    wall = round(time.monotonic() - started)
    cold = "cold" if cold_first and index == 1 else "warm"
    note = f"{cold}; load {load_before} -> {_load()}"
    failure = None if run.finished else format_failure(find_failure(text), str(up_log), rc)
    result["cycles"].append(
        {
            "cycle": index,
            "cold": cold == "cold",
            "ok": run.finished,
            "up_rc": rc,
            "down_rc": down_rc,
            "phases_s": run.phases,
            "up_total_s": run.total_s,
            "cycle_wall_s": wall,
            "failed_in": run.last_phase,
            "failure": failure,
            "load_before": load_before,
            "load_after": _load(),
            "log": str(up_log),
        }
    )
    return (str(index), run, note)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=5)
    parser.add_argument("--cold-first", action="store_true", help="drop the caches first")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "lab-cycles.json")
    parser.add_argument("--parse", type=Path, metavar="LOG", help="only read a recorded log")
    parser.add_argument(
        "--failure", type=Path, metavar="LOG", help="where a failed `lab up` stopped (its log)"
    )
    parser.add_argument("--rc", type=int, help="with --failure: the exit status of `lab up`")
    parser.add_argument(
        "--beside", metavar="CMD", help="a shell command run again and again beside the cycles"
    )
    args = parser.parse_args()
    if args.failure:
        try:
            text = args.failure.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            print(f"lab_cycles: {args.failure}: {exc}", file=sys.stderr)
            return 2
        print(format_failure(find_failure(text), str(args.failure), args.rc))
        return 0
    if args.parse:
        try:
            run = parse_up_log(args.parse.read_text(encoding="utf-8"))
        except (OSError, LogError) as exc:
            print(f"lab_cycles: {args.parse}: {exc}", file=sys.stderr)
            return 2
        print(format_table([(args.parse.name, run, "recorded")]))
        return 0 if run.finished else 1
    if args.cycles < 1:
        parser.error("--cycles must be at least 1")
    if os.geteuid() != 0:
        parser.error("run as root (scripts/lab boots LXC systems)")
    return run_cycles(args.cycles, args.cold_first, args.out, args.beside)


if __name__ == "__main__":
    sys.exit(main())
