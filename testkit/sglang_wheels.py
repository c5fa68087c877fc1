"""Real sglang wheels from PyPI, and the files the patches read unpacked from them.

Wheels are cached in .cache/wheels (pip download --no-deps), the unpacked pristine trees in
.cache/sglang-sites/<version>; tests copy a tree before changing it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from glm5svc.patches.spec import load_patches
from testkit.build_lock import build_lock

REPO = Path(__file__).resolve().parents[1]
WHEELS = REPO / ".cache" / "wheels"
SITES = REPO / ".cache" / "sglang-sites"

# 0.5.6: before the autotune list; 0.5.7: first with it; 0.5.9-0.5.12.post1: nsa names
# (0.5.11: the cu130 stack, a platform wheel); 0.5.13: dsa names, autotune fixed upstream;
# 0.5.23: newest checked (runner/ module, get_exec).
VERSIONS = [
    "0.5.6", "0.5.7", "0.5.9", "0.5.10.post1", "0.5.11", "0.5.12.post1", "0.5.13", "0.5.23"
]  # fmt: skip


class WheelUnavailable(RuntimeError):
    """pip could not download the wheel (no network, or the version left PyPI)."""


def sglang_wheel(version: str) -> Path:
    with build_lock(WHEELS / f"sglang-{version}"):
        found = sorted(WHEELS.glob(f"sglang-{version}-*.whl"))
        if found:
            return found[0]
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "-q", "-d", str(WHEELS),
               f"sglang=={version}"]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        found = sorted(WHEELS.glob(f"sglang-{version}-*.whl"))
        if proc.returncode != 0 or not found:
            raise WheelUnavailable(f"could not download sglang {version}: {proc.stderr[-2000:]}")
        return found[0]


def _wanted(name: str) -> bool:
    if name.endswith(".dist-info/METADATA") or name in ("sglang/__init__.py", "sglang/version.py"):
        return True
    files = {v.file for p in load_patches() for v in p.variants}
    files |= {f for p in load_patches() if p.fixed_upstream for f in p.fixed_upstream.files}
    return name in files


def pristine_site(version: str) -> Path:
    """The wheel's METADATA and the files the patches read, unpacked once."""
    site = SITES / version
    wheel = sglang_wheel(version)
    with build_lock(site):
        if (site / ".complete").exists():
            return site
        shutil.rmtree(site, ignore_errors=True)
        with zipfile.ZipFile(wheel) as archive:
            for name in archive.namelist():
                if _wanted(name):
                    archive.extract(name, site)
        (site / ".complete").write_text("ok\n")
        return site
