"""Read, apply and revert the patches against one installed sglang, matching code by content.

Each patch gets one verdict. A file whose anchors are not found exactly once (nor the
patched text exactly once) is "unknown source": it is never touched, so a changed sglang
is never half-patched. Apply and revert are idempotent; every write is atomic.
"""

from __future__ import annotations

import contextlib
import difflib
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from packaging.version import InvalidVersion, Version

from glm5svc.atomic_file import write_atomic
from glm5svc.errors import Glm5Error
from glm5svc.patches.files import (
    Backup,
    PatchWriteError,
    check_compiles,
    invalidate_pyc,
    sha256,
)
from glm5svc.patches.install import SglangInstall
from glm5svc.patches.spec import Patch, Variant


class Verdict(StrEnum):
    APPLIED = "applied"
    NOT_APPLIED = "not_applied"
    FIXED_UPSTREAM = "fixed_upstream"
    NOT_APPLICABLE = "not_applicable"
    UNKNOWN_SOURCE = "unknown_source"


class UnknownSourceError(Glm5Error):
    """A file to patch is not the code the patch was written for (exit 3)."""

    exit_status = 3


@dataclass(frozen=True)
class PatchResult:
    patch: Patch
    verdict: Verdict
    detail: str
    variant: Variant | None = None
    path: Path | None = None
    action: str = "none"  # what this run did: none, applied, reverted

    def to_dict(self) -> dict:
        return {
            "id": self.patch.id,
            "title": self.patch.title,
            "required": self.patch.required,
            "verdict": self.verdict.value,
            "variant": self.variant.id if self.variant else None,
            "file": str(self.path) if self.path else None,
            "detail": self.detail,
            "action": self.action,
        }


def evaluate(patch: Patch, install: SglangInstall) -> PatchResult:
    """The verdict for `patch` on `install`, from the version and the files' text."""
    try:
        version = Version(install.version)
    except InvalidVersion:
        return PatchResult(
            patch,
            Verdict.UNKNOWN_SOURCE,
            f"sglang version '{install.version}' is not a version number",
        )
    fixed = patch.fixed_upstream
    if fixed and version >= fixed.since:
        return _check_upstream(patch, install, version)
    candidates = [variant for variant in patch.variants if variant.covers(version)]
    if not candidates:
        if version < patch.min_version:
            return PatchResult(
                patch,
                Verdict.NOT_APPLICABLE,
                f"sglang {version} predates the code this patch changes (from {patch.min_version})",
            )
        ranges = "; ".join(f"{v.id}: {v.describe_range()}" for v in patch.variants)
        return PatchResult(
            patch, Verdict.UNKNOWN_SOURCE, f"no variant for sglang {version} (known: {ranges})"
        )
    readings = [_read_variant(patch, variant, install) for variant in candidates]
    known = [r for r in readings if r.verdict in (Verdict.APPLIED, Verdict.NOT_APPLIED)]
    if len(known) == 1:
        return known[0]
    if len(known) > 1:
        names = ", ".join(r.variant.id for r in known)
        return PatchResult(patch, Verdict.UNKNOWN_SOURCE, f"ambiguous: variants {names} all match")
    if len(readings) == 1:
        return readings[0]
    details = "; ".join(f"variant {r.variant.id}: {r.detail}" for r in readings)
    return PatchResult(patch, Verdict.UNKNOWN_SOURCE, details, path=readings[0].path)


def _check_upstream(patch: Patch, install: SglangInstall, version: Version) -> PatchResult:
    fixed = patch.fixed_upstream
    for name in fixed.files:
        path = install.site_packages / name
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if fixed.pattern.search(text):
            return PatchResult(
                patch, Verdict.FIXED_UPSTREAM, f"sglang {version} has the fix ({name})", path=path
            )
    return PatchResult(
        patch,
        Verdict.UNKNOWN_SOURCE,
        f"sglang {version} should have the upstream fix (since {fixed.since}) but "
        f"/{fixed.pattern.pattern}/ is in none of {', '.join(fixed.files)}",
    )


