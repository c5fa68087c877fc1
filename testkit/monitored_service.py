"""`glm5svc serve` over the test engine and two fake GPUs, run as systemd runs glm5.service.

What tests/monitoring and testkit/dashboard_render.py point a real Prometheus at: the service's
listener (GPU telemetry from testkit's fake NVML), the engine's /metrics, requests that
give the engine's histograms and counters something to count, and an optional post-start
benchmark (the real bench_serving) against a baseline file, for the glm5svc_bench_* gauges.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import yaml

from glm5svc.http_fetch import FetchError, fetch_bytes
from testkit.engine import TEST_ENGINE, free_port, stop_process
from testkit.prometheus import wait_for

REPO = Path(__file__).resolve().parents[1]
FAKE_GPUS = 2
BENCH_LEVEL = 4


def write_config(
    folder: Path,
    bench_python: str | None = None,
    tokenizer: str | None = None,
    load_s: float = 0.2,
) -> Path:
    """The service's configuration; with bench_python and tokenizer, a post-start benchmark
    of one short level, judged against a baseline file written beside it. load_s: the test
    engine's weight loading (a longer cold start)."""
    benchmark: dict = {"post_start": {"enabled": False}}
    if bench_python and tokenizer:
        baseline = folder / "baseline.json"
        baseline.write_text(
            json.dumps(
                {
                    "schema": "glm5svc.bench.baseline/1",
                    "name": "monitoring-test",
                    "levels": {str(BENCH_LEVEL): {"total_throughput": 1000.0}},
                }
            )
        )
        benchmark = {
            "python": bench_python,
            "baseline": str(baseline),
            "input_len": 16,
            "output_len": 8,
            "warmup_requests": 0,
            "steady": False,
            "post_start": {"enabled": True, "ladder": [BENCH_LEVEL], "num_prompts_per_level": 8},
        }
    config = {
        "server": {
            "host": "127.0.0.1",
            "port": free_port(),
            "command": [sys.executable, str(TEST_ENGINE), "--test-mode", f"load={load_s}"],
        },
        "model": {"tokenizer_path": tokenizer},
        "service": {
            "listen_host": "127.0.0.1",
            "listen_port": free_port(),
            "run_preflight": False,
            "probe_interval_s": 0.3,
            "probe_timeout_s": 1,
            "results_dir": str(folder / "results"),
        },
        "telemetry": {"enabled": True, "period_s": 0.5},
        "tuning": {"radix_cache": "on"},  # prefix-cache hits for sglang:cached_tokens_total
        "benchmark": benchmark,
    }
    path = folder / "glm5.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


class ServeUnit:
    """One `glm5svc serve` at a time, started again on demand (systemd's Restart=)."""

    def __init__(self, config_path: Path):
        self.config_path = config_path
        config = yaml.safe_load(config_path.read_text())
        self.listener = f"127.0.0.1:{config['service']['listen_port']}"
        self.engine = f"127.0.0.1:{config['server']['port']}"
        self.log = config_path.parent / "serve.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> ServeUnit:
        command = [
            sys.executable, "-m", "testkit.with_fake_nvml", str(FAKE_GPUS),
            "-m", "glm5svc", "--config", str(self.config_path), "serve",
        ]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        with open(self.log, "ab") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, cwd=REPO,
            )  # fmt: skip
        return self

    def status(self) -> dict | None:
        try:
            return json.loads(fetch_bytes(f"http://{self.listener}/status", timeout_s=2)[1])
        except (FetchError, ValueError):
            return None

    def wait_ready(self, timeout_s: float = 60) -> dict:
        def ready():
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve exited with {self.proc.returncode}: {self.output()}")
            status = self.status()
            return status if status and status.get("ready") else None

        return wait_for(ready, timeout_s, "glm5svc serve to be ready")

    def wait_benchmark(self, timeout_s: float = 90) -> dict:
        def finished():
            status = self.status() or {}
            return status.get("benchmark") if status.get("phase") == "serving" else None

        return wait_for(finished, timeout_s, "the post-start benchmark to finish")

    def kill_engine(self) -> None:
        """SIGKILL the engine's launcher, as a crash would end it."""
        os.kill(self.status()["engine_pid"], signal.SIGKILL)

    def wait_exited(self, timeout_s: float = 30) -> int:
        """Its exit status, once it exited."""
        wait_for(lambda: self.proc.poll() is not None, timeout_s, "serve to exit")
        return self.proc.returncode

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        stop_process(self.proc, 30)


def send_requests(engine: str, count: int, max_new_tokens: int = 16) -> None:
    """`count` generations at once, with one shared prompt (prefix-cache hits after the
    first), each waited for."""
    body = json.dumps(
        {"input_ids": list(range(64)), "sampling_params": {"max_new_tokens": max_new_tokens}}
    ).encode()
    errors: list[Exception] = []

    def one():
        try:
            fetch_bytes(f"http://{engine}/generate", timeout_s=30, method="POST", data=body)
        except FetchError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise RuntimeError(f"{len(errors)} of {count} requests failed: {errors[0]}")
