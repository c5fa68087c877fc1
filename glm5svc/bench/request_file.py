"""A recorded workload: one request per line, its input and output length (benchmark.request_file,
`glm5svc bench --request-file`, `glm5svc tune run --request-file`).

The format is JSON Lines, one object per request, blank lines skipped:

    {"input_len": 812, "output_len": 230}
    {"input_len": 3071, "output_len": 64}

Both lengths are whole tokens, at least MIN_TOKENS (bench_serving's custom dataset drops
shorter requests), and a request's input plus output must fit the model's context. A run of
P prompts takes the file's requests in order from the first, and from the top again when P
exceeds them, so the i-th run of every level, trial and side sends the same lengths; the
prompts themselves are new in every run (glm5svc/bench/request_prompts.py).

The file's identity (its SHA-256, request count and mean lengths) is recorded in the plan of
every result, and `bench compare` gives no verdict across two different workloads.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from glm5svc.errors import ConfigError

MIN_TOKENS = 2
MAX_REQUESTS = 1_000_000
MAX_BYTES = 256 * 1024 * 1024
SHOWN_PROBLEMS = 10
KEYS = ("input_len", "output_len")
EXAMPLE = '{"input_len": 812, "output_len": 230}'
FIX = (
    f"one JSON object per line, e.g. {EXAMPLE}, both whole numbers of tokens of at least "
    f'{MIN_TOKENS} (docs/performance-bench.md, "A recorded workload")'
)


@dataclass(frozen=True)
class RequestFile:
    """The requests of a recorded workload, read and checked."""

    path: str
    sha256: str
    requests: tuple[tuple[int, int], ...]  # (input_len, output_len) in file order
    context_length: int | None = None  # what the lengths were checked against
    context_source: str = ""

    @property
    def count(self) -> int:
        return len(self.requests)

    @property
    def mean_input_len(self) -> float:
        return math.fsum(r[0] for r in self.requests) / self.count

    @property
    def mean_output_len(self) -> float:
        return math.fsum(r[1] for r in self.requests) / self.count

    @property
    def max_input_len(self) -> int:
        return max(r[0] for r in self.requests)

    @property
    def max_output_len(self) -> int:
        return max(r[1] for r in self.requests)

    def for_run(self, prompts: int) -> list[tuple[int, int]]:
        """The lengths of a run of `prompts` requests: the file in order, cycled."""
        return [self.requests[i % self.count] for i in range(prompts)]

    def identity(self) -> dict[str, Any]:
        """What results record: enough to tell two workloads apart, not the requests."""
        return {
            "path": self.path,
            "sha256": self.sha256,
            "requests": self.count,
            "mean_input_len": round(self.mean_input_len, 2),
            "mean_output_len": round(self.mean_output_len, 2),
            "max_input_len": self.max_input_len,
            "max_output_len": self.max_output_len,
            "context_length": self.context_length,
            "context_source": self.context_source,
        }


def load_request_file(
    path: str | Path,
    context_length: int | None = None,
    context_source: str = "",
    key: str = "benchmark.request_file",
) -> RequestFile:
    """Read and check the file; ConfigError naming the file, the line and the fix (every bad
    line counted, the first SHOWN_PROBLEMS listed)."""
    where = Path(path)
    raw = _read(where, key)
    if not raw.strip():
        raise ConfigError(f"{key}: {where} holds no request: write {FIX}")
    requests: list[tuple[int, int]] = []
    problems: list[str] = []
    first = ""
    bad = 0
    for number, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        request, problem = _parse_line(line, context_length, context_source)
        if problem is not None:
            bad += 1
            first = first or f"line {number}: {problem}"
            if len(problems) < SHOWN_PROBLEMS:
                problems.append(f"{where}: line {number}: {problem}")
            continue
        requests.append(request)  # type: ignore[arg-type]
        if len(requests) > MAX_REQUESTS:
            raise ConfigError(
                f"{key}: {where} has more than {MAX_REQUESTS:,} requests: keep a sample of "
                "them (a run cycles through the file)"
            )
    if bad:
        more = f" ({bad - len(problems)} more not shown)" if bad > len(problems) else ""
        raise ConfigError(
            f"{key}: {where}: {bad} bad line(s){more}, the first at {first}",
            problems=problems + [f"the fix: {FIX}"],
        )
    return RequestFile(
        path=str(where),
        sha256=hashlib.sha256(raw.encode("utf-8")).hexdigest(),
        requests=tuple(requests),
        context_length=context_length,
        context_source=context_source,
    )


def _read(where: Path, key: str) -> str:
    try:
        size = where.stat().st_size
        if where.is_dir():
            raise ConfigError(f"{key}: {where} is a folder: give the request file itself ({FIX})")
        if size > MAX_BYTES:
            raise ConfigError(
                f"{key}: {where} is {size:,} bytes, over {MAX_BYTES:,}: keep a sample of its "
                "requests (a run cycles through the file)"
            )
        return where.read_bytes().decode("utf-8")
    except FileNotFoundError:
        instead = f"leave out {key}" if key.startswith("--") else f"set {key}: null"
        raise ConfigError(
            f"{key}: {where} does not exist: write the recorded requests there ({FIX}), or "
            f"{instead} for the fixed input_len and output_len"
        ) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{key}: {where} is not UTF-8 text (byte {exc.start}): write {FIX}"
        ) from None
    except OSError as exc:
        raise ConfigError(
            f"{key}: cannot read {where}: {exc.strerror or exc}; make it readable by the user "
            "that runs glm5svc"
        ) from None


def _parse_line(
    line: str, context_length: int | None, context_source: str
) -> tuple[tuple[int, int] | None, str | None]:
    try:
        data = json.loads(line)
    except ValueError as exc:
        return None, f"not JSON ({exc.msg} at column {exc.colno}): {_shown(line)}"
    if not isinstance(data, dict):
        return None, f"not a JSON object: {_shown(line)}"
    unknown = sorted(set(data) - set(KEYS))
    if unknown:
        close = difflib.get_close_matches(unknown[0], KEYS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return None, (
            f"unknown key(s) {', '.join(map(repr, unknown))}: a request holds only "
            f"{' and '.join(KEYS)}{hint}"
        )
    values = []
    for name in KEYS:
        value = data.get(name)
        if value is None:
            return None, f"no {name}"
        if isinstance(value, bool) or not isinstance(value, int):
            return None, f"{name} {json.dumps(value)} is not a whole number of tokens"
        if value < MIN_TOKENS:
            return None, (
                f"{name} {value} is under {MIN_TOKENS} (bench_serving drops such requests)"
            )
        values.append(value)
    total = values[0] + values[1]
    if context_length is not None and total > context_length:
        return None, (
            f"input_len {values[0]} + output_len {values[1]} = {total} tokens, over the "
            f"model's context of {context_length} ({context_source}): shorten the request or "
            "drop it"
        )
    return (values[0], values[1]), None


def _shown(line: str) -> str:
    text = line.strip()
    return text if len(text) <= 60 else text[:57] + "..."
