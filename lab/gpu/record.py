"""Turns what a GPU-machine run brought back into recorded truth for the CPU tests.

    scripts/gpu-lab record RUN_DIR [--name NAME]

RUN_DIR holds results.json and recorded.tar.gz from `scripts/gpu-lab remote`. The real
server's logs (timestamps from the run stripped), its /metrics text, bench_serving's
output and the service's outputs go to tests/fixtures/real_engine/NAME/ with the run's
results.json; the figures are printed as the Markdown tables of
docs/performance-real-engine.md.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "real_engine"
# The run prefixes each captured line with seconds since the process started.
RUN_PREFIX = re.compile(r"^\s*\d+\.\d{3} ")
MAX_LOG_BYTES = 400_000


def strip_prefix(text: str) -> str:
    return "".join(RUN_PREFIX.sub("", line, count=1) for line in text.splitlines(keepends=True))


def keep_ends(text: str, limit: int = MAX_LOG_BYTES) -> str:
    """Logs beyond the limit keep their start and end (where phases and failures are)."""
    if len(text) <= limit:
        return text
    head, tail = text[: limit // 2], text[-limit // 2 :]
    cut = "[... cut by gpu-lab record ...]\n"
    return head[: head.rfind("\n") + 1] + cut + tail[tail.find("\n") + 1 :]


def slim_jsonl(text: str) -> str:
    """bench_serving repeats the server's whole server_info in every line: keep the first."""
    lines = []
    for number, line in enumerate(text.splitlines()):
        record = json.loads(line)
        if number:
            record.pop("server_info", None)
        lines.append(json.dumps(record))
    return "\n".join(lines) + "\n"


BINARY_SUFFIXES = (".db", ".png", ".gz", ".sqlite")


