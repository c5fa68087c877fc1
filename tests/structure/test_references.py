"""Project files point only inside the repository and carry no tracker labels."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Built from parts so that this file does not match itself.
OUTSIDE_NOTES = re.compile("shared" + "/reference")
TRACKER_LABEL = re.compile(r"\bissue" + r"\s+#?\d+", re.IGNORECASE)


def tracked_text_files() -> dict[str, str]:
    names = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split("\0")
    texts = {}
    for name in filter(None, names):
        path = REPO / name
        if not path.is_file():  # deleted in the working tree
            continue
        data = path.read_bytes()
        if b"\0" not in data[:8192]:
            texts[name] = data.decode("utf-8", "replace")
    return texts


def hits(pattern: re.Pattern) -> list[str]:
    return [
        f"{name}:{number}: {line.strip()}"
        for name, text in tracked_text_files().items()
        for number, line in enumerate(text.splitlines(), 1)
        if pattern.search(line)
    ]


def test_no_file_points_to_notes_outside_the_repository():
    assert hits(OUTSIDE_NOTES) == [], "carry the fact into docs/ with its real source"


def test_no_file_carries_a_tracker_label():
    assert hits(TRACKER_LABEL) == [], "say what the thing is, not which ticket it came from"


def test_the_patterns_find_what_they_are_for():
    assert OUTSIDE_NOTES.search("see " + "shared" + "/reference/x.md")
    assert TRACKER_LABEL.search("the container play (Issue" + " 8)")
    assert not TRACKER_LABEL.search("an issue with 8 GPUs")
