"""One concurrency level's figures, read from a bench_serving JSON line of any sglang version.

Keys differ by version: 0.4.x has no `total_throughput`, `max_output_tokens_per_s` or
`p90_e2e_latency_ms`; 0.5.x adds them. Missing figures are None, never zero, except the
total throughput, which is input + output throughput where the line lacks it (that is how
later versions compute it).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

LATENCIES = ("ttft", "itl", "tpot", "e2e_latency")
STATS = ("mean", "median", "std", "p90", "p95", "p99")


class BenchLineError(ValueError):
    """A bench_serving output line that is not a result this parser understands."""


@dataclass(frozen=True)
class LevelMetrics:
    max_concurrency: int | None
    completed: int
    duration_s: float | None
    total_input_tokens: int | None
    total_output_tokens: int | None
    request_throughput: float | None
    input_throughput: float | None
    output_throughput: float | None
    total_throughput: float | None
    total_throughput_derived: bool
    peak_output_throughput: float | None  # 1-second buckets: overcounts (sglang's own caveat)
    concurrency: float | None  # bench_serving's reliable average concurrency
    # latency name -> stat -> milliseconds, only the stats the line has
    latency_ms: dict[str, dict[str, float]] = field(default_factory=dict)

    def latency(self, name: str, stat: str = "median") -> float | None:
        return self.latency_ms.get(name, {}).get(stat)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LevelMetrics:
        return cls(**data)


def parse_bench_line(line: str | dict[str, Any]) -> LevelMetrics:
    """Parse one line that `bench_serving --output-file` appended (a str or its decoded dict)."""
    data = _decode(line) if isinstance(line, str) else line
    if not isinstance(data, dict) or "completed" not in data:
        raise BenchLineError("not a bench_serving result: no 'completed' key")
    input_tp = _number(data.get("input_throughput"))
    output_tp = _number(data.get("output_throughput"))
    total_tp = _number(data.get("total_throughput"))
    derived = total_tp is None and input_tp is not None and output_tp is not None
    if derived:
        total_tp = input_tp + output_tp
    latency: dict[str, dict[str, float]] = {}
    for name in LATENCIES:
        stats = {s: v for s in STATS if (v := _number(data.get(f"{s}_{name}_ms"))) is not None}
        if stats:
            latency[name] = stats
    return LevelMetrics(
        max_concurrency=_int(data.get("max_concurrency")),
        completed=_int(data.get("completed")) or 0,
        duration_s=_number(data.get("duration")),
        total_input_tokens=_int(data.get("total_input_tokens")),
        total_output_tokens=_int(data.get("total_output_tokens")),
        request_throughput=_number(data.get("request_throughput")),
        input_throughput=input_tp,
        output_throughput=output_tp,
        total_throughput=total_tp,
        total_throughput_derived=derived,
        peak_output_throughput=_number(data.get("max_output_tokens_per_s")),
        concurrency=_number(data.get("concurrency")),
        latency_ms=latency,
    )


def last_result_line(text: str) -> str | None:
    """The last non-empty line of a bench_serving output file (it appends one per run)."""
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else None


def _decode(line: str) -> Any:
    try:
        # bench_serving writes `Infinity` for an unlimited request rate; Python reads it.
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise BenchLineError(f"not JSON: {exc.msg} at character {exc.pos}") from None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _int(value: Any) -> int | None:
    number = _number(value)
    return int(number) if number is not None else None