def record(run_dir: Path, name: str) -> Path:
    dest = FIXTURES / name
    dest.mkdir(parents=True, exist_ok=True)
    results = json.loads((run_dir / "results.json").read_text())
    (dest / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    with tarfile.open(run_dir / "recorded.tar.gz") as tar:
        for member in tar.getmembers():
            if not member.isfile():
                continue
            # recorded/NAME, or recorded/tune-run/trials/001/NAME: the folders below
            # recorded/ are kept (a tune run's trials each have a server log).
            parts = Path(member.name).parts
            relative = Path(*parts[1:]) if parts[:1] == ("recorded",) else Path(*parts)
            target = dest / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            data = tar.extractfile(member).read()
            if target.suffix in BINARY_SUFFIXES:
                target.write_bytes(data)
                continue
            text = data.decode(errors="replace")
            if target.suffix == ".log":
                text = keep_ends(strip_prefix(text))
            elif target.suffix == ".jsonl" and target.name != "seconds.jsonl":
                text = slim_jsonl(text)  # bench_serving's lines (seconds.jsonl kept as is)
            target.write_text(text)
    return dest


def ratio_table(runs: list[dict]) -> list[str]:
    """Supervised over bare throughput per level: medians, and every run for the spread."""
    rows = [
        "| concurrency | bare tok/s: median (runs) | supervised tok/s: median (runs) | ratio |",
        "|---|---|---|---|",
    ]
    for level in sorted({r["level"] for r in runs}):
        figures = {
            target: [
                r["total_throughput"]
                for r in runs
                if (r["level"], r["target"]) == (level, target) and r.get("total_throughput")
            ]
            for target in ("bare", "serve")
        }
        if not (figures["bare"] and figures["serve"]):
            continue
        bare, serve = statistics.median(figures["bare"]), statistics.median(figures["serve"])
        each = {t: ", ".join(f"{v:,.0f}" for v in figures[t]) for t in figures}
        rows.append(
            f"| {level} | {bare:,.0f} ({each['bare']}) | {serve:,.0f} ({each['serve']}) "
            f"| {serve / bare:.3f} |"
        )
    return rows


def summary(results: dict) -> str:
    machine = results.get("machine", {})
    lines = [
        f"Run: {machine.get('date_utc')}, GPU {machine.get('gpus')}, "
        f"sglang {machine.get('sglang')}, torch {machine.get('torch')}, "
        f"flashinfer {machine.get('flashinfer_python')}, Python {machine.get('python')}",
        "",
    ]
    service = results.get("service", {})
    if service.get("ratio_runs"):
        lines += ratio_table(service["ratio_runs"]) + [""]
    for key in ("start", "drain", "kill_scheduler", "bare_stop", "under_load", "error"):
        if key in service:
            lines.append(f"- {key}: {json.dumps(service[key], default=str)[:1500]}")
    if "nsa" in results:
        lines.append(f"- nsa: {json.dumps(results['nsa'], default=str)[:3000]}")
    lines += ratio_summary(results.get("ratio", {}))
    lines += noise_summary(results.get("noise", {}))
    lines += tune_summary(results.get("tune", {}))
    return "\n".join(lines)


def ratio_summary(ratio: dict) -> list[str]:
    """The ratio scenario: every run by level, then the pairs' mean and its interval."""
    if not ratio:
        return []
    lines = ratio_table(ratio.get("runs", [])) + [""]
    for key in ("ratio", "ratio_by_level", "resolved", "kv_pool_tokens", "start", "error"):
        if key in ratio:
            lines.append(f"- {key}: {json.dumps(ratio[key], default=str)}")
    return lines


def noise_summary(noise: dict) -> list[str]:
    """The noise scenario: each start's windows (the attribution: lab/gpu/noise_figures.py)."""
    if not noise:
        return []
    lines = [f"- noise: variant {noise.get('variant')}, {noise.get('window_s')} s windows"]
    for start in noise.get("starts", []):
        shown = ", ".join(f"{w['kind']} {w['throughput']:,.0f}" for w in start.get("windows", []))
        error = f"; {start['error']}" if start.get("error") else ""
        lines.append(f"  - start {start.get('number')}: fired up {start.get('fired_up_s')} s; "
                     f"{shown}{error}")  # fmt: skip
    if "error" in noise:
        lines.append(f"  - error: {noise['error']}")
    return lines


def gpu_tag(machine: dict) -> str:
    """h100 or h200 from the machine's GPU names (h200 when it cannot tell: the older runs)."""
    names = " ".join(str(g) for g in machine.get("gpus") or []).upper()
    return "h100" if "H100" in names else "h200"


def tune_summary(tune: dict) -> list[str]:
    """The tune scenario: where it started, how it ended, and the command's own summary."""
    if not tune:
        return []
    lines = [f"- tune from {tune.get('start')}: exit {tune.get('exit')}, {tune.get('wall_s')} s"]
    summary = tune.get("summary") or {}
    for key in ("trials", "best", "gain", "baseline", "tuned"):
        if key in summary:
            lines.append(f"  - {key}: {json.dumps(summary[key], default=str)[:1500]}")
    if not summary:
        lines.append(f"  - no summary: {str(tune.get('stderr_tail', ''))[-800:]}")
    return lines


def default_name(results: dict) -> str:
    """sglang-<version>-h200-<scenario> for a run of one of the newer scenarios (tune:
    tune-<start>; noise: on the GPU it ran on), else sglang-<version>-<date>."""
    machine = results.get("machine", {})
    version = machine.get("sglang", "unknown")
    if "tune" in results:
        return f"sglang-{version}-h200-tune-{results['tune'].get('start', 'before')}"
    if "ratio" in results:
        return f"sglang-{version}-h200-ratio"
    if "noise" in results:
        return f"sglang-{version}-{gpu_tag(machine)}-noise"
    return f"sglang-{version}-{str(machine.get('date_utc', ''))[:10]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument(
        "--name",
        help="fixture folder name (default: sglang-<version>-h200-ratio or -tune-<start>, "
        "else sglang-<version>-<date>)",
    )
    args = parser.parse_args()
    results = json.loads((args.run_dir / "results.json").read_text())
    name = args.name or default_name(results)
    dest = record(args.run_dir, name)
    print(f"recorded into {dest.relative_to(REPO)}\n")
    print(summary(results))


if __name__ == "__main__":
    main()
