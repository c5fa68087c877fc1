"""Figures for docs/reliability.md: `glm5svc serve` on the test engine under faults.

- drain: requests in flight when serve gets SIGTERM; how many complete, how many fail,
  seconds from SIGTERM to serve's exit, processes of the engine group left;
- readyz after engine death: seconds from SIGKILL of the engine launcher to the first
  /readyz that is not 200 (a helper keeps the output pipe open, as CUDA teardown does);
- readyz after a freeze: seconds from SIGSTOP of the engine group to /readyz 503;
- serve SIGKILLed: seconds until no process of the engine group is left;
- relay: CPU seconds to relay one very long line (linear: cut at 32 KiB).

    .venv/bin/python bench/reliability.py [--requests 32] [--out reliability.json]
    .venv/bin/python bench/reliability.py --short   (small numbers: CI checks it still runs)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import yaml  # noqa: E402

from bench.phases import run_phases  # noqa: E402
from glm5svc.child_group import live_group_members  # noqa: E402
from glm5svc.http_fetch import FetchError, fetch_bytes, fetch_json, fetch_text, post_json  # noqa: E402
from glm5svc.metrics_text import parse_metrics  # noqa: E402
from glm5svc.serve.relay import OutputReader  # noqa: E402
from testkit.engine import TEST_ENGINE, free_port  # noqa: E402
from testkit.timing import scaled  # noqa: E402

PROBE_INTERVAL_S = 0.5


class Serve:
    """`glm5svc serve` with the test engine, its log kept, its listener polled."""

    def __init__(self, workdir: Path, mode: str, **service):
        self.listen = free_port()
        self.port = free_port()
        settings = {
            "listen_host": "127.0.0.1", "listen_port": self.listen, "run_preflight": False,
            "probe_interval_s": PROBE_INTERVAL_S, "probe_timeout_s": 1, "wedge_window_s": 300,
            "drain_timeout_s": 60, "results_dir": str(workdir / "results"), **service,
        }  # fmt: skip
        config = {
            "server": {
                "host": "127.0.0.1", "port": self.port,
                "command": [sys.executable, str(TEST_ENGINE), "--test-mode", mode],
            },
            "service": settings,
            "telemetry": {"enabled": False},
            "benchmark": {"post_start": {"enabled": False}},
        }  # fmt: skip
        path = workdir / f"glm5-{self.listen}.yaml"
        path.write_text(yaml.safe_dump(config))
        env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC")}
        env.update(GLM5SVC_LOG_TARGET="stderr", RUNTIME_DIRECTORY=str(workdir / "run"))
        self.log = open(workdir / f"serve-{self.listen}.log", "w")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "glm5svc", "--config", str(path), "serve"],
            stdout=self.log, stderr=subprocess.STDOUT, cwd=REPO, env=env,
        )  # fmt: skip

    def get(self, path: str) -> int:
        url = f"http://127.0.0.1:{self.listen}{path}"
        try:
            return fetch_bytes(url, timeout_s=2)[0]
        except FetchError as exc:
            if exc.status is None:
                raise
            return exc.status

    def status(self) -> dict:
        return fetch_json(f"http://127.0.0.1:{self.listen}/status", timeout_s=2)

    def wait_ready(self, timeout: float = 60) -> int:
        deadline = time.monotonic() + scaled(timeout)
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve exited {self.proc.returncode}")
            try:
                status = self.status()
                if status["ready"]:
                    return status["engine_pid"]
            except FetchError:
                pass
            time.sleep(0.05)
        raise RuntimeError("serve not ready")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def generate(port: int, tokens: int, results: list) -> None:
    body = {"text": "hi", "sampling_params": {"max_new_tokens": tokens}}
    try:
        reply = post_json(f"http://127.0.0.1:{port}/generate", body, timeout_s=120)
        done = reply["meta_info"]["completion_tokens"] == tokens
        results.append("completed" if done else "short")
    except Exception:  # noqa: BLE001 - a cut request is the figure, not an error
        results.append("failed")


def running(port: int) -> float:
    text = fetch_text(f"http://127.0.0.1:{port}/metrics", timeout_s=2)
    return parse_metrics(text).total("sglang:num_running_reqs") or 0.0


def until(predicate, timeout: float, step: float = 0.005) -> float | None:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if predicate():
            return time.monotonic() - started
        time.sleep(step)
    return None


def drain(workdir: Path, requests: int, tokens: int) -> dict:
    serve = Serve(workdir, "load=0.2")
    try:
        pgid = serve.wait_ready()
        results: list[str] = []
        clients = [
            threading.Thread(target=generate, args=(serve.port, tokens, results))
            for _ in range(requests)
        ]
        for client in clients:
            client.start()
        until(lambda: running(serve.port) >= requests, 30)
        in_flight = int(running(serve.port))
        sent = time.monotonic()
        serve.proc.send_signal(signal.SIGTERM)
        readyz_503 = until(lambda: serve.get("/readyz") == 503, 5)
        code = serve.proc.wait(120)
        seconds = time.monotonic() - sent
        for client in clients:
            client.join(30)
        return {
            "in_flight": in_flight,
            "completed": results.count("completed"),
            "failed": len(results) - results.count("completed"),
            "drain_s": round(seconds, 3),
            "readyz_503_after_s": round(readyz_503, 3) if readyz_503 is not None else None,
            "serve_exit": code,
            "processes_left": len(live_group_members(pgid)),
        }
    finally:
        serve.close()


def readyz_after_engine_death(workdir: Path) -> dict:
    serve = Serve(workdir, "load=0.2,linger-output=30")
    try:
        pgid = serve.wait_ready()
        os.kill(pgid, signal.SIGKILL)
        dropped = until(lambda: _not_ready(serve), 10)
        serve.proc.wait(30)
        left = until(lambda: not live_group_members(pgid), 15)
        return {
            "readyz_not_200_after_s": round(dropped, 3) if dropped is not None else None,
            "serve_exit": serve.proc.returncode,
            "processes_left": len(live_group_members(pgid)),
            "group_gone_after_s": round(left, 3) if left is not None else None,
        }
    finally:
        serve.close()


def readyz_after_freeze(workdir: Path) -> dict:
    serve = Serve(workdir, "load=0.2")
    try:
        pgid = serve.wait_ready()
        os.killpg(pgid, signal.SIGSTOP)
        try:
            dropped = until(lambda: _not_ready(serve), 20)
        finally:
            os.killpg(pgid, signal.SIGCONT)
        back = until(lambda: serve.get("/readyz") == 200, 20)
        serve.proc.send_signal(signal.SIGTERM)
        serve.proc.wait(60)
        return {
            "probe_interval_s": PROBE_INTERVAL_S,
            "readyz_503_after_s": round(dropped, 3) if dropped is not None else None,
            "ready_again_after_sigcont_s": round(back, 3) if back is not None else None,
            "processes_left": len(live_group_members(pgid)),
        }
    finally:
        serve.close()


def serve_sigkilled(workdir: Path) -> dict:
    serve = Serve(workdir, "load=0.2")
    try:
        pgid = serve.wait_ready()
        before = len(live_group_members(pgid))
        serve.proc.send_signal(signal.SIGKILL)
        serve.proc.wait(10)
        gone = until(lambda: not live_group_members(pgid), 15)
        return {
            "engine_processes_before": before,
            "group_gone_after_s": round(gone, 3) if gone is not None else None,
            "processes_left": len(live_group_members(pgid)),
        }
    finally:
        serve.close()


def relay_long_line(megabytes: int) -> dict:
    read_fd, write_fd = os.pipe()
    lines: list[str] = []
    done = threading.Event()
    reader = OutputReader(read_fd, lines.append, done.set)
    cpu = time.process_time()
    reader.start()
    with os.fdopen(write_fd, "wb") as pipe:
        pipe.write(b"x" * (megabytes * 2**20) + b"\nnext\n")
    done.wait(120)
    os.close(read_fd)
    return {
        "line_mib": megabytes,
        "cpu_s": round(time.process_time() - cpu, 3),
        "lines": len(lines),
        "kept_chars": len(lines[0]),
    }


def _not_ready(serve: Serve) -> bool:
    try:
        return serve.get("/readyz") != 200
    except FetchError:
        return True  # serve has exited: nothing answers 200


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=300)
    parser.add_argument("--line-mib", type=int, default=16)
    parser.add_argument("--short", action="store_true", help="small numbers (CI)")
    parser.add_argument("--out", type=Path, default=Path("reliability.json"))
    args = parser.parse_args(argv)
    if args.short:
        args.requests, args.tokens, args.line_mib = 4, 60, 1
    workdir = Path(tempfile.mkdtemp(prefix="glm5svc-reliability-"))
    result: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    phases = [
        ("drain", lambda: drain(workdir, args.requests, args.tokens)),
        ("readyz_after_engine_death", lambda: readyz_after_engine_death(workdir)),
        ("readyz_after_freeze", lambda: readyz_after_freeze(workdir)),
        ("serve_sigkilled", lambda: serve_sigkilled(workdir)),
        ("relay_long_line", lambda: relay_long_line(args.line_mib)),
    ]
    failed = run_phases(phases, result, args.out, lambda name, r: print(json.dumps(r[name])))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
