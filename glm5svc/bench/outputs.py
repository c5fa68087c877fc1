"""A run's files (summary.json, levels.csv, plot.png) and its terminal table."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from glm5svc.atomic_file import write_atomic
from glm5svc.bench.results import BenchSummary, LevelResult

SUMMARY_FILE = "summary.json"
CSV_FILE = "levels.csv"
PLOT_FILE = "plot.png"

CSV_COLUMNS = [
    ("concurrency", lambda lv: lv.concurrency),
    ("requested", lambda lv: lv.requested),
    ("completed", lambda lv: lv.completed),
    ("ok", lambda lv: lv.ok),
    ("duration_s", lambda lv: _m(lv, "duration_s")),
    ("avg_concurrency", lambda lv: _m(lv, "concurrency")),
    ("total_tok_s", lambda lv: _m(lv, "total_throughput")),
    ("output_tok_s", lambda lv: _m(lv, "output_throughput")),
    ("input_tok_s", lambda lv: _m(lv, "input_throughput")),
    ("request_per_s", lambda lv: _m(lv, "request_throughput")),
    ("peak_output_tok_s", lambda lv: _m(lv, "peak_output_throughput")),
    *[
        (f"{stat}_{name}_ms", lambda lv, n=name, s=stat: _lat(lv, n, s))
        for name in ("ttft", "itl", "tpot", "e2e_latency")
        for stat in ("mean", "median", "p99")
    ],
    ("energy_j", lambda lv: lv.telemetry.energy_joules),
    ("j_per_output_token", lambda lv: lv.telemetry.joules_per_output_token),
    ("j_per_token", lambda lv: lv.telemetry.joules_per_token),
    ("mean_power_w_per_gpu", lambda lv: lv.telemetry.mean_power_w),
    ("max_peak_power_w", lambda lv: lv.telemetry.max_peak_power_w),
    ("mean_power_share", lambda lv: lv.telemetry.mean_power_share),
    ("max_peak_power_share", lambda lv: lv.telemetry.max_peak_power_share),
    ("mean_gpu_util", lambda lv: lv.telemetry.mean_gpu_utilization),
    ("pcie_tx_gb_s", lambda lv: lv.telemetry.pcie_tx_gb_per_s),
    ("pcie_rx_gb_s", lambda lv: lv.telemetry.pcie_rx_gb_per_s),
    ("power_limited_s", lambda lv: lv.telemetry.power_limited_s),
    ("thermal_limited_s", lambda lv: lv.telemetry.thermal_limited_s),
    ("window_scope", lambda lv: lv.window_scope),
    ("error", lambda lv: lv.error),
]


def _m(level: LevelResult, key: str) -> Any:
    return getattr(level.metrics, key) if level.metrics else None


def _lat(level: LevelResult, name: str, stat: str) -> Any:
    return level.metrics.latency(name, stat) if level.metrics else None


def summary_json(summary: BenchSummary) -> str:
    return json.dumps(summary.to_dict(), indent=2, sort_keys=False) + "\n"


def levels_csv(levels: list[LevelResult]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow([name for name, _ in CSV_COLUMNS])
    for level in levels:
        writer.writerow(["" if (v := get(level)) is None else v for _, get in CSV_COLUMNS])
    return buffer.getvalue()


RESULT_FILE_MODE = 0o640


def write_results(summary: BenchSummary, run_dir: Path) -> dict[str, Path]:
    """summary.json, levels.csv and plot.png in run_dir (raw lines are written as levels end)."""
    files = {
        "summary": run_dir / SUMMARY_FILE,
        "csv": run_dir / CSV_FILE,
        "plot": run_dir / PLOT_FILE,
    }
    # Not world-readable: the plan and provenance describe the deployment.
    write_atomic(files["csv"], levels_csv(summary.levels).encode(), mode=RESULT_FILE_MODE)
    write_atomic(files["plot"], plot_png(summary), mode=RESULT_FILE_MODE)
    write_atomic(files["summary"], summary_json(summary).encode(), mode=RESULT_FILE_MODE)
    return files


def plot_png(summary: BenchSummary) -> bytes:
    """Throughput against concurrency; J/token and power share (second axis) below."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    levels = [lv for lv in summary.levels if lv.metrics and lv.metrics.total_throughput]
    xs = [lv.concurrency for lv in levels]
    fig = Figure(figsize=(8, 7), dpi=100)
    top, bottom = fig.subplots(2, 1, sharex=True)
    top.plot(xs, [lv.metrics.total_throughput for lv in levels], "o-", label="total tok/s")
    top.plot(xs, [lv.metrics.output_throughput for lv in levels], "s-", label="output tok/s")
    baseline = summary.verdicts.get("baseline") or {}
    base_rows = [r for r in baseline.get("rows", []) if r["metric"] == "total_throughput"]
    if base_rows:
        top.plot(
            [r["concurrency"] for r in base_rows],
            [r["baseline"] for r in base_rows],
            "x--",
            color="grey",
            label=f"baseline total ({baseline.get('name')})",
        )
    knee = summary.verdicts.get("knee") or {}
    if knee.get("found"):
        top.axvline(knee["concurrency"], color="red", linestyle=":", label="knee")
    top.set_ylabel("tokens / s")
    top.set_title(f"glm5svc bench {summary.run_id}")
    top.grid(True, alpha=0.3)
    top.legend(fontsize="small")
    jpt = [(lv.concurrency, lv.telemetry.joules_per_output_token) for lv in levels]
    jpt = [(x, y) for x, y in jpt if y is not None]
    share = [(lv.concurrency, lv.telemetry.mean_power_share) for lv in levels]
    share = [(x, y) for x, y in share if y is not None]
    if jpt:
        bottom.plot(*zip(*jpt, strict=True), "o-", color="tab:green", label="J / output token")
    else:
        note = f"no GPU telemetry: {summary.telemetry_status}"
        bottom.text(0.5, 0.5, note, ha="center", va="center", transform=bottom.transAxes)
    bottom.set_ylabel("J / output token")
    bottom.set_xlabel("concurrency")
    bottom.grid(True, alpha=0.3)
    power = bottom.twinx()
    if share:
        power.plot(*zip(*share, strict=True), "d--", color="tab:orange", label="power / limit")
    power.set_ylabel("mean power share of limit")
    power.set_ylim(0, 1.05)
    if xs and max(xs) / min(xs) >= 8:
        bottom.set_xscale("log", base=2)
    if xs:
        bottom.set_xticks(xs, [str(x) for x in xs])
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()


