from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PINNED_SGLANG = "0.5.10.post1"


@pytest.fixture(scope="session")
def sglang_parser_python() -> Path:
    """Interpreter of a CPU-only venv where the pinned sglang's real parser imports.

    Built once per machine under .cache/ (about 2 minutes on a fresh machine)."""
    dest = REPO / ".cache" / "venvs" / f"sglang-parser-{PINNED_SGLANG}"
    subprocess.run(
        [str(REPO / "scripts" / "sglang-parser-venv.sh"), str(dest), PINNED_SGLANG],
        check=True,
    )
    return dest / "bin" / "python"
