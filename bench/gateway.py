"""Replicas behind the SGLang gateway (smg), measured against the test engine on this machine.

Two replicas, each a real `glm5svc serve` supervising the test engine (as glm5.service does),
and the pinned smg (roles/glm5_gateway/defaults/main.yml: version, policy, health-check
settings), either run directly here or, with --lab, the lab's: `scripts/lab up --replicas 2`
(two stand-in hosts, glm5.service in each one's container, glm5-gateway.service on the first
host, all from site.yml). Figures, with the same sglang 0.5.9 bench_serving:

  direct      one replica's engine, concurrency C
  gateway-1   the gateway with one replica, concurrency C   (overhead = 1 - gw1/direct)
  gateway-2   the gateway with two replicas, C and 2C       (scaling = gw2 / gw1)
  stop        two replicas, 2C; one replica's glm5svc gets SIGTERM mid-run (systemctl stop)
  kill        two replicas, 2C; one replica's engine gets SIGKILL mid-run
For stop/kill: failed requests, streams cut short (fewer tokens than asked; bench_serving
counts those as completed), requests in flight on that replica at the event, and the seconds
until the gateway counted it unhealthy. Direct, the gateway is started per phase with the
replicas it needs; in the lab, the gateway is the unit site.yml made, and a phase with one
replica stops the other one's glm5.service (`systemctl stop glm5`, as an operator would).

    .venv/bin/python bench/gateway.py [--concurrency 16] [--prompts 256] [--short] [--lab]

Longer than 400 lines: one benchmark, its two setups (started here, or the lab's units)
behind one interface, and its phases together.

The test engine's throughput is CPU-bound here: on a small machine the bench client, the
gateway and both engines share the cores, so the scaling figure says what this machine
does, not what GPUs would.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.phases import run_phases  # noqa: E402
from glm5svc.bench.plan import BenchPlan  # noqa: E402
from glm5svc.bench.runner import bench_serving_command, bench_serving_env  # noqa: E402
from glm5svc.bench.serving_figures import parse_bench_line  # noqa: E402
from glm5svc.child_group import ChildGroup, spawn  # noqa: E402
from glm5svc.http_fetch import FetchError, decode_json, fetch_json, fetch_text  # noqa: E402
from glm5svc.metrics_text import parse_metrics  # noqa: E402
from testkit.bench_venv import build_bench_serving_venv, make_tokenizer  # noqa: E402
from testkit.engine import TEST_ENGINE, free_port  # noqa: E402
from testkit.smg_venv import GATEWAY_DEFAULTS as ROLE_DEFAULTS  # noqa: E402
from testkit.smg_venv import SMG_VERSION, smg_python  # noqa: E402
from testkit.timing import scaled  # noqa: E402

LAUNCHER = REPO / "roles/glm5_gateway/files/glm5-gateway-launch.py"
LAB_INVENTORY = yaml.safe_load((REPO / "lab/inventory.yml").read_text())
LAB_REPLICAS = yaml.safe_load((REPO / "lab/replicas.yml").read_text())
LAB_LXCPATH = "/var/lib/glm5-lab/lxc"


def get_json(url: str) -> dict:
    """The JSON url answers, an HTTP error's JSON body included (smg's 503 /readiness)."""
    try:
        return fetch_json(url, timeout_s=3)
    except FetchError as exc:
        if exc.status is None:
            raise
        return decode_json(url, exc.body or b"{}")


def wait(predicate, timeout: float, what: str) -> float:
    started = time.monotonic()
    timeout = scaled(timeout)
    while time.monotonic() - started < timeout:
        try:
            if predicate():
                return time.monotonic() - started
        except (FetchError, OSError, ValueError):
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{what} within {timeout} s")


class Replica:
    """`glm5svc serve` with the test engine, on its own ports."""

    def __init__(self, work: Path, name: str):
        self.dir = work / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.engine_port, self.listen_port = free_port(), free_port()
        self.engine_url = f"http://127.0.0.1:{self.engine_port}"
        self.status_url = f"http://127.0.0.1:{self.listen_port}"
        self.config = self.dir / "glm5.yaml"
        command = [sys.executable, str(TEST_ENGINE), "--test-mode", "load=0.2"]
        self.config.write_text(
            yaml.safe_dump(
                {
                    "model": {"path": str(self.dir), "served_name": "glm-5"},
                    "server": {"host": "127.0.0.1", "port": self.engine_port, "command": command},
                    "service": {
                        "listen_port": self.listen_port,
                        "run_preflight": False,
                        "probe_interval_s": 1,
                        "drain_timeout_s": 30,
                        "results_dir": str(self.dir / "results"),
                    },
                    "telemetry": {"enabled": False},
                    "benchmark": {"post_start": {"enabled": False}},
                }
            )
        )
        self.proc: ChildGroup | None = None

    def start(self) -> None:
        log = open(self.dir / "serve.log", "ab")  # noqa: SIM115 (the child keeps it)
        self.proc = spawn(
            [str(Path(sys.executable).parent / "glm5svc"), "--config", str(self.config), "serve"],
            die_with_parent=False, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        wait(lambda: get_json(self.status_url + "/status").get("ready"), 60, f"{self.dir} ready")

    def status(self) -> dict:
        return get_json(self.status_url + "/status")

    def engine_metric(self, name: str) -> float:
        """One sglang:<name> value from the engine's /metrics, summed over label sets."""
        text = fetch_text(self.engine_url + "/metrics", timeout_s=3)
        return parse_metrics(text).total(f"sglang:{name}") or 0.0

    def running_requests(self) -> float:
        return self.engine_metric("num_running_reqs")

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def begin_stop(self) -> None:
        """SIGTERM to glm5svc (what systemctl stop sends): it drains; do not wait."""
        self.proc.signal_leader(signal.SIGTERM)

    def kill_engine(self) -> None:
        os.kill(self.status()["engine_pid"], signal.SIGKILL)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.stop(60)


