"""A real Prometheus (Debian's `prometheus` package) on loopback, and its HTTP API.

For tests/monitoring and testkit/dashboard_render.py: a private config, data directory and
port (never the packaged daemon's 9090 or /var/lib/prometheus), short scrape and rule
intervals, and the scrape jobs docs/observability.md gives an operator (`scrape_jobs`).

    python -m testkit.prometheus targets URL [--wait S] [--alertmanagers N]   # scripts/lab

prints a running Prometheus' targets and exits 1 unless every one is up within S seconds (and
it sends its alerts to N Alertmanagers).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from glm5svc.http_fetch import FetchError, fetch_bytes
from testkit.engine import free_port, stop_process
from testkit.timing import scaled

REPO = Path(__file__).resolve().parents[1]
MONITORING = REPO / "glm5svc" / "data" / "monitoring"
RULES = MONITORING / "glm5svc-rules.yml"
DASHBOARD = MONITORING / "glm5svc-dashboard.json"
# `instance` is the target's host, without the port, in both jobs: the rules join on it.
INSTANCE_RELABEL = {
    "source_labels": ["__address__"],
    "regex": "(.+):[0-9]+",
    "target_label": "instance",
    "replacement": "$1",
}


def binary(name: str) -> str:
    """The path of `prometheus`, `promtool`, `prometheus-alertmanager` or `amtool`, or an
    error naming the Debian package to install."""
    found = shutil.which(name) or shutil.which(name, path="/usr/bin:/usr/sbin")
    if found is None:
        alertmanager = name in ("amtool", "prometheus-alertmanager")
        package = "prometheus-alertmanager" if alertmanager else "prometheus"
        raise RuntimeError(
            f"{name} not found: install Debian's {package} package "
            f"(`apt-get install {package}`; scripts/setup-dev.sh does as root)"
        )
    return found


def scrape_jobs(listeners: list[str], engines: list[str]) -> list[dict]:
    """The two scrape jobs: glm5svc's listeners and the engines, as host:port targets."""
    return [
        {
            "job_name": job,
            "metrics_path": "/metrics",
            "static_configs": [{"targets": targets}],
            "relabel_configs": [dict(INSTANCE_RELABEL)],
        }
        for job, targets in (("glm5svc", listeners), ("sglang", engines))
    ]


def start_ready(argv: list[str], log_path: Path, url: str) -> subprocess.Popen:
    """Start a Prometheus-style daemon (its output to `log_path`) and wait until `url`
    answers /-/ready; its exit first is an error with the log's end."""
    with open(log_path, "wb") as log:  # the child keeps its own descriptor
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )  # fmt: skip

    def ready() -> bool:
        if proc.poll() is not None:
            text = log_path.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{Path(argv[0]).name} exited with {proc.returncode}: {text}")
        try:
            return fetch_bytes(url + "/-/ready", timeout_s=2)[0] == 200
        except FetchError:
            return False

    wait_for(ready, 30, f"{Path(argv[0]).name} to answer /-/ready")
    return proc


def wait_for(condition: Callable[[], Any], timeout_s: float, what: str, poll_s: float = 0.2):
    """Poll `condition` until it returns something true; that value, or AssertionError."""
    deadline = time.monotonic() + scaled(timeout_s)
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {scaled(timeout_s):.0f} s waiting for {what}")
        time.sleep(poll_s)


