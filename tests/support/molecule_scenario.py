"""Run a Molecule scenario from pytest and check that its verify steps really ran."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
EPHEMERAL_ROOT = Path.home() / ".cache" / "molecule" / "glm5svc-per-platform"
TOOLS = ("lxc-start", "lxc-attach", "mmdebstrap", "gpg", "dpkg-scanpackages", "unshare")


def skip_reason() -> str | None:
    """Why this machine cannot boot the scenario's targets, or None."""
    if os.geteuid() != 0:
        return "needs root: the scenario boots privileged LXC containers"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"needs {', '.join(missing)} (scripts/setup-dev.sh installs them)"
    return None


def run_scenario(name: str, expected_tasks: tuple[str, ...], platform: str | None = None) -> str:
    """`molecule test -s NAME [--platform-name PLATFORM]`; asserts success and that every
    expected task ran. Returns Molecule's log as plain words (it wraps and colours its output).

    With `platform`, only that platform runs, with its own ephemeral directory, so the
    platforms of one scenario can run at the same time in separate pytest workers."""
    env = dict(os.environ, PATH=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    env["COLUMNS"] = "200"
    only_platform: list[str] = []
    if platform is not None:
        only_platform = ["--platform-name", platform]
        env["MOLECULE_EPHEMERAL_DIRECTORY"] = str(EPHEMERAL_ROOT / f"{name}-{platform}")
    subprocess.run(
        [sys.executable, str(REPO / "molecule" / "shared" / "fetch_collections.py")],
        cwd=REPO, env=env, check=True, capture_output=True,
    )  # fmt: skip
    done = subprocess.run(
        [str(VENV_BIN / "molecule"), "test", "-s", name, *only_platform],
        cwd=REPO, env=env, capture_output=True, text=True,
    )  # fmt: skip
    output = done.stdout + done.stderr
    plain = re.sub(r"\x1b\[[0-9;]*m", "", output).replace("│", " ")
    words = " ".join(plain.split())
    failures = [
        words[max(0, m.start() - 300) : m.start() + 1500] for m in re.finditer("fatal:", words)
    ]
    tail = "\n...\n".join(failures[:3]) or output[-6000:]
    assert done.returncode == 0, tail
    for task in expected_tasks:
        assert f"TASK [{task}]" in words, f"verify step missing: {task}\n{tail}"
    return words
