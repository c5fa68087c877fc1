"""CPU-only venvs in which each stack profile's real sglang argument parser imports.

Built once per machine under .cache/venvs by scripts/sglang-parser-venv.sh: the shared base
(CPU torch and the parser's imports) about 2 minutes, each version on top of it well under
one. Every version's build shares the base, so one lock covers them all.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from glm5svc.profiles import known_profiles, load_profile
from testkit.build_lock import build_lock

REPO = Path(__file__).resolve().parents[1]
VENVS = REPO / ".cache" / "venvs"


def parser_python(version: str) -> Path:
    """Interpreter of the parser venv of sglang `version` (built on first use)."""
    dest = VENVS / f"sglang-parser-{version}"
    with build_lock(VENVS / "sglang-parser"):
        subprocess.run(
            [str(REPO / "scripts" / "sglang-parser-venv.sh"), str(dest), version],
            check=True,
            timeout=1800,
        )
    return dest / "bin" / "python"


def profile_parser_pythons() -> dict[str, Path]:
    """{profile name: parser interpreter} for every stack profile."""
    return {name: parser_python(load_profile(name).sglang_version) for name in known_profiles()}
