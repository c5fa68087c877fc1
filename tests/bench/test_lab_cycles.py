"""bench/lab_cycles.py's phase reading, on a recorded `scripts/lab up` log and on made-up
step lines (the short mode CI runs: no root, no LXC)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.lab_cycles import PHASES, Beside, LogError, find_failure, parse_up_log

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


FAILED_RUN = Path(__file__).parent / "fixtures" / "lab-up-failed.log"


def test_a_recorded_failure_names_phase_task_host_and_error():
    failure = find_failure(FAILED_RUN.read_text())
    assert failure.phase == "site.yml"
    assert failure.step == "site.yml: host play, then the container play through pct exec"
    assert failure.task == "glm5_container_driver : Read the host's NVIDIA kernel module version"
    assert (failure.host, failure.status) == ("glm5-lab-ct -> glm5-lab-host", "UNREACHABLE")
    assert failure.message.startswith("Task failed: Failed to create temporary directory.")
    assert len(failure.message) <= 240


def test_the_failure_summary_says_what_to_run_next():
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / "lab_cycles.py"), "--failure", str(FAILED_RUN),
         "--rc", "4"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "scripts/lab up FAILED (exit status 4) in phase [site.yml]"
    assert any(line.startswith("  task:  glm5_container_driver : Read") for line in lines)
    assert f"  log:   {FAILED_RUN}" in lines
    assert "scripts/lab down && scripts/lab up" in result.stdout


ANSIBLE_TAIL = """
TASK [glm5_venv : Install the stack] *******************************************
failed: [glm5-lab-ct] (item=sglang) => changed=false
TASK [glm5_venv : Check an optional thing] *************************************
fatal: [glm5-lab-ct]: FAILED! =>
    changed: false
    msg: not there
...ignoring
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # an ignored failure is not the failure; a loop item's is, with the msg line after it
        (
            steps(("set-up", 0), ("site.yml", 9))
            + ANSIBLE_TAIL.replace("changed=false", "\n    msg: No matching distribution"),
            (
                "site.yml",
                "glm5_venv : Install the stack",
                "glm5-lab-ct",
                "No matching distribution",
            ),
        ),
        # an error outside any task (a syntax error, a missing role)
        (
            steps(("set-up", 0), ("check run", 5)) + "\n[ERROR]: the role 'nope' was not found",
            ("check run", None, None, "the role 'nope' was not found"),
        ),
        # a step that failed outside Ansible: only its phase and step
        (
            steps(("set-up", 0), ("bench", 5)) + "\nTraceback (most recent call last):",
            ("bench", None, None, None),
        ),
        # an Ansible failure in an earlier step is not this step's
        (
            steps(("site.yml", 0)) + ANSIBLE_TAIL + steps(("check run", 7)),
            ("check run", None, None, None),
        ),
    ],
)
def test_failure_reading(text, expected):
    failure = find_failure(text)
    assert (failure.phase, failure.task, failure.host, failure.message) == expected


def test_beside_runs_its_command_again_until_stopped(tmp_path):
    helper = Beside("echo run; sleep 0.05; exit 3", tmp_path)
    helper.start()
    time.sleep(0.4)
    helper.stop()
    finished = [run for run in helper.runs if not run["stopped"]]
    assert len(finished) >= 2 and all(run["rc"] == 3 for run in finished)
    assert (tmp_path / "beside1.log").read_text() == "run\n"
    assert helper.summary().startswith(f"beside: `{helper.command}` ran {len(finished)} time(s)")


def test_beside_stops_a_long_run_at_once(tmp_path):
    helper = Beside("sleep 30", tmp_path)
    helper.start()
    time.sleep(0.2)
    started = time.monotonic()
    helper.stop()
    assert time.monotonic() - started < 5
    assert [run["stopped"] for run in helper.runs] == [True]


def test_a_failed_command_adds_its_stderr():
    text = steps(("set-up", 0), ("boot", 4)) + (
        "\nTASK [Start and wait until systemd finished booting glm5-lab-ct] ***\n"
        "[ERROR]: Task failed: Module failed: non-zero return code\n"
        "fatal: [localhost]: FAILED! => \n"
        "    changed: true\n"
        "    rc: 1\n"
        "    stderr: |-\n"
        "        lxc-start glm5-lab-ct failed; the end of .../lxc-start.log:\n"
        "        lxc-start: ... Received container state ABORTING\n"
        "\nPLAY RECAP ***\n"
    )
    failure = find_failure(text)
    assert (failure.phase, failure.host, failure.status) == ("boot", "localhost", "FAILED")
    assert failure.message == (
        "Task failed: Module failed: non-zero return code; "
        "stderr: lxc-start glm5-lab-ct failed; the end of .../lxc-start.log:"
    )
