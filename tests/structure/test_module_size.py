"""No module over 400 lines without the reason written at its top."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LIMIT = 400
REASON = "Longer than 400 lines:"  # in the module's first 40 lines, followed by the why


def long_modules_without_a_reason() -> list[str]:
    names = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    found = []
    for name in names:
        path = REPO / name
        if name.startswith("tests/") or not path.is_file():
            continue
        lines = path.read_text(encoding="utf-8").splitlines()
        if len(lines) > LIMIT and not any(REASON in line for line in lines[:40]):
            found.append(f"{name}: {len(lines)} lines")
    return found


def test_long_modules_say_why():
    assert long_modules_without_a_reason() == [], f"split them, or write '{REASON} ...'"