class LabReplica(Replica):
    """glm5.service in lab container `ct` (scripts/lab up --replicas 2), reached the way
    site.yml reaches it: lxc-attach into its stand-in host, then pct exec."""

    def __init__(self, container: str):
        hosts = {**LAB_INVENTORY["all"]["children"]["glm5_containers"]["hosts"],
                 **LAB_REPLICAS["all"]["children"]["glm5_containers"]["hosts"]}  # fmt: skip
        replica = hosts[container]
        self.host = replica["glm5_container_driver_host"]
        self.engine_url = f"http://127.0.0.1:{replica['glm5_service_port']}"
        self.status_url = f"http://127.0.0.1:{replica['glm5_service_listen_port']}"

    def in_ct(self, *argv: str, check: bool = True) -> str:
        command = ["lxc-attach", "-P", LAB_LXCPATH, "-n", self.host, "--", "pct", "exec", "200",
                   "--", *argv]  # fmt: skip
        return subprocess.run(command, check=check, capture_output=True, text=True).stdout

    def running(self) -> bool:
        # is-active exits 3 for anything but active: the answer is the printed state.
        return self.in_ct("systemctl", "is-active", "glm5", check=False).strip() == "active"

    def start(self) -> None:
        self.in_ct("systemctl", "reset-failed", "glm5")
        self.in_ct("systemctl", "start", "glm5")  # returns at READY=1 (Type=notify)
        wait(lambda: self.status().get("ready"), 60, f"{self.host}'s replica ready")

    def begin_stop(self) -> None:
        self.in_ct("systemctl", "--no-block", "stop", "glm5")

    def kill_engine(self) -> None:
        self.in_ct("kill", "-9", str(self.status()["engine_pid"]))

    def stop(self) -> None:
        self.in_ct("systemctl", "stop", "glm5")


class Gateway:
    def __init__(self, work: Path, workers: list[str]):
        self.port, self.metrics_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        d = ROLE_DEFAULTS
        args = [
            "--host", "127.0.0.1", "--port", str(self.port), "--worker-urls", *workers,
            "--policy", d["glm5_gateway_policy"],
            "--health-check-endpoint", d["glm5_gateway_health_check_endpoint"],
            "--health-check-interval-secs", str(d["glm5_gateway_health_check_interval_s"]),
            "--health-check-timeout-secs", str(d["glm5_gateway_health_check_timeout_s"]),
            "--health-failure-threshold", str(d["glm5_gateway_health_failure_threshold"]),
            "--health-success-threshold", str(d["glm5_gateway_health_success_threshold"]),
            "--prometheus-host", "127.0.0.1", "--prometheus-port", str(self.metrics_port),
        ]  # fmt: skip
        self.log_path = work / f"smg-{self.port}.log"
        log = open(self.log_path, "ab")  # noqa: SIM115 (the child keeps it)
        self.proc = spawn(
            [smg_python(), str(LAUNCHER), *args], die_with_parent=False, stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        expected = len(workers)
        wait(
            lambda: get_json(self.url + "/readiness").get("healthy_workers") == expected,
            60, "gateway with every worker healthy",
        )  # fmt: skip

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def refusals(self) -> dict[str, int]:
        """smg's logged reasons for answering 'No available workers' (503), counted."""
        counts: dict[str, int] = {}
        for line in self.log_text().splitlines():
            if "No available workers" in line and 'reason="' in line:
                reason = line.split('reason="', 1)[1].split('"', 1)[0]
                counts[reason] = counts.get(reason, 0) + 1
        return counts

    def healthy(self) -> int:
        return get_json(self.url + "/readiness").get("healthy_workers", 0)

    def stop(self) -> None:
        self.proc.stop(30)


class LabGateway(Gateway):
    """glm5-gateway.service on the lab's first stand-in host (lab/replicas.yml)."""

    def __init__(self):
        gateway = LAB_REPLICAS["all"]["children"]["glm5_gateways"]["hosts"]
        self.host, settings = next(iter(gateway.items()))
        self.url = f"http://127.0.0.1:{settings['glm5_gateway_port']}"
        self.since = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())

    def log_text(self) -> str:
        command = ["lxc-attach", "-P", LAB_LXCPATH, "-n", self.host, "--", "journalctl",
                   "-u", "glm5-gateway", "--utc", "--since", self.since, "-o", "cat"]  # fmt: skip
        return subprocess.run(command, capture_output=True, text=True).stdout

    def stop(self) -> None:
        """The unit stays: site.yml owns it."""


