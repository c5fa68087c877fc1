"""Tuning one replica of two behind the SGLang gateway (smg) while traffic runs through it.

Replica A is managed by a stand-in `systemctl` (this machine's PID 1 is not systemd):
`stop` sends SIGTERM to A's `glm5svc serve` and waits for it to exit (serve drains, as
glm5.service's stop does), `start` starts serve again and returns at READY (Type=notify),
`is-active` says whether it runs. Replica B is a plain `glm5svc serve`. Both supervise the
test engine. While `glm5svc tune run --take-over` runs on A (trials on private ports),
sglang's bench_serving sends requests through the gateway without a pause; the figures:
requests sent, failed, cut short, the tune's trials, and whether A came back into rotation.

    .venv/bin/python bench/tune_fleet.py [--short] [--out tune-fleet.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.gateway import Gateway, Replica, bench, wait  # noqa: E402
from glm5svc.bench.plan import BenchPlan  # noqa: E402
from testkit.bench_venv import build_bench_serving_venv, make_tokenizer  # noqa: E402
from testkit.engine import SHORT_STEADY  # noqa: E402

# The stand-in systemctl for replica A (state: its serve's pid file, argv, log, status URL).
SYSTEMCTL = r"""#!/usr/bin/env python3
import json, os, signal, subprocess, sys, time, urllib.request
unit = json.load(open(os.environ["TUNE_FLEET_UNIT"]))
with open(unit["calls"], "a") as calls:
    calls.write(" ".join(sys.argv[1:]) + "\n")
def pid():
    try:
        value = int(open(unit["pidfile"]).read())
        os.kill(value, 0)
        return value
    except (OSError, ValueError):
        return None
def ready():
    try:
        with urllib.request.urlopen(unit["status_url"] + "/status", timeout=2) as r:
            return json.loads(r.read()).get("ready")
    except OSError:
        return False
verb = sys.argv[1]
if verb == "is-active":
    sys.exit(0 if pid() else 3)
if verb == "stop":
    if pid():
        os.kill(pid(), signal.SIGTERM)
        while pid():
            time.sleep(0.1)
    sys.exit(0)
