"""File handling for patches: atomic replace, backups with hashes, stale .pyc, compile check."""

from __future__ import annotations

import hashlib
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from glm5svc.atomic_file import write_atomic
from glm5svc.errors import Glm5Error

BACKUP_SUFFIX = ".orig"
MANIFEST_SUFFIX = ".json"


class PatchWriteError(Glm5Error):
    """A patched file could not be checked or written; the original is untouched (exit 4)."""

    exit_status = 4


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def invalidate_pyc(source: Path) -> list[Path]:
    """Remove cached bytecode of `source` for every interpreter tag (the venv's Python may
    differ from ours, and hash-based .pyc files are not rechecked against the source)."""
    removed = []
    for pyc in (source.parent / "__pycache__").glob(f"{source.stem}.*.pyc"):
        pyc.unlink(missing_ok=True)
        removed.append(pyc)
    return removed


def check_compiles(text: str, filename: Path, python: Path | None = None) -> None:
    """Raise PatchWriteError unless `text` compiles; with the venv's interpreter if known."""
    if python is not None and python.exists():
        code = (
            "import sys; compile(sys.stdin.buffer.read(), sys.argv[1], 'exec', dont_inherit=True)"
        )
        proc = subprocess.run(
            [str(python), "-I", "-c", code, str(filename)],
            input=text.encode("utf-8"),
            capture_output=True,
            timeout=120,
        )
        if proc.returncode != 0:
            detail = proc.stderr.decode("utf-8", "replace").strip().splitlines()[-1:]
            raise PatchWriteError(f"{filename}: patched code does not compile: {detail}")
        return
    try:
        compile(text, str(filename), "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise PatchWriteError(f"{filename}: patched code does not compile: {exc}") from None


@dataclass(frozen=True)
class Backup:
    """`<file>.glm5svc-<patch>.orig` (the bytes before the patch) and `.json` beside it."""

    source: Path
    patch_id: str

    @property
    def data_path(self) -> Path:
        return self.source.with_name(f"{self.source.name}.glm5svc-{self.patch_id}{BACKUP_SUFFIX}")

    @property
    def manifest_path(self) -> Path:
        return self.source.with_name(f"{self.source.name}.glm5svc-{self.patch_id}{MANIFEST_SUFFIX}")

    def save(self, original: bytes, patched: bytes, **facts) -> None:
        manifest = {
            "patch": self.patch_id,
            "file": self.source.name,
            "original_sha256": sha256(original),
            "patched_sha256": sha256(patched),
            **facts,
        }
        write_atomic(self.data_path, original)
        write_atomic(self.manifest_path, (json.dumps(manifest, indent=2) + "\n").encode())

    def original_for(self, current: bytes) -> bytes | None:
        """The saved original, if this backup belongs to `current` (the file as we patched
        it) and is intact; None when missing or stale (e.g. sglang was reinstalled)."""
        try:
            manifest = json.loads(self.manifest_path.read_text(encoding="utf-8"))
            original = self.data_path.read_bytes()
        except (OSError, ValueError):
            return None
        if manifest.get("patched_sha256") != sha256(current):
            return None
        if manifest.get("original_sha256") != sha256(original):
            return None
        return original

    def remove(self) -> None:
        self.data_path.unlink(missing_ok=True)
        self.manifest_path.unlink(missing_ok=True)
