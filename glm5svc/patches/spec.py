"""The patch set as data: glm5svc/data/patches/<id>.yaml, loaded and checked here.

A patch has variants, each for a range of sglang versions and one file, made of edits:
exact anchor text (the unpatched code, found exactly once) and the replacement. Several
variants may cover one version; the one whose text is in the file is used. A patch may
name the version from which upstream has the fix, and a regex that proves it is there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml
from packaging.version import InvalidVersion, Version

from glm5svc.errors import Glm5Error

PATCHES_DIR = Path(__file__).resolve().parent.parent / "data" / "patches"


class PatchDataError(Glm5Error):
    """A patch file in glm5svc/data/patches is malformed (a bug in this package)."""


@dataclass(frozen=True)
class Edit:
    anchor: str
    replacement: str


@dataclass(frozen=True)
class Variant:
    id: str
    file: str  # relative to site-packages
    min_version: Version
    max_version: Version | None
    edits: tuple[Edit, ...]

    def covers(self, version: Version) -> bool:
        return self.min_version <= version and (
            self.max_version is None or version <= self.max_version
        )

    def describe_range(self) -> str:
        upper = str(self.max_version) if self.max_version else "newer"
        return f"{self.min_version} .. {upper}"


@dataclass(frozen=True)
class UpstreamFix:
    since: Version
    files: tuple[str, ...]
    pattern: re.Pattern[str]


@dataclass(frozen=True)
class Patch:
    id: str
    title: str
    required: bool
    description: str
    why: str
    facts: str
    variants: tuple[Variant, ...]
    fixed_upstream: UpstreamFix | None

    @property
    def min_version(self) -> Version:
        return min(variant.min_version for variant in self.variants)


@cache
def load_patches(directory: Path = PATCHES_DIR) -> tuple[Patch, ...]:
    """Every patch, in file-name order."""
    patches = tuple(_load_patch(path) for path in sorted(directory.glob("*.yaml")))
    ids = [patch.id for patch in patches]
    if len(set(ids)) != len(ids):
        raise PatchDataError(f"{directory}: duplicate patch ids in {ids}")
    return patches


def patch_ids() -> list[str]:
    return [patch.id for patch in load_patches()]


def select_patches(ids: list[str] | None = None) -> list[Patch]:
    """The named patches (all when none named); an unknown id is an error naming the known."""
    patches = load_patches()
    if not ids:
        return list(patches)
    by_id = {patch.id: patch for patch in patches}
    unknown = [name for name in ids if name not in by_id]
    if unknown:
        raise UnknownPatchError(
            f"unknown patch {', '.join(unknown)}; known patches: {', '.join(by_id)}"
        )
    return [by_id[name] for name in dict.fromkeys(ids)]


class UnknownPatchError(Glm5Error):
    exit_status = 2


def _load_patch(path: Path) -> Patch:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        patch = _build_patch(data)
    except (yaml.YAMLError, KeyError, TypeError, ValueError, InvalidVersion, re.error) as exc:
        raise PatchDataError(f"{path}: {type(exc).__name__}: {exc}") from None
    if patch.id != path.stem:
        raise PatchDataError(f"{path}: id '{patch.id}' must match the file name")
    return patch


def _build_patch(data: dict) -> Patch:
    upstream = data.get("fixed_upstream")
    patch = Patch(
        id=data["id"],
        title=data["title"],
        required=bool(data["required"]),
        description=data["description"].strip(),
        why=data["why"].strip(),
        facts=data["facts"].strip(),
        variants=tuple(_build_variant(item) for item in data["variants"]),
        fixed_upstream=(
            UpstreamFix(
                since=Version(str(upstream["since"])),
                files=tuple(upstream["files"]),
                pattern=re.compile(upstream["pattern"]),
            )
            if upstream
            else None
        ),
    )
    _check_patch(patch)
    return patch


def _build_variant(data: dict) -> Variant:
    maximum = data.get("max_version")
    return Variant(
        id=data["id"],
        file=data["file"],
        min_version=Version(str(data["min_version"])),
        max_version=Version(str(maximum)) if maximum is not None else None,
        edits=tuple(
            Edit(
                _indent(item["anchor"], item["indent"]),
                _indent(item["replacement"], item["indent"]),
            )
            for item in data["edits"]
        ),
    )


def _indent(text: str, spaces: int) -> str:
    pad = " " * int(spaces)
    return "".join(pad + line if line.strip() else line for line in text.splitlines(True))


def _check_patch(patch: Patch) -> None:
    if not patch.variants:
        raise ValueError("a patch needs at least one variant")
    ids = [variant.id for variant in patch.variants]
    if len(set(ids)) != len(ids):
        raise ValueError(f"duplicate variant ids {ids}")
    for variant in patch.variants:
        if not variant.edits:
            raise ValueError(f"variant {variant.id} has no edits")
        if Path(variant.file).is_absolute() or ".." in Path(variant.file).parts:
            raise ValueError(f"variant {variant.id}: file must be relative to site-packages")
        fixed = patch.fixed_upstream
        if fixed and (variant.max_version is None or variant.max_version >= fixed.since):
            raise ValueError(f"variant {variant.id} overlaps fixed_upstream.since {fixed.since}")
        texts = [text for edit in variant.edits for text in (edit.anchor, edit.replacement)]
        for i, text in enumerate(texts):
            if not text.strip():
                raise ValueError(f"variant {variant.id}: empty anchor or replacement")
            # Status counts each text in the file: none may contain another.
            for other in texts[i + 1 :]:
                if text in other or other in text:
                    raise ValueError(f"variant {variant.id}: one edit text contains another")
