"""write_atomic: all or nothing, with the right permissions."""

from __future__ import annotations

import os
import stat

import pytest

from glm5svc import atomic_file
from glm5svc.atomic_file import write_atomic


def mode_of(path):
    return stat.S_IMODE(path.stat().st_mode)


def test_new_file_keeps_default_or_given_mode(tmp_path):
    write_atomic(tmp_path / "a" / "plain.json", "{}")
    write_atomic(tmp_path / "secret.yaml", "api-key: k\n", mode=0o600)
    assert mode_of(tmp_path / "a" / "plain.json") == 0o644
    assert mode_of(tmp_path / "secret.yaml") == 0o600


def test_replacing_keeps_the_old_files_mode(tmp_path):
    path = tmp_path / "f.py"
    path.write_text("old")
    os.chmod(path, 0o755)
    write_atomic(path, b"new")
    assert path.read_text() == "new" and mode_of(path) == 0o755


def test_failed_rename_leaves_the_old_file_and_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "f.txt"
    path.write_text("old")

    def failing_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic_file.os, "replace", failing_replace)
    with pytest.raises(OSError):
        write_atomic(path, "new")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]
