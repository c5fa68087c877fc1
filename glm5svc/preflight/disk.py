"""Preflight rows about free disk: the JIT caches (FlashInfer, Triton) and the results."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from glm5svc.preflight.rows import OK, WARN, CheckRow, PreflightContext

MIN_FREE_CACHE_BYTES = 20 * 2**30  # FlashInfer/Triton JIT caches and autotune results


def check_disk(ctx: PreflightContext) -> list[CheckRow]:
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    rows = []
    for label, path in (("cache disk", cache), ("results disk", ctx.config.service.results_dir)):
        existing = _nearest_existing(path)
        free = shutil.disk_usage(existing).free
        enough = free >= MIN_FREE_CACHE_BYTES
        rows.append(
            CheckRow(
                label,
                OK if enough else WARN,
                f"{free / 2**30:.1f} GiB free at {existing} (for {path})",
                "" if enough else f"free at least {MIN_FREE_CACHE_BYTES // 2**30} GiB there",
            )
        )
    return rows


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path
