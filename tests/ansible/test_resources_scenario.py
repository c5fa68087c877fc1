"""glm5_host_lxc_resources on a real Debian 13 system: `molecule test -s resources`.

Check mode, converge, idempotence, then molecule/resources/verify.yml: two container configs
line by line (mpN and raw mount entry, cores/memory, NUMA cpuset from a made-up sysfs,
rlimits) above an untouched snapshot section, and the raw mount proven read-only in a real
LXC container. Needs root and LXC (scripts/setup-dev.sh).
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
    return f"needs {', '.join(missing)} (scripts/setup-dev.sh)" if missing else None


@pytest.mark.timeout(600)
@pytest.mark.skipif(_skip_reason() is not None, reason=_skip_reason() or "")
def test_molecule_resources_scenario():
    env = dict(
        os.environ, PATH=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}", COLUMNS="200"
    )
    subprocess.run(
        [sys.executable, str(REPO / "molecule" / "shared" / "fetch_collections.py")],
        cwd=REPO, env=env, check=True, capture_output=True,
    )  # fmt: skip
    done = subprocess.run(
        [str(VENV_BIN / "molecule"), "test", "-s", "resources"],
        cwd=REPO, env=env, capture_output=True, text=True,
    )  # fmt: skip
    output = done.stdout + done.stderr
    words = " ".join(re.sub(r"\x1b\[[0-9;]*m|│", " ", output).split())
    failures = [
        words[max(0, m.start() - 300) : m.start() + 1500] for m in re.finditer("fatal:", words)
    ]
    assert done.returncode == 0, "\n...\n".join(failures[:3]) or output[-6000:]
    for check in (
        "Compare each config line by line with the expected one",
        "Check the snapshot sections, the restart and the host directory",
        "Check read-only inside, the host's file visible, mounted ro",
    ):
        assert f"TASK [{check}]" in words, f"verify step missing: {check}"
