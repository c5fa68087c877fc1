"""Real sglang wheels from PyPI, unpacked into fake site-packages directories.

Wheels are cached in .cache/wheels (pip download --no-deps), the unpacked pristine trees
in .cache/sglang-sites/<version>; each test gets its own copy under tmp_path.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from glm5svc.patches.spec import load_patches

REPO = Path(__file__).resolve().parents[2]
WHEELS = REPO / ".cache" / "wheels"
SITES = REPO / ".cache" / "sglang-sites"

# 0.5.6: before the autotune list; 0.5.7: first with it; 0.5.9-0.5.12.post1: nsa names
# (0.5.11: the cu130 stack, a platform wheel); 0.5.13: dsa names, autotune fixed upstream;
# 0.5.23: newest checked (runner/ module, get_exec).
VERSIONS = [
    "0.5.6", "0.5.7", "0.5.9", "0.5.10.post1", "0.5.11", "0.5.12.post1", "0.5.13", "0.5.23"
]  # fmt: skip


def sglang_wheel(version: str) -> Path:
    found = sorted(WHEELS.glob(f"sglang-{version}-*.whl"))
    if found:
        return found[0]
    WHEELS.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "-q",
        "-d",
        str(WHEELS),
        f"sglang=={version}",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    found = sorted(WHEELS.glob(f"sglang-{version}-*.whl"))
    if proc.returncode != 0 or not found:
        pytest.fail(f"could not download sglang {version}: {proc.stderr[-2000:]}")
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
    if (site / ".complete").exists():
        return site
    shutil.rmtree(site, ignore_errors=True)
    with zipfile.ZipFile(sglang_wheel(version)) as wheel:
        for name in wheel.namelist():
            if _wanted(name):
                wheel.extract(name, site)
    (site / ".complete").write_text("ok\n")
    return site


def site_copy(version: str, tmp_path: Path) -> Path:
    target = tmp_path / f"site-{version}"
    shutil.copytree(pristine_site(version), target, ignore=shutil.ignore_patterns(".complete"))
    return target


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


@pytest.fixture
def make_site(tmp_path):
    return lambda version: site_copy(version, tmp_path)
