"""Run a benchmark's phases in order; a failed phase keeps the others' figures."""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

from glm5svc.atomic_file import write_atomic

Phase = tuple[str, Callable[[], dict]]


def write_json(path: Path, data: dict) -> None:
    write_atomic(path, json.dumps(data, indent=2, default=str))


def run_phases(
    phases: list[Phase],
    result: dict,
    out: Path,
    after: Callable[[str, dict], None] | None = None,
) -> bool:
    """Each phase's figures go into result[name]; the JSON is rewritten after each one
    (so a crash later keeps them). Returns True when any phase failed."""
    failed = False
    for name, phase in phases:
        print(f"-- {name}", flush=True)
        try:
            result[name] = phase()
        except Exception:
            failed = True
            result[name] = {"error": traceback.format_exc()}
            print(result[name]["error"], file=sys.stderr, flush=True)
        if after is not None:
            after(name, result)
        write_json(out, result)
    return failed
