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
TOOLS = ("lxc-start", "lxc-attach", "mmdebstrap", "gpg", "dpkg-scanpackages", "unshare")
# The Debian releases a scenario's one platform can be (MOLECULE_DISTRO in its molecule.yml).
DISTROS = ("bookworm", "trixie")


def scenario_distros(*defaults: str) -> tuple[str, ...]:
    """The releases a scenario test runs for, one test each: all of them with
    GLM5_MOLECULE_ALL_DISTROS=1, else MOLECULE_DISTRO where it is set, else the scenario's
    defaults (a scenario whose checks differ by release runs on each by default)."""
    if os.environ.get("GLM5_MOLECULE_ALL_DISTROS") == "1":
        return DISTROS
    distro = os.environ.get("MOLECULE_DISTRO")
    if not distro:
        return defaults
    if distro not in DISTROS:
        raise ValueError(f"MOLECULE_DISTRO={distro!r}: the scenarios run on {', '.join(DISTROS)}")
    return (distro,)


def skip_reason() -> str | None:
    """Why this machine cannot boot the scenario's targets, or None."""
    if os.geteuid() != 0:
        return "needs root: the scenario boots privileged LXC containers"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"needs {', '.join(missing)} (scripts/setup-dev.sh installs them)"
    return None


def run_scenario(name: str, expected_tasks: tuple[str, ...], distro: str | None = None) -> str:
    """`molecule test -s NAME` with MOLECULE_DISTRO=DISTRO (where given); asserts success and
    that every expected task ran. Returns Molecule's log as plain words (it wraps and colours
    its output)."""
    env = dict(os.environ, PATH=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    env["COLUMNS"] = "200"
    if distro is not None:
        env["MOLECULE_DISTRO"] = distro
    subprocess.run(
        [sys.executable, str(REPO / "molecule" / "shared" / "fetch_collections.py")],
        cwd=REPO, env=env, check=True, capture_output=True,
    )  # fmt: skip
    done = subprocess.run(
        [str(VENV_BIN / "molecule"), "test", "-s", name],
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