class DirectSetup:
    """Replicas and smg started here, a gateway per phase with the replicas it names."""

    lab = False

    def __init__(self, work: Path):
        self.work = work
        self.a, self.b = Replica(work, "replica-a"), Replica(work, "replica-b")
        self.a.start()
        self.b.start()

    @contextlib.contextmanager
    def gateway(self, replicas: list[Replica]):
        gw = Gateway(self.work, [r.engine_url for r in replicas])
        try:
            yield gw
        finally:
            gw.stop()

    def close(self) -> None:
        self.a.stop()
        self.b.stop()


class LabSetup:
    """The lab's two replicas and its gateway: a phase with one replica stops the other's
    glm5.service, and every phase ends with both serving again."""

    lab = True

    def __init__(self):
        containers = list(LAB_INVENTORY["all"]["children"]["glm5_containers"]["hosts"])
        containers += list(LAB_REPLICAS["all"]["children"]["glm5_containers"]["hosts"])
        self.a, self.b = (LabReplica(name) for name in containers)
        self.api_key = LAB_INVENTORY["all"]["vars"]["glm5_lab_api_key"]

    @contextlib.contextmanager
    def gateway(self, replicas: list[Replica]):
        for replica in (self.a, self.b):
            if replica in replicas and not replica.running():
                replica.start()
            elif replica not in replicas and replica.running():
                replica.stop()
        gw = LabGateway()
        wait(lambda: gw.healthy() == len(replicas), 60, f"{len(replicas)} healthy worker(s)")
        try:
            yield gw
        finally:
            if not self.b.running():
                self.b.start()

    def close(self) -> None:
        for replica in (self.a, self.b):
            if not replica.running():
                replica.start()


def bench(plan: BenchPlan, base_url: str, concurrency: int, prompts: int, out: Path) -> dict:
    plan = plan.with_overrides(base_url=base_url)
    # --output-details: per-request output lengths, so a stream cut short shows (bench_serving
    # counts a stream that ends early without an error as completed).
    command = bench_serving_command(plan, concurrency, prompts, out) + ["--output-details"]
    started = time.monotonic()
    subprocess.run(
        command, env=bench_serving_env(plan), check=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )  # fmt: skip
    line = out.read_text().strip().splitlines()[-1]
    metrics = parse_bench_line(line)
    lengths = json.loads(line).get("output_lens") or []
    return {
        "cut_short": sum(1 for n in lengths if 0 < n < plan.output_len),
        "concurrency": concurrency,
        "prompts": prompts,
        "completed": metrics.completed,
        "failed": prompts - metrics.completed,
        "output_tok_s": round(metrics.output_throughput or 0, 1),
        "request_s": round(metrics.request_throughput or 0, 2),
        "median_e2e_ms": metrics.latency("e2e_latency"),
        "median_ttft_ms": metrics.latency("ttft"),
        "wall_s": round(time.monotonic() - started, 1),
    }