def _read_variant(patch: Patch, variant: Variant, install: SglangInstall) -> PatchResult:
    path = install.site_packages / variant.file
    where = f"sglang {install.version}, {variant.file}"

    def result(verdict: Verdict, detail: str) -> PatchResult:
        return PatchResult(patch, verdict, detail, variant, path)

    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        return result(Verdict.UNKNOWN_SOURCE, f"{where}: file not found")
    except (OSError, UnicodeDecodeError) as exc:
        return result(Verdict.UNKNOWN_SOURCE, f"{where}: cannot read: {exc}")
    counts = [(text.count(e.anchor), text.count(e.replacement)) for e in variant.edits]
    if all(c == (1, 0) for c in counts):
        return result(Verdict.NOT_APPLIED, f"{where}: original code found")
    if all(c == (0, 1) for c in counts):
        return result(Verdict.APPLIED, f"{where}: patched code found")
    found = ", ".join(
        f"edit {i}: anchor x{anchors}, patched x{patched}"
        for i, (anchors, patched) in enumerate(counts, 1)
    )
    return result(
        Verdict.UNKNOWN_SOURCE,
        f"{where}: not the code this patch knows ({found}; each must be exactly 1 and 0 "
        "or 0 and 1); the file was not touched",
    )


def evaluate_all(patches: list[Patch], install: SglangInstall) -> list[PatchResult]:
    return [evaluate(patch, install) for patch in patches]


def refuse_unknown(results: list[PatchResult]) -> None:
    unknown = [r for r in results if r.verdict is Verdict.UNKNOWN_SOURCE]
    if unknown:
        lines = [f"{r.patch.id}: {r.detail}" for r in unknown]
        raise UnknownSourceError(
            "refusing to touch files whose code is not what the patch set knows "
            "(nothing was changed)",
            problems=lines,
        )


def patched_text(result: PatchResult, text: str, reverse: bool = False) -> str:
    for edit in result.variant.edits:
        old, new = (edit.replacement, edit.anchor) if reverse else (edit.anchor, edit.replacement)
        text = text.replace(old, new, 1)
    return text


def apply_patch(result: PatchResult, install: SglangInstall) -> PatchResult:
    """Apply one evaluated patch; a no-op unless its verdict is not_applied."""
    if result.verdict is not Verdict.NOT_APPLIED:
        return result
    path = result.path
    original = path.read_bytes()
    new_text = patched_text(result, original.decode("utf-8"))
    check_compiles(new_text, path, install.python)
    patched = new_text.encode("utf-8")
    backup = Backup(path, result.patch.id)
    try:
        backup.save(original, patched, variant=result.variant.id, sglang_version=install.version)
        write_atomic(path, patched)
    except OSError as exc:  # a read-only site-packages fails here, before anything changed
        with contextlib.suppress(OSError):
            backup.remove()
        raise PatchWriteError(f"{path}: could not write the patched file: {exc}") from None
    except BaseException:
        backup.remove()
        raise
    invalidate_pyc(path)
    return _confirm(result, install, Verdict.APPLIED, "applied")


def revert_patch(result: PatchResult, install: SglangInstall) -> PatchResult:
    """Put back the original bytes; a no-op unless the verdict is applied."""
    if result.verdict is not Verdict.APPLIED:
        return result
    path = result.path
    current = path.read_bytes()
    backup = Backup(path, result.patch.id)
    original = backup.original_for(current)
    if original is None:  # no usable backup: undo the edits, which restores the same bytes
        original = patched_text(result, current.decode("utf-8"), reverse=True).encode("utf-8")
    try:
        write_atomic(path, original)
    except OSError as exc:
        raise PatchWriteError(f"{path}: could not write the original back: {exc}") from None
    backup.remove()
    invalidate_pyc(path)
    return _confirm(result, install, Verdict.NOT_APPLIED, "reverted")


def _confirm(before: PatchResult, install, expected: Verdict, action: str) -> PatchResult:
    after = evaluate(before.patch, install)
    if after.verdict is not expected:
        raise PatchWriteError(
            f"{before.patch.id}: after the write the verdict is {after.verdict}, not {expected}"
        )
    return PatchResult(
        after.patch,
        after.verdict,
        f"{after.detail} ({action} now)",
        after.variant,
        after.path,
        action,
    )


def diff_patch(result: PatchResult) -> str:
    """Unified diff: what apply would change (not applied), or what was changed (applied)."""
    if result.verdict not in (Verdict.APPLIED, Verdict.NOT_APPLIED):
        return ""
    text = result.path.read_bytes().decode("utf-8")
    if result.verdict is Verdict.NOT_APPLIED:
        before, after = text, patched_text(result, text)
    else:
        before, after = patched_text(result, text, reverse=True), text
    name = result.variant.file
    return "".join(
        difflib.unified_diff(
            before.splitlines(True), after.splitlines(True), f"a/{name}", f"b/{name}", n=3
        )
    )


def file_digest(path: Path) -> str:
    return sha256(path.read_bytes())
