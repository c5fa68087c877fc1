from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from glm5svc.profiles import known_profiles, load_profile

REPO = Path(__file__).resolve().parents[2]


def parser_python(version: str) -> Path:
    """Interpreter of a CPU-only venv where sglang `version`'s real parser imports.

    Built once per machine under .cache/venvs (scripts/sglang-parser-venv.sh): the shared
    base (CPU torch and the parser's imports) about 2 minutes, each version on top of it
    well under one."""
    dest = REPO / ".cache" / "venvs" / f"sglang-parser-{version}"
    subprocess.run(
        [str(REPO / "scripts" / "sglang-parser-venv.sh"), str(dest), version],
        check=True,
    )
    return dest / "bin" / "python"


@pytest.fixture(scope="session")
def sglang_parser_pythons() -> dict[str, Path]:
    """{profile name: parser interpreter} for every stack profile."""
    return {name: parser_python(load_profile(name).sglang_version) for name in known_profiles()}