def disrupt(gateway: Gateway, victim: Replica, action: str, after_s: float) -> dict:
    """after_s after the victim's engine starts running requests of the run: stop the
    victim's glm5svc (SIGTERM) or SIGKILL its engine; then time how long until the gateway
    counts it unhealthy."""
    wait(lambda: victim.running_requests() > 0, 120, "the run reaches the victim")
    time.sleep(after_s)
    # Strike while the victim is busy, so the figure covers requests caught in flight.
    wait(lambda: victim.running_requests() >= 4, 30, "requests in flight on the victim")
    in_flight = victim.running_requests()
    if action == "stop":
        victim.begin_stop()
    else:
        victim.kill_engine()
    event = time.monotonic()
    reaction = wait(lambda: gateway.healthy() <= 1, 60, "gateway notices")
    return {"in_flight_on_victim": in_flight, "gateway_unhealthy_after_s": round(reaction, 1),
            "event_after_first_request_s": after_s, "_event_mono": event}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--prompts", type=int, default=256)
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--short", action="store_true", help="CI: two replicas, few prompts")
    parser.add_argument(
        "--lab", action="store_true", help="the lab's (scripts/lab up --replicas 2)"
    )
    parser.add_argument("--out", default="gateway-bench.json")
    parser.add_argument("--only", help="comma-separated phase names to run (default: all)")
    args = parser.parse_args()
    if args.short:
        args.prompts, args.concurrency = 32, 8
    work = Path(tempfile.mkdtemp(prefix="glm5-gateway-bench-"))
    python = str(build_bench_serving_venv())
    tokenizer = make_tokenizer(python, work / "tokenizer")
    setup = LabSetup() if args.lab else DirectSetup(work)
    plan = BenchPlan(
        base_url="http://unset", python=python, tokenizer=str(tokenizer), model="glm-5",
        ladder=(args.concurrency,), input_len=args.input_len, output_len=args.output_len,
        num_prompts=args.prompts, warmup_requests=4, api_key=getattr(setup, "api_key", None),
    )  # fmt: skip
    c, n = args.concurrency, args.prompts
    a, b = setup.a, setup.b
    result: dict = {"smg": SMG_VERSION, "policy": ROLE_DEFAULTS["glm5_gateway_policy"],
                    "setup": "lab" if setup.lab else "direct",
                    "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "cpus": os.cpu_count()}  # fmt: skip

    def direct() -> dict:
        return bench(plan, a.engine_url, c, n, work / "direct.jsonl")

    def gateway_one() -> dict:
        with setup.gateway([a]) as gw:
            return bench(plan, gw.url, c, n, work / "gw1.jsonl")

    def gateway_two() -> dict:
        with setup.gateway([a, b]) as gw:
            before = [r.engine_metric("num_requests_total") for r in (a, b)]
            figures = (
                {}
                if args.short
                else {"same_concurrency": bench(plan, gw.url, c, n, work / "gw2.jsonl")}
            )
            figures["double_concurrency"] = bench(plan, gw.url, 2 * c, 2 * n, work / "gw2x.jsonl")
            after = [r.engine_metric("num_requests_total") for r in (a, b)]
            figures["requests_per_replica"] = [
                int(x - y) for x, y in zip(after, before, strict=True)
            ]
            return figures

    def disrupted(action: str):
        def phase() -> dict:
            with setup.gateway([a, b]) as gw:
                box: dict = {}
                thread = threading.Thread(target=lambda: box.update(disrupt(gw, b, action, 5.0)))
                thread.start()
                figures = bench(plan, gw.url, 2 * c, 4 * n, work / f"{action}.jsonl")
                thread.join()
                box.pop("_event_mono", None)
                result = {**figures, **box, "gateway_refusals": gw.refusals()}
                if not setup.lab:
                    b.stop()
                return result

        return phase

    phases = [("direct", direct), ("gateway_1_replica", gateway_one),
              ("gateway_2_replicas", gateway_two),
              ("stop_replica_mid_run", disrupted("stop")),
              ("kill_engine_mid_run", disrupted("kill"))]  # fmt: skip
    if args.short:  # CI: the gateway really routes to two replicas; no disruption
        phases = [(name, phase) for name, phase in phases if name == "gateway_2_replicas"]
    if args.only:
        phases = [(name, phase) for name, phase in phases if name in args.only.split(",")]
    try:
        failed = run_phases(phases, result, Path(args.out))
    finally:
        setup.close()
    one = result.get("gateway_1_replica", {}).get("output_tok_s")
    two = result.get("gateway_2_replicas", {}).get("double_concurrency", {}).get("output_tok_s")
    same = result.get("gateway_2_replicas", {}).get("same_concurrency", {}).get("output_tok_s")
    bare = result.get("direct", {}).get("output_tok_s")
    if one and bare:
        result["gateway_overhead_pct"] = round(100 * (1 - one / bare), 1)
    if one and two:
        result["scaling_2_vs_1_double_concurrency"] = round(two / one, 2)
    if one and same:
        result["scaling_2_vs_1_same_concurrency"] = round(same / one, 2)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
