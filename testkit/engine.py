"""Start the test engine (testkit/sglang_test_engine.py) on a free local port."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

from glm5svc.http_fetch import FetchError, fetch_bytes

TEST_ENGINE = Path(__file__).resolve().parent / "sglang_test_engine.py"
# benchmark.* for steady windows on the test engine (the defaults are for GLM-5's target,
# minutes a window): half-second windows, two per level, a warm-up of at most 3 s whose
# windows agree within 50 %.
SHORT_STEADY = {"window_s": 0.5, "windows": 2, "warmup_max_s": 3.0, "warmup_tolerance_pct": 50.0}


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listened on a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_healthy(base_url: str, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"test engine exited with {proc.returncode}")
        try:
            if fetch_bytes(base_url + "/health", timeout_s=2)[0] == 200:
                return
        except FetchError:
            pass
        time.sleep(0.1)
    raise RuntimeError("test engine did not become healthy")


def stop_process(proc: subprocess.Popen | None, grace_s: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after `grace_s`; nothing when it has ended already."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class EngineHandle:
    def __init__(self, proc: subprocess.Popen, base_url: str):
        self.proc = proc
        self.base_url = base_url

    def stop(self) -> None:
        stop_process(self.proc)


def start_engine(log_path: Path, *extra: str) -> EngineHandle:
    """The test engine serving model "glm-5" after a 0.1 s load; its log goes to log_path."""
    port = free_port()
    command = [
        sys.executable, str(TEST_ENGINE), "--host", "127.0.0.1", "--port", str(port),
        "--served-model-name", "glm-5", "--test-mode", "load=0.1", *extra,
    ]  # fmt: skip
    with open(log_path, "w") as log:  # the child keeps its own descriptor
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    handle = EngineHandle(proc, f"http://127.0.0.1:{port}")
    try:
        wait_healthy(handle.base_url, proc)
    except BaseException:
        handle.stop()
        raise
    return handle