class Prometheus:
    """`prometheus` with its own config, rules, data directory and loopback port."""

    def __init__(
        self,
        workdir: Path,
        jobs: list[dict],
        rule_files: list[Path],
        interval_s=1,
        alertmanagers: tuple[str, ...] = (),
    ):
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = workdir / "prometheus.yml"
        interval = f"{interval_s}s"
        config = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "rule_files": [str(path) for path in rule_files],
            "scrape_configs": jobs,
        }
        if alertmanagers:  # host:port of each, as the monitoring role writes it
            targets = [{"targets": list(alertmanagers)}]
            config["alerting"] = {"alertmanagers": [{"static_configs": targets}]}
        self.config.write_text(yaml.safe_dump(config, sort_keys=False))
        self.proc: subprocess.Popen | None = None

    def start(self) -> Prometheus:
        self.proc = start_ready(
            [
                binary("prometheus"),
                f"--config.file={self.config}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                # Firing alerts again every second, not every minute: one sent before the
                # Alertmanager was discovered is dropped, and the next must not be far.
                "--rules.alert.resend-delay=1s",
                "--log.level=warn",
            ],
            self.workdir / "prometheus.log",
            self.url,
        )
        return self

    def api(self, path: str, **params) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        status, body = fetch_bytes(f"{self.url}/api/v1/{path}{query}", timeout_s=10)[:2]
        answer = json.loads(body)
        if answer.get("status") != "success":
            raise AssertionError(f"Prometheus /api/v1/{path} {params}: {answer}")
        return answer["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict]:
        """The instant vector `expr` gives now (or at unix time `at`)."""
        params = {"query": expr} if at is None else {"query": expr, "time": at}
        return self.api("query", **params)["result"]

    def query_range(self, expr: str, start: float, end: float, step_s: float) -> list[dict]:
        """The range vector `expr` gives from `start` to `end` (unix seconds)."""
        return self.api("query_range", query=expr, start=start, end=end, step=step_s)["result"]

    def label_values(self, label: str, match: str) -> list[str]:
        """What Grafana's label_values(match, label) lists."""
        return self.api(f"label/{label}/values", **{"match[]": match})

    def alerts(self, name: str) -> list[dict]:
        return [a for a in self.api("alerts")["alerts"] if a["labels"]["alertname"] == name]

    def targets(self) -> list[dict]:
        return self.api("targets")["activeTargets"]

    def stop(self) -> None:
        stop_process(self.proc, 10)


def targets_at(url: str) -> list[dict]:
    """The active targets of the Prometheus at `url`, [] while it does not answer."""
    try:
        body = fetch_bytes(f"{url}/api/v1/targets", timeout_s=5)[1]
    except FetchError:
        return []
    return json.loads(body)["data"]["activeTargets"]


def alertmanagers_at(url: str) -> list[str]:
    """The Alertmanagers the Prometheus at `url` sends alerts to, [] while it does not answer."""
    try:
        body = fetch_bytes(f"{url}/api/v1/alertmanagers", timeout_s=5)[1]
    except FetchError:
        return []
    return [am["url"] for am in json.loads(body)["data"]["activeAlertmanagers"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testkit.prometheus")
    parser.add_argument("what", choices=["targets"])
    parser.add_argument("url", help="the Prometheus, e.g. http://127.0.0.1:9230")
    parser.add_argument("--wait", type=float, default=60.0, help="seconds to wait for all up")
    parser.add_argument(
        "--alertmanagers", type=int, default=0, help="how many Alertmanagers it must reach"
    )
    args = parser.parse_args(argv)
    deadline = time.monotonic() + args.wait
    while True:
        targets = targets_at(args.url)
        reached = alertmanagers_at(args.url)
        if (
            targets
            and all(t["health"] == "up" for t in targets)
            and len(reached) >= args.alertmanagers
        ) or time.monotonic() > deadline:
            break
        time.sleep(1)
    for url in reached:
        print(f"alertmanager {url}")
    if len(reached) < args.alertmanagers:
        print(f"{args.url}: reaches {len(reached)} Alertmanagers, not {args.alertmanagers}",
              file=sys.stderr)  # fmt: skip
        return 1
    for target in targets:
        job, instance = target["labels"].get("job", "?"), target["labels"].get("instance", "?")
        error = target.get("lastError", "")
        print(f"{job:10} {instance:20} {target['scrapeUrl']:45} {target['health']:8} {error}")
    if not targets or any(t["health"] != "up" for t in targets):
        print(f"{args.url}: not every target is up after {args.wait:.0f} s", file=sys.stderr)
        return 1
    print(f"{args.url}: {len(targets)} targets, every one up")
    return 0


if __name__ == "__main__":
    sys.exit(main())