def _fmt(value: Any, spec: str = ",.0f") -> str:
    return "-" if value is None else format(value, spec)


TABLE_COLUMNS = (
    "conc", "done", "total tok/s", "out tok/s", "req/s", "TTFT p50/p99 ms", "ITL p50 ms",
    "E2E p50 s", "J/out tok", "power/limit", "PCIe tx/rx GB/s",
)  # fmt: skip


def render_table(summary: BenchSummary):
    """A rich Table of the levels, with the baseline change where there is one."""
    from rich.table import Table

    baseline = summary.verdicts.get("baseline") or {}
    change = {
        r["concurrency"]: r for r in baseline.get("rows", []) if r["metric"] == "total_throughput"
    }
    table = Table(title=f"glm5svc bench {summary.run_id}", title_justify="left")
    for name in TABLE_COLUMNS:
        table.add_column(name, justify="right")
    if baseline:
        table.add_column("vs baseline", justify="right")
    for level in summary.levels:
        m, t = level.metrics, level.telemetry
        row = [
            str(level.concurrency),
            f"{level.completed}/{level.requested}",
            _fmt(m and m.total_throughput),
            _fmt(m and m.output_throughput),
            _fmt(m and m.request_throughput, ".2f"),
            f"{_fmt(m and m.latency('ttft'))}/{_fmt(m and m.latency('ttft', 'p99'))}",
            _fmt(m and m.latency("itl"), ".1f"),
            _fmt(m and m.latency("e2e_latency") and m.latency("e2e_latency") / 1000, ".2f"),
            _fmt(t.joules_per_output_token, ".3f"),
            _fmt(t.mean_power_share, ".0%"),
            f"{_fmt(t.pcie_tx_gb_per_s, '.2f')}/{_fmt(t.pcie_rx_gb_per_s, '.2f')}",
        ]
        if baseline:
            row.append(_change_cell(change.get(level.concurrency)))
        style = None if level.ok else "red"
        table.add_row(*row, style=style)
    return table


def _change_cell(row: dict[str, Any] | None) -> str:
    if row is None:
        return "-"
    text = f"{row['change_pct']:+.1f}%"
    if not row.get("judged"):
        return f"{text} (not judged)"
    return f"[red]{text}[/red]" if row["regressed"] else text


def target_line(target: dict) -> str | None:
    """Says when the run went through the gateway (provenance "target")."""
    if target.get("kind") != "gateway":
        return None
    workers = ", ".join(w["url"] for w in target.get("workers") or [] if w.get("url"))
    return (
        f"Target: the gateway at {target.get('base_url')} "
        f"({target.get('healthy_workers')} of {target.get('total_workers')} replicas healthy"
        + (f": {workers})" if workers else ")")
        + "; figures are the fleet's, not one replica's"
    )


def verdict_lines(summary: BenchSummary) -> list[str]:
    lines = []
    target = target_line(summary.provenance.get("target") or {})
    if target:
        lines.append(target)
    if summary.stopped_reason:
        lines.append(f"Ladder stopped early: {summary.stopped_reason}")
    if summary.telemetry_status != "available":
        lines.append(f"GPU telemetry unavailable: {summary.telemetry_status}")
    for key in ("knee", "underused", "baseline"):
        verdict = summary.verdicts.get(key)
        if verdict:
            lines.append(verdict["text"])
    if summary.results_dir:
        lines.append(f"Results: {summary.results_dir}")
    return lines
