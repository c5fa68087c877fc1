"""The glm5_service role run during a night (`site.yml` again, or `playbooks/night.yml`)
leaves it alone: with `service.results_dir/night-current` present it writes no
configuration, key or unit and starts or restarts nothing (check mode, on localhost)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLAY = """\
- hosts: localhost
  connection: local
  gather_facts: true
  vars:
    glm5_stack_profile: cu128
    glm5_service_config_path: {config}
  roles: [glm5_service]
"""


def task_results(output: str) -> dict[str, str]:
    """Each task's name and the first word of its result (ok, changed, skipping)."""
    found = {}
    for name, body in re.findall(r"TASK \[glm5_service : (.+?)\] \**\n(.*?)(?=\nTASK |\nPLAY )",
                                 output, re.S):  # fmt: skip
        words = re.findall(r"^(ok|changed|skipping|fatal|included):", body, re.M)
        found[name] = words[0] if words else ""
    return found


@pytest.mark.parametrize("night", [True, False])
def test_a_night_in_progress_is_left_alone(tmp_path, night):
    results = tmp_path / "results"
    results.mkdir()
    if night:
        (results / "night-current").write_text(f"{results}/night/20261207T200000Z\n")
    play = tmp_path / "play.yml"
    config = tmp_path / "etc" / "glm5.yaml"
    play.write_text(PLAY.format(config=config))
    extra = {"glm5_service_api_key": "sk-1",
             "glm5_service_config_extra": {"service": {"results_dir": str(results)}}}  # fmt: skip
    if night:  # glm5svc "installed": only the night keeps the unit and the start from running
        venv = tmp_path / "venv"
        (venv / "bin").mkdir(parents=True)
        (venv / "bin" / "glm5svc").write_text("#!/bin/sh\nexit 1\n")
        (venv / "bin" / "glm5svc").chmod(0o755)
        extra["glm5_service_venv_path"] = str(venv)
    done = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "--check", "-i", "localhost,",
         str(play), "-e", json.dumps(extra)],
        capture_output=True, text=True, timeout=300,
        env={"ANSIBLE_ROLES_PATH": str(REPO / "roles"), "PATH": "/usr/bin:/bin",
             "ANSIBLE_NOCOLOR": "1", "HOME": str(tmp_path)},
    )  # fmt: skip
    said = done.stdout + done.stderr
    assert done.returncode == 0, said[-3000:]
    tasks = task_results(done.stdout)
    write = next(name for name in tasks if name.startswith("Write the configuration"))
    key = next(name for name in tasks if name.startswith("Write the API key"))
    assert ("A night is in progress on localhost" in said) is night
    assert tasks["Say that the night in progress is left alone"] == ("ok" if night else "skipping")
    assert tasks[write] == ("skipping" if night else "changed"), said[-3000:]
    assert tasks[key] == ("skipping" if night else "changed")
    # (Without glm5svc in a venv, as in the second case, they are skipped either way.)
    for included in ("Install the unit glm5svc renders", "Start the service and wait for it"):
        assert tasks[included] == "skipping", said[-3000:]
    assert not config.exists()
