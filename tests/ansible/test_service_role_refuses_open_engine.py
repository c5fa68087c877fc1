"""The glm5_service role never installs an engine open beyond loopback from an empty key
(an unset vault variable's default('')): it stops before writing anything."""

from __future__ import annotations

import json
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


@pytest.mark.parametrize(
    ("extra", "refused"),
    [
        ({"glm5_service_host": "0.0.0.0", "glm5_service_api_key": ""}, True),
        ({"glm5_service_host": "0.0.0.0", "glm5_service_api_key": "",
          "glm5_service_allow_unauthenticated": True}, False),
        ({"glm5_service_host": "127.0.0.1", "glm5_service_api_key": ""}, False),
        ({"glm5_service_host": "0.0.0.0", "glm5_service_api_key": "sk-1"}, False),
        ({"glm5_service_host": "0.0.0.0", "glm5_service_api_key_file": "/etc/glm5/k"}, False),
    ],
)  # fmt: skip
def test_an_empty_key_beyond_loopback_fails_the_play_first(tmp_path, extra, refused):
    play = tmp_path / "play.yml"
    config = tmp_path / "etc" / "glm5.yaml"
    play.write_text(PLAY.format(config=config))
    done = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "--check", "-i", "localhost,",
         str(play), "-e", json.dumps(extra)],
        capture_output=True, text=True, timeout=300,
        env={"ANSIBLE_ROLES_PATH": str(REPO / "roles"), "PATH": "/usr/bin:/bin",
             "ANSIBLE_NOCOLOR": "1", "HOME": str(tmp_path)},
    )  # fmt: skip
    said = done.stdout + done.stderr
    assert ("with no API key" in said) is refused, said[-3000:]
    assert "Refuse an engine beyond loopback" in said and "Conditional result" not in said
    if refused:
        assert done.returncode != 0 and "glm5_service_allow_unauthenticated" in said
    assert not config.exists()  # nothing written, refused or (check mode) not
