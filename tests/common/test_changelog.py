"""One version: pyproject's, glm5svc.__version__ and the newest entry of CHANGELOG.md."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import glm5svc

REPO = Path(__file__).resolve().parents[2]
SEMVER = r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
HEADING = re.compile(rf"^## (Unreleased|({SEMVER}) - (\d{{4}}-\d{{2}}-\d{{2}}))$", re.MULTILINE)
SECTIONS = ("Added", "Changed", "Deprecated", "Removed", "Fixed", "Security")


def versions() -> list[tuple[str, str | None]]:
    """(name, date) of each `## ` entry, newest first: ("Unreleased", None), ("0.1.0", ...)."""
    text = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## .*$", text, re.MULTILINE)
    found = [HEADING.match(line) for line in headings]
    assert all(found), [line for line, m in zip(headings, found, strict=True) if not m]
    return [(m.group(1), None) if m.group(1) == "Unreleased" else (m.group(2), m.group(6))
            for m in found]  # fmt: skip


def test_the_package_and_pyproject_have_one_version():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert re.fullmatch(SEMVER, project["version"])
    assert glm5svc.__version__ == project["version"]


def test_the_newest_released_entry_is_the_packages_version():
    entries = versions()
    assert entries[0] == ("Unreleased", None), "changes go under '## Unreleased' first"
    released = entries[1:]
    assert released and released[0][0] == glm5svc.__version__


def test_released_versions_go_down_and_their_dates_do_not_go_up():
    released = versions()[1:]
    numbers = [tuple(map(int, name.split("."))) for name, _ in released]
    dates = [date for _, date in released]
    assert numbers == sorted(numbers, reverse=True) and len(set(numbers)) == len(numbers)
    assert dates == sorted(dates, reverse=True)


def test_each_entry_uses_keep_a_changelogs_sections():
    text = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    used = set(re.findall(r"^### (.+)$", text, re.MULTILINE))
    assert used and used <= set(SECTIONS), used - set(SECTIONS)
