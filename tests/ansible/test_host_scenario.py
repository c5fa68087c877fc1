"""The host play on real Debian systems: `molecule test -s host`.

Boots Debian 12 (Proxmox VE 8 base) and Debian 13 (Proxmox VE 9 base) with systemd in
LXC, then: check mode on the fresh targets (must change nothing), converge
(playbooks/proxmox_host.yml against a signed stand-in NVIDIA repository and stand-in pct,
pveversion, boot tools), idempotence, and molecule/host/verify.yml (container config line
by line, pinning, units, device nodes, reboot report, and the raw lxc keys proven in a real
LXC container). Needs root, LXC, mmdebstrap, gpg and dpkg-dev (scripts/setup-dev.sh).
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
TOOLS = ("lxc-start", "lxc-attach", "mmdebstrap", "gpg", "dpkg-scanpackages", "unshare")

pytestmark = [pytest.mark.slow, pytest.mark.lxc]


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root: the scenario boots privileged LXC containers"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"needs {', '.join(missing)} (scripts/setup-dev.sh installs them)"
    return None


@pytest.mark.timeout(1200)
@pytest.mark.skipif(_skip_reason() is not None, reason=_skip_reason() or "")
def test_molecule_host_scenario():
    path = f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"
    env = dict(os.environ, PATH=path, COLUMNS="200")
    subprocess.run(
        [sys.executable, str(REPO / "molecule" / "shared" / "fetch_collections.py")],
        cwd=REPO, env=env, check=True, capture_output=True,
    )  # fmt: skip
    done = subprocess.run(
        [str(VENV_BIN / "molecule"), "test", "-s", "host"],
        cwd=REPO, env=env, capture_output=True, text=True,
    )  # fmt: skip
    output = done.stdout + done.stderr
    # Molecule wraps and colours its log: compare words only.
    words = " ".join(re.sub(r"\x1b\[[0-9;]*m|│", " ", output).split())
    failures = [
        words[max(0, m.start() - 300) : m.start() + 1500] for m in re.finditer("fatal:", words)
    ]
    tail = "\n...\n".join(failures[:3]) or output[-6000:]
    assert done.returncode == 0, tail
    # The return code covers every step of the test sequence (idempotence included);
    # these task names show that the check-mode and verify steps really ran.
    for check in (
        "Compare the container config line by line with the expected one",
        "Check repository, key, pinning and packages",
        "Check the units and that they created the nodes",
        "Check every node inside (right numbers, and the cgroup lets it through)",
        "Check that nothing was written",
    ):
        assert f"TASK [{check}]" in words, f"verify step missing: {check}\n{tail}"
