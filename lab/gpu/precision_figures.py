"""The precision scenario's figures, from its recorded reads (lab/gpu/precision_scenario.py).

    .venv/bin/python -m lab.gpu.precision_figures [FIXTURE_DIR] [--plot FILE] [--json]

Per start and phase (the warm-up, phase 0, left out), the engine's counters give a rate per
read interval; a window of W seconds is the counters' advance over W seconds of reads,
windows side by side without overlap. Printed:
- the curve: the spread (coefficient of variation) of windows against their length, for
  output and total tokens/s, at a cap below the concurrency (64, 192) and above it (1024);
- the start spread: each start's mean of the setting every start measured (cap 1024, and
  cap 192), the relative standard deviation across starts;
- latency: what the streaming probes saw (TTFT, inter-token latency) against what sglang's
  histograms recorded for the same phase (non-streamed requests' TTFT is their whole
  latency: sglang sends their output once).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "real_engine" / "sglang-0.5.11-h200-precision"
LENGTHS_S = (5, 10, 20, 40)
CONCURRENCY = 256


@dataclass(frozen=True)
class Segment:
    """One phase of one start: its reads in order."""

    start: int
    phase: int
    cap: int
    reads: list[dict]

    def windows(self, length_s: float, objective: str) -> list[float]:
        """Rates over side-by-side windows of `length_s` (the reads nearest each edge)."""
        reads, rates = self.reads, []
        begin = 0
        for end in range(1, len(reads)):
            if reads[end]["t"] - reads[begin]["t"] >= length_s - 0.25:
                rates.append(rate(reads[begin], reads[end], objective))
                begin = end
        return rates

    def mean(self, objective: str) -> float:
        return rate(self.reads[0], self.reads[-1], objective)

    @property
    def seconds(self) -> float:
        return self.reads[-1]["t"] - self.reads[0]["t"]


def rate(first: dict, last: dict, objective: str) -> float:
    output = last["decode"] - first["decode"]
    tokens = (
        output
        if objective == "output"
        else output + last["prefill_compute"] - first["prefill_compute"]
    )
    return tokens / (last["t"] - first["t"])


def load(folder: Path) -> list[dict]:
    return [
        json.loads(path.read_text()) | {"number": int(path.name[5:].split("-")[0])}
        for path in sorted(folder.glob("start*-reads.json"))
    ]


def segments(starts: list[dict]) -> list[Segment]:
    found = []
    for start in starts:
        by_phase: dict[int, list[dict]] = {}
        for read in start["reads"]:
            by_phase.setdefault(read["phase"], []).append(read)
        for phase, reads in sorted(by_phase.items()):
            if phase > 0 and len(reads) >= 3:
                found.append(Segment(start["number"], phase, reads[0]["cap"], reads))
    return found


def spread(values: list[float]) -> float | None:
    return statistics.stdev(values) / statistics.fmean(values) if len(values) >= 2 else None


def curve(parts: list[Segment], objective: str) -> dict[str, dict[int, dict]]:
    """Per side of the concurrency, per window length: the pooled spread of windows within
    a segment (each segment's windows against its own mean) and how many windows."""
    found: dict[str, dict[int, dict]] = {}
    sides = (("below", lambda c: c < CONCURRENCY), ("above", lambda c: c >= CONCURRENCY))
    for side, wanted in sides:
        for length in LENGTHS_S:
            squares, count, dof = 0.0, 0, 0
            for part in parts:
                if not wanted(part.cap):
                    continue
                values = part.windows(length, objective)
                if len(values) < 2:
                    continue
                mean = statistics.fmean(values)
                squares += sum((v / mean - 1) ** 2 for v in values)
                count += len(values)
                dof += len(values) - 1
            found.setdefault(side, {})[length] = {
                "cv": math.sqrt(squares / dof) if dof else None, "windows": count,
            }  # fmt: skip
    return found


def start_spread(parts: list[Segment], objective: str) -> dict[int, dict]:
    """Per cap: each start's mean over its longest phase at that cap, and their spread."""
    found: dict[int, dict] = {}
    for cap in sorted({p.cap for p in parts}):
        best: dict[int, Segment] = {}
        for part in parts:
            longest = best.get(part.start)
            if part.cap == cap and (longest is None or part.seconds > longest.seconds):
                best[part.start] = part
        means = {start: part.mean(objective) for start, part in sorted(best.items())}
        found[cap] = {
            "means": {str(k): round(v, 1) for k, v in means.items()},
            "seconds": {str(k): round(p.seconds, 1) for k, p in sorted(best.items())},
            "spread": spread(list(means.values())),
        }
    return found


def histogram_quantile(first: list, last: list, q: float) -> float | None:
    before = {bound: count for bound, count in first}
    advance = [(bound, count - before.get(bound, 0.0)) for bound, count in last]
    if not advance or advance[-1][1] <= 0:
        return None
    rank, low_bound, low_count = q * advance[-1][1], 0.0, 0.0
    for bound, count in advance:
        if count >= rank:
            if bound is None or bound == "inf" or math.isinf(float(bound)):
                return low_bound
            share = (rank - low_count) / max(count - low_count, 1e-12)
            return low_bound + (bound - low_bound) * share
        low_bound, low_count = bound, count
    return low_bound


def latency(starts: list[dict]) -> list[dict]:
    rows = []
    for start in starts:
        for phase in start["phases"]:
            if phase["index"] == 0:
                continue
            reads = [r for r in start["reads"] if r["phase"] == phase["index"]]
            streamed = [s for s in start["streamed"]
                        if phase["began"] < s[0] <= phase["began"] + phase["seconds"]]  # fmt: skip
            if len(reads) < 2 or not streamed:
                continue
            ttft = sorted(s[1] for s in streamed)
            itl = sorted(s[2] for s in streamed if s[2])
            rows.append({
                "start": start["number"], "cap": phase["cap"], "probes": len(streamed),
                "streamed_ttft_p50_ms": round(1000 * statistics.median(ttft), 1),
                "streamed_itl_p50_ms": round(1000 * statistics.median(itl), 2) if itl else None,
                "histogram_ttft_p50_ms": _ms(histogram_quantile(reads[0]["ttft"], reads[-1]["ttft"], 0.5)),  # noqa: E501
                "histogram_itl_p50_ms": _ms(histogram_quantile(reads[0]["itl"], reads[-1]["itl"], 0.5)),  # noqa: E501
            })  # fmt: skip
    return rows


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


def figures(folder: Path) -> dict:
    starts = load(folder)
    parts = segments(starts)
    return {
        "starts": len(starts),
        "fired_up_s": [s.get("fired_up_s") for s in starts],
        "curve": {objective: curve(parts, objective) for objective in ("output", "total")},
        "start_spread": {o: start_spread(parts, o) for o in ("output", "total")},
        "latency": latency(starts),
    }


def plot(found: dict, dest: Path) -> None:
    import matplotlib  # noqa: PLC0415 - only for the picture; the figures need none

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, axis = plt.subplots(figsize=(7, 4))
    for objective, style in (("output", "-"), ("total", ":")):
        for side, color in (("below", "tab:blue"), ("above", "tab:red")):
            points = [(length, v["cv"]) for length, v in found["curve"][objective][side].items()
                      if v["cv"] is not None]  # fmt: skip
            cap = "< 256" if side == "below" else "1024"
            if points:
                axis.plot(*zip(*points, strict=True), style, marker="o", color=color,
                          label=f"{objective} tok/s, cap {cap}")  # fmt: skip
    axis.set_xscale("log")
    axis.set_xticks(LENGTHS_S, [str(x) for x in LENGTHS_S])
    axis.set_xlabel("window length (s)")
    axis.set_ylabel("spread of windows within a start (CV)")
    axis.set_title("H200, qwen3-moe testbed, concurrency 256 (sglang 0.5.11)")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(dest, dpi=110)


def markdown(found: dict) -> str:
    lines = [
        "| window | output, cap < 256 | output, cap 1024 | total, cap < 256 | total, cap 1024 |",
        "|---|---|---|---|---|",
    ]
    for length in LENGTHS_S:
        cells = []
        for objective in ("output", "total"):
            for side in ("below", "above"):
                v = found["curve"][objective][side][length]
                cells.append(f"{v['cv']:.1%} ({v['windows']})" if v["cv"] is not None else "-")
        lines.append(f"| {length} s | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", type=Path, default=FIXTURE)
    parser.add_argument("--plot", type=Path)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    found = figures(args.folder)
    if args.plot:
        plot(found, args.plot)
    print(json.dumps(found, indent=2) if args.json else markdown(found))


if __name__ == "__main__":
    main()
