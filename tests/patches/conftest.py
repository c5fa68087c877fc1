"""Real sglang wheels unpacked into fake site-packages directories (testkit/sglang_wheels.py
builds them once per machine); each test gets its own copy under tmp_path.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from testkit.sglang_wheels import WheelUnavailable, pristine_site
from testkit.sglang_wheels import sglang_wheel as _cached_wheel


def sglang_wheel(version: str) -> Path:
    try:
        return _cached_wheel(version)
    except WheelUnavailable as exc:
        pytest.fail(str(exc))


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
