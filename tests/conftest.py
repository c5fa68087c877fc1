"""Fixtures every test folder may use: the test engine (testkit) on a free port, and the
real argument parser of every stack profile's sglang version."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from glm5svc.profiles import known_profiles, load_profile
from testkit.engine import start_engine

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def engine(tmp_path):
    """A fresh test engine for one test (its throughput saturates: the ladder has a knee)."""
    handle = start_engine(tmp_path / "engine.log")
    yield handle
    handle.stop()


def parser_python(version: str) -> Path:
    """Interpreter of a CPU-only venv where sglang `version`'s real parser imports.

    Built once per machine under .cache/venvs (scripts/sglang-parser-venv.sh): the shared
    base (CPU torch and the parser's imports) about 2 minutes, each version on top of it
    well under one."""
    dest = REPO / ".cache" / "venvs" / f"sglang-parser-{version}"
    subprocess.run(
        [str(REPO / "scripts" / "sglang-parser-venv.sh"), str(dest), version],
        check=True,
        timeout=1800,
    )
    return dest / "bin" / "python"


@pytest.fixture(scope="session")
def sglang_parser_pythons() -> dict[str, Path]:
    """{profile name: parser interpreter} for every stack profile."""
    return {name: parser_python(load_profile(name).sglang_version) for name in known_profiles()}
