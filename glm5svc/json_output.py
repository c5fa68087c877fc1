"""What every `--json` prints: one JSON object on stdout, on every exit path.

The envelope, the same for every command (`emit` and `emit_error` are the only writers):

- `schema`: the document's kind and version, `glm5svc.<command>[.<action>]/<version>`
  (`glm5svc.status/1`, `glm5svc.bench.compare/1`, `glm5svc.usage/1` for a command line
  argparse refused); where the command prints a file's document, that file's own schema
  (`bench --json`: `glm5svc.bench.summary/1`, as in summary.json); a reader checks it
  before it reads anything else;
- `ok`: true exactly when the command exits 0;
- on failure also `error` (the whole message with its problems, as stderr has it too),
  `exit_status` and `problems` (the problems alone, a list, possibly empty); the command's
  own fields stay beside them where it has any (patch's `changed`, bench's
  `stopped_reason`).

Times: a point in time is ISO 8601 in UTC with its offset, `2026-12-01T17:45:30.123+00:00`
(`iso_utc`, read back by `datetime.fromisoformat`); a duration is a number of seconds in a
key ending in `_s`. Nothing prints epoch seconds.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

SCHEMA_VERSION = 1


def schema_name(command_path: Iterable[str]) -> str:
    """`("bench", "compare")` -> `glm5svc.bench.compare/1`."""
    return ".".join(["glm5svc", *command_path]) + f"/{SCHEMA_VERSION}"


def document(schema: str, data: Mapping[str, Any], ok: bool = True) -> dict[str, Any]:
    """`data` in the envelope: `schema` first (data's own where it is a file that names its
    schema, as bench's summary.json does), then `ok` (the exit status's, not data's)."""
    rest = {k: v for k, v in data.items() if k not in ("schema", "ok")}
    return {"schema": data.get("schema", schema), "ok": ok, **rest}


def error_document(
    schema: str,
    message: str,
    exit_status: int,
    problems: Iterable[str] = (),
    **fields: Any,
) -> dict[str, Any]:
    data = {**fields, "error": message, "exit_status": exit_status, "problems": list(problems)}
    return document(schema, data, ok=False)


def emit(schema: str, data: Mapping[str, Any], ok: bool = True) -> None:
    print(json.dumps(document(schema, data, ok), indent=2, default=str), flush=True)


def emit_error(
    schema: str, message: str, exit_status: int, problems: Iterable[str] = (), **fields: Any
) -> None:
    """The failure document on stdout; the message for a person on stderr."""
    problems = list(problems)
    text = "\n".join([message, *(f"  - {problem}" for problem in problems)])
    print(f"glm5svc: {text}", file=sys.stderr, flush=True)
    doc = error_document(schema, text, exit_status, problems, **fields)
    print(json.dumps(doc, indent=2, default=str), flush=True)


def iso_utc(epoch: float | None) -> str | None:
    """A unix time as ISO 8601 in UTC to the millisecond; None stays None."""
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds")


def now_utc() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")