if verb in ("start", "restart"):
    if verb == "restart" and pid():
        os.kill(pid(), signal.SIGTERM)
        while pid():
            time.sleep(0.1)
    if not pid():
        log = open(unit["log"], "ab")
        proc = subprocess.Popen(unit["argv"], stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        open(unit["pidfile"], "w").write(str(proc.pid))
    deadline = time.monotonic() + 120
    while not ready():
        if time.monotonic() > deadline:
            sys.exit(1)
        time.sleep(0.2)
    sys.exit(0)
sys.exit(1)
"""


class UnitReplica(Replica):
    """Replica A: glm5svc serve behind the stand-in systemctl, with what a tune needs."""

    def __init__(self, work: Path, name: str, bench_python: str, tokenizer: Path):
        super().__init__(work, name)
        config = yaml.safe_load(self.config.read_text())
        config["model"]["tokenizer_path"] = str(tokenizer)
        config["benchmark"] = {
            "python": bench_python, "post_start": {"enabled": False}, **SHORT_STEADY
        }  # fmt: skip
        config["service"]["drain_timeout_s"] = 30
        self.config.write_text(yaml.safe_dump(config))
        bin_dir = work / "systemctl-bin"
        bin_dir.mkdir(exist_ok=True)
        (bin_dir / "systemctl").write_text(SYSTEMCTL)
        (bin_dir / "systemctl").chmod(0o755)
        self.unit = work / "unit.json"
        self.calls = work / "systemctl-calls"
        self.unit.write_text(json.dumps({
            "pidfile": str(self.dir / "serve.pid"), "log": str(self.dir / "serve.log"),
            "status_url": self.status_url, "calls": str(self.calls),
            "argv": [sys.executable, "-m", "glm5svc", "--config", str(self.config), "serve"],
        }))  # fmt: skip
        self.env = {
            **os.environ,
            "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
            "TUNE_FLEET_UNIT": str(self.unit),
            "PYTHONPATH": str(REPO),
        }

    def systemctl(self, verb: str) -> int:
        return subprocess.run(["systemctl", verb, "glm5.service"], env=self.env).returncode

    def start(self) -> None:
        if self.systemctl("start") != 0:
            raise RuntimeError(f"{self.dir}: the stand-in unit did not become ready")

    def stop(self) -> None:
        self.systemctl("stop")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--short", action="store_true", help="CI: one traffic level, 2 trials")
    parser.add_argument("--concurrency", type=int, default=8, help="traffic through the gateway")
    parser.add_argument("--out", default="tune-fleet.json")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="glm5-tune-fleet-"))
    python = str(build_bench_serving_venv())
    tokenizer = make_tokenizer(python, work / "tokenizer")
    a = UnitReplica(work, "replica-a", python, tokenizer)
    b = Replica(work, "replica-b")
    a.start()
    b.start()
    gateway = Gateway(work, [a.engine_url, b.engine_url])
    plan = BenchPlan(
        base_url=gateway.url, python=python, tokenizer=str(tokenizer), model="glm-5",
        ladder=(args.concurrency,), input_len=32, output_len=32, num_prompts=64,
        warmup_requests=2,
    )  # fmt: skip
    space = work / "space.yaml"
    space.write_text(
        yaml.safe_dump({"knobs": [{"key": "tuning.max_running_requests", "values": [1024, 4]}]})
    )
    tune_done = threading.Event()
    traffic: list[dict] = []

    def send_traffic() -> None:
        n = 0
        while not tune_done.is_set():
            n += 1
            traffic.append(bench(plan, gateway.url, args.concurrency, 64, work / f"t{n}.jsonl"))

    sender = threading.Thread(target=send_traffic)
    started = time.monotonic()
    sender.start()
    try:
        tune = subprocess.run(
            [sys.executable, "-m", "glm5svc", "--config", str(a.config), "tune", "run",
             "--take-over", "--concurrency", "8", "--input-len", "16", "--output-len", "16",
             "--window", "1", "--settle", "0.5", "--min-repeats", "2",
             "--max-repeats", "2" if args.short else "4", "--max-trials", "2",
             "--space", str(space), "--run-dir", str(work / "tune"), "--json"],
            capture_output=True, text=True, env=a.env, timeout=600,
        )  # fmt: skip
    finally:
        tune_done.set()
        sender.join()
    healthy_after = wait(lambda: gateway.healthy() == 2, 60, "both replicas back in rotation")
    summary = json.loads(tune.stdout) if tune.stdout.strip().startswith("{") else {}
    result = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpus": os.cpu_count(),
        "tune_exit": tune.returncode,
        "tune_error": tune.stderr[-2000:] if tune.returncode else None,
        "trials": [
            {k: t[k] for k in ("trial", "setting", "status", "runs", "throughput_mean", "verdict")}
            for t in summary.get("trials", [])
        ],
        "service": summary.get("service"),
        "systemctl_calls": a.calls.read_text().split("\n")[:-1],
        "wall_s": round(time.monotonic() - started, 1),
        "traffic_runs": len(traffic),
        "requests_sent": sum(t["prompts"] for t in traffic),
        "requests_failed": sum(t["failed"] for t in traffic),
        "streams_cut_short": sum(t["cut_short"] for t in traffic),
        "both_replicas_healthy_after_s": round(healthy_after, 1),
        "gateway_refusals": gateway.refusals(),
        "replica_a_status_after": {k: a.status().get(k) for k in ("ready", "phase")},
    }
    gateway.stop()
    a.stop()
    b.stop()
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    ok = tune.returncode == 0 and result["requests_failed"] == 0 and result["trials"]
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
