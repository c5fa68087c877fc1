"""The dashboard's panels, drawn with matplotlib from a real Prometheus over a short run.

    python -m testkit.dashboard_render [--seconds 90] [--out docs/img/dashboard.png]

Grafana itself is not installable here, so this asks the same Prometheus queries the
committed dashboard JSON holds (glm5svc/data/monitoring/glm5svc-dashboard.json, with every
instance and GPU selected) and draws each panel: a line per series for time series and
state panels, the last value for stat panels. The run is testkit's monitored service
(`glm5svc serve` over the test engine and two fake GPUs, a real post-start benchmark, a
real Prometheus scraping every second): waves of requests, then, two thirds in, the engine
killed and the service started again as systemd would. The figures are the test engine's
and the fake GPUs': the picture shows what the panels show, not a GPU's numbers.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import tempfile
import threading
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - after the backend is chosen

from testkit.bench_venv import build_bench_serving_venv, make_tokenizer  # noqa: E402
from testkit.monitored_service import ServeUnit, send_requests, write_config  # noqa: E402
from testkit.prometheus import DASHBOARD, RULES, Prometheus, scrape_jobs, wait_for  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "docs" / "img" / "dashboard.png"
COLUMNS = 4


def legend(template: str, labels: dict) -> str:
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), template)


def load(unit: ServeUnit, stop: threading.Event) -> None:
    """Waves of 2 to 16 requests at once while the engine is up."""
    wave = 0
    while not stop.is_set():
        try:
            send_requests(unit.engine, 2 ** (1 + wave % 4), max_new_tokens=32)
        except RuntimeError:
            stop.wait(0.5)  # the engine is down: the restart is under way
        wave += 1


def drive(unit: ServeUnit, prometheus: Prometheus, seconds: float) -> float:
    """The run: its start (unix seconds)."""
    started = time.time()
    unit.wait_ready()
    unit.wait_benchmark()
    stop = threading.Event()
    worker = threading.Thread(target=load, args=(unit, stop), daemon=True)
    worker.start()
    kill_at, deadline = started + seconds * 2 / 3, started + seconds
    wait_for(lambda: time.time() >= kill_at, seconds, "the time to kill the engine", poll_s=0.5)
    unit.kill_engine()
    unit.wait_exited()
    wait_for(lambda: prometheus.alerts("GLM5NotReady"), 30, "GLM5NotReady pending", poll_s=0.5)
    unit.start().wait_ready()
    wait_for(lambda: time.time() >= deadline, seconds, "the end of the run", poll_s=0.5)
    stop.set()
    worker.join(60)
    return started


def draw(prometheus: Prometheus, start: float, end: float, out: Path) -> None:
    board = json.loads(DASHBOARD.read_text())
    panels = [p for p in board["panels"] if p["type"] != "row"]
    rows = math.ceil(len(panels) / COLUMNS)
    figure, axes = plt.subplots(rows, COLUMNS, figsize=(5 * COLUMNS, 3.2 * rows))
    for axis, panel in zip(axes.flat, panels, strict=False):
        axis.set_title(panel["title"], fontsize=10)
        axis.tick_params(labelsize=7)
        for target in panel["targets"]:
            expr = (
                target["expr"].replace("$instance", ".*").replace("$gpu", ".*")
                .replace("$__rate_interval", "1m")
            )  # fmt: skip
            if panel["type"] == "stat":  # the value at the end, as Grafana's "last"
                words = {}
                for mapping in panel["fieldConfig"]["defaults"].get("mappings", []):
                    words.update({k: v["text"] for k, v in mapping["options"].items()})
                for series in prometheus.query(expr, at=end):
                    name = legend(target.get("legendFormat", ""), series["metric"])
                    value = series["value"][1]
                    text = f"{name}: {words.get(value) or f'{float(value):.3g}'}"
                    axis.text(0.02, 0.85 - 0.14 * len(axis.texts), text, transform=axis.transAxes)
                continue
            for series in prometheus.query_range(expr, start, end, 1):
                values = [float(v) for _, v in series["values"]]
                if panel["type"] == "state-timeline" and max(values) == 0:
                    continue  # a reason never active: the panel shows it as one flat band
                times = [float(t) - start for t, _ in series["values"]]
                name = legend(target.get("legendFormat", ""), series["metric"])
                axis.plot(times, values, label=name, linewidth=1)
        if panel["type"] == "stat":
            axis.set_axis_off()
        else:
            axis.set_xlabel("s", fontsize=7)
            axis.legend(fontsize=6, loc="upper left")
    for axis in list(axes.flat)[len(panels) :]:
        axis.set_axis_off()
    figure.suptitle(
        "glm5svc dashboard queries (test engine, fake GPUs; the engine killed two thirds in)"
    )
    figure.tight_layout(rect=(0, 0, 1, 0.97))  # room for the title
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=80)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testkit.dashboard_render", description=__doc__)
    parser.add_argument("--seconds", type=float, default=90.0, help="length of the run")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the PNG to write")
    args = parser.parse_args(argv)
    if args.seconds < 20:
        parser.error("--seconds: at least 20 (a start, a benchmark and a restart fit in it)")
    python = str(build_bench_serving_venv())
    with tempfile.TemporaryDirectory(prefix="glm5-dashboard-") as name:
        folder = Path(name)
        tokenizer = str(make_tokenizer(python, folder / "tokenizer"))
        unit = ServeUnit(write_config(folder, python, tokenizer))
        prometheus = Prometheus(folder, scrape_jobs([unit.listener], [unit.engine]), [RULES])
        try:
            prometheus.start()
            unit.start()
            started = drive(unit, prometheus, args.seconds)
            draw(prometheus, started, time.time(), args.out)
        finally:
            unit.stop()
            prometheus.stop()
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
