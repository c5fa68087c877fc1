"""The container play on real Debian systems: `molecule test -s container`.

Boots Debian 12 and 13 with systemd in LXC, runs playbooks/glm5_container.yml against them
(stand-in NVIDIA repository, real sglang 0.5.10.post1 patched by the real patch engine, the
test engine in place of sglang's server), checks idempotence, then molecule/container/
verify.yml: glm5.service active (Type=notify, glm5svc as main process), /readyz, patches
applied, a config change restarts it, a bad value is refused with the old file kept, and
`systemctl stop` leaves no engine process. Needs root, LXC and mmdebstrap (scripts/setup-dev.sh).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
TOOLS = ("lxc-start", "lxc-attach", "mmdebstrap")

pytestmark = [pytest.mark.slow, pytest.mark.lxc]


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root: the scenario boots privileged LXC containers"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"needs {', '.join(missing)} (apt-get install lxc mmdebstrap zstd)"
    return None


@pytest.mark.timeout(1500)
@pytest.mark.skipif(_skip_reason() is not None, reason=_skip_reason() or "")
def test_molecule_container_scenario():
    env = dict(os.environ, PATH=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    subprocess.run(
        [sys.executable, str(REPO / "molecule" / "shared" / "fetch_collections.py")],
        cwd=REPO, env=env, check=True, capture_output=True,
    )  # fmt: skip
    done = subprocess.run(
        [str(VENV_BIN / "molecule"), "test", "-s", "container"],
        cwd=REPO, env=env, capture_output=True, text=True,
    )  # fmt: skip
    output = done.stdout + done.stderr
    tail = output[-6000:]
    assert done.returncode == 0, tail
    # Molecule wraps and colours its log: compare words only.
    words = " ".join(re.sub(r"\x1b\[[0-9;]*m|│", " ", output).split())
    assert "idempotence: Executed: Successful" in words, tail
    for check in (
        "Check that it is a notify unit whose main process is glm5svc",
        "Check that every patch is applied to sglang 0.5.10.post1",
        "Check that the bad value failed clearly and the old file stayed",
        "Check that the change restarted the service",
        "Look for engine processes after the stop",
    ):
        assert f"TASK [{check}]" in words, f"verify step missing: {check}\n{tail}"
