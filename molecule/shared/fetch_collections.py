#!/usr/bin/env python3
"""Install only the Ansible collections the Molecule scenarios need, from PyPI.

Ansible Galaxy is out of reach on CI machines, but PyPI is not: the `ansible`
wheel bundles every community collection. The scenarios need one of them
(community.docker, for its nsenter connection), so this script downloads the
wheel once into a per-machine cache and extracts just that collection into
<repo>/.cache/ansible_collections (git-ignored), which ansible.cfg names.

Usage: .venv/bin/python molecule/shared/fetch_collections.py
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TARGET = REPO / ".cache" / "ansible_collections"
# ansible 12 is the release line that pairs with ansible-core 2.19 (Python 3.11).
ANSIBLE_SPEC = "ansible>=12,<13"
COLLECTIONS = ("community/docker",)
WHEEL_CACHE = Path(os.environ.get("GLM5_MOLECULE_CACHE", "/var/cache/glm5-molecule")) / "wheels"


def installed() -> bool:
    return all((TARGET / name / "MANIFEST.json").is_file() for name in COLLECTIONS)


def download_wheel() -> Path:
    WHEEL_CACHE.mkdir(parents=True, exist_ok=True)
    wheels = sorted(WHEEL_CACHE.glob("ansible-12.*-py3-none-any.whl"))
    if wheels:
        return wheels[-1]
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        ANSIBLE_SPEC,
        "--no-deps",
        "--only-binary",
        ":all:",
        "--quiet",
        "-d",
        str(WHEEL_CACHE),
    ]
    subprocess.run(cmd, check=True)
    wheels = sorted(WHEEL_CACHE.glob("ansible-12.*-py3-none-any.whl"))
    if not wheels:
        sys.exit(f"pip download left no ansible wheel in {WHEEL_CACHE}")
    return wheels[-1]


def extract(wheel: Path) -> None:
    TARGET.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as archive, tempfile.TemporaryDirectory(dir=TARGET) as tmp:
        for name in COLLECTIONS:
            prefix = f"ansible_collections/{name}/"
            members = [m for m in archive.namelist() if m.startswith(prefix)]
            if not members:
                sys.exit(f"{wheel.name} holds no {name} collection")
            archive.extractall(tmp, members)
            final = TARGET / name
            final.parent.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(final, ignore_errors=True)
            os.rename(Path(tmp) / prefix, final)


def main() -> int:
    TARGET.mkdir(parents=True, exist_ok=True)
    # Scenarios run in parallel (pytest-xdist): one extracts while the others wait.
    with open(TARGET / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not installed():
            extract(download_wheel())
    print(TARGET)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
