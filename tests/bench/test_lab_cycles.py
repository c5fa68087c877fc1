"""bench/lab_cycles.py's phase reading, on a recorded `scripts/lab up` log and on made-up
step lines (the short mode CI runs: no root, no LXC)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.lab_cycles import PHASES, LogError, parse_up_log

REPO = Path(__file__).resolve().parents[2]
RECORDED = Path(__file__).parent / "fixtures" / "lab-up.log"


def steps(*marks: tuple[str, int]) -> str:
    return "\n".join(f"noise\n== [{phase}] doing it ({s}s)" for phase, s in marks)


def test_recorded_cold_lab_up_has_every_phase():
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / "lab_cycles.py"), "--parse", str(RECORDED)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    run = parse_up_log(RECORDED.read_text())
    assert run.finished and list(run.phases) == list(PHASES)
    assert all(seconds > 0 for seconds in run.phases.values())
    header, row = result.stdout.splitlines()
    assert header.split()[:3] == ["cycle", "result", "set-up"] and row.split()[1] == "ok"


def test_a_phase_lasts_until_the_next_phase_starts():
    run = parse_up_log(
        steps(("set-up", 0), ("boot", 10), ("boot", 30), ("site.yml", 95), ("done", 100))
    )
    assert run.phases == {"set-up": 10, "boot": 85, "site.yml": 5}
    assert run.finished and run.total_s == 100


def test_a_run_that_stopped_names_its_phase():
    run = parse_up_log(steps(("set-up", 0), ("boot", 10)))
    assert not run.finished and run.last_phase == "boot"
    assert run.phases == {"set-up": 10}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("PLAY RECAP\nok=3", "no step lines"),
        (steps(("set-up", 0), ("warp", 3)), "unknown phase 'warp'"),
        (steps(("set-up", 9), ("boot", 3)), "goes back in time"),
        (steps(("set-up", 0), ("boot", 3), ("set-up", 5)), "appears twice"),
    ],
)
def test_logs_that_are_not_a_lab_up_are_refused(text, message):
    with pytest.raises(LogError, match=message):
        parse_up_log(text)
