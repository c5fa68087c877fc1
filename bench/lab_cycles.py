#!/usr/bin/env python3
"""Cycles of `scripts/lab down` + `scripts/lab up`: how often the lab comes up, and how long
each phase takes (set-up, root filesystems, boot, site.yml, check run, bench).

    .venv/bin/python bench/lab_cycles.py --cycles 5 --cold-first [--out results/lab-cycles.json]
    .venv/bin/python bench/lab_cycles.py --parse LOG     # the phase table of a recorded `lab up`

--cold-first removes the lab's caches (root filesystems, stand-in repository, apt and pip
downloads: $GLM5_LAB_CACHE, default /var/cache/glm5-lab) before the first cycle. Each cycle's
full output is kept beside the JSON. The phases come from the step lines `scripts/lab` prints,
"== [<phase>] <what> (<seconds since the start>s)"; --parse reads them from a recorded log
(CI runs that on a recorded log: no root, no LXC, well under a second).
Needs root and what `scripts/lab up` needs; one cycle takes minutes.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.phases import write_json  # noqa: E402

PHASES = ("set-up", "root filesystems", "boot", "site.yml", "check run", "bench")
STEP = re.compile(r"^== \[(?P<phase>[^\]]+)\] (?P<what>.*) \((?P<seconds>\d+)s\)$")
DEFAULT_CACHE = "/var/cache/glm5-lab"


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


def run_cycles(cycles: int, cold_first: bool, out: Path) -> int:
    logs = out.with_suffix("")
    logs.mkdir(parents=True, exist_ok=True)
    cache = Path(os.environ.get("GLM5_LAB_CACHE") or DEFAULT_CACHE)
    result: dict = {"cycles": [], "cold_first": cold_first, "cpus": os.cpu_count()}
    rows = []
    for index in range(1, cycles + 1):
        started = time.monotonic()
        load_before = _load()
        print(f"== cycle {index}/{cycles} (load average {load_before})", flush=True)
        down_rc, _ = _lab("down", logs / f"cycle{index}-down.log")
        if cold_first and index == 1:
            drop_caches(cache)
        rc, text = _lab("up", logs / f"cycle{index}-up.log")
        try:
            run = parse_up_log(text)
        except LogError as exc:
            run = UpRun(last_phase=f"(no phases: {exc})")
        run.finished = run.finished and rc == 0 and down_rc == 0
        wall = round(time.monotonic() - started)
        cold = "cold" if cold_first and index == 1 else "warm"
        note = f"{cold}; load {load_before} -> {_load()}"
        rows.append((str(index), run, note))
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
                "load_before": load_before,
                "load_after": _load(),
                "log": str(logs / f"cycle{index}-up.log"),
            }
        )
        result["succeeded"] = sum(1 for c in result["cycles"] if c["ok"])
        write_json(out, result)
        print(format_table(rows[-1:]), flush=True)
    print(f"\n{result['succeeded']}/{cycles} cycles succeeded ({os.cpu_count()} CPUs)")
    print(format_table(rows))
    return 0 if result["succeeded"] == cycles else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=5)
    parser.add_argument("--cold-first", action="store_true", help="drop the caches first")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "lab-cycles.json")
    parser.add_argument("--parse", type=Path, metavar="LOG", help="only read a recorded log")
    args = parser.parse_args()
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
    return run_cycles(args.cycles, args.cold_first, args.out)


if __name__ == "__main__":
    sys.exit(main())
