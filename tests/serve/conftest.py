"""Run `glm5svc serve` for real on the test engine, with a real notify socket."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from glm5svc.serve.events import SignalReceived
from glm5svc.serve.reporters import IGNORED_SIGNALS, STOP_SIGNALS
from testkit.engine import TEST_ENGINE, free_port
from testkit.timing import scaled

REPO = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def restored_signal_handlers():
    """Supervisor.run() in the test process installs its handlers: put pytest's back."""
    signals = (*STOP_SIGNALS, *IGNORED_SIGNALS, signal.SIGCHLD)
    saved = {sig: signal.getsignal(sig) for sig in signals}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def run_in_process(service, until, timeout: float = 60.0) -> int:
    """Run a built service (glm5svc.serve.service) in this process, as `glm5svc serve` does,
    and send it SIGTERM's event once `until(state)` holds (or after `timeout`); its exit
    status."""

    def watch():
        deadline = time.monotonic() + timeout
        while not until(service.supervisor.state) and time.monotonic() < deadline:
            time.sleep(0.05)
        service.supervisor.events.put(SignalReceived(signal.SIGTERM))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    with restored_signal_handlers():
        status = service.run()
    watcher.join(5)
    return status


def write_config(tmp_path: Path, mode: str, server: dict | None = None, **service) -> Path:
    settings = {
        "listen_host": "127.0.0.1",
        "listen_port": free_port(),
        "run_preflight": False,
        # Generous: the suite runs in several workers on two cores (scripts/test); the tests
        # of a stall or a timeout set their own.
        "load_stall_timeout_s": 45,
        "startup_timeout_s": 90,
        "probe_interval_s": 0.3,
        "probe_timeout_s": 1,
        "wedge_window_s": 1.5,
        "drain_timeout_s": 3,
        "results_dir": str(tmp_path / "results"),
    }
    settings.update(service)
    config = {
        "server": {
            "host": "127.0.0.1",
            "port": free_port(),
            # How tests run the test engine instead of `python -m sglang.launch_server`.
            "command": [sys.executable, str(TEST_ENGINE), "--test-mode", mode],
        },
        "service": settings,
        "telemetry": {"enabled": False},
        "benchmark": {"post_start": {"enabled": False}},
    }
    config["server"].update(server or {})
    path = tmp_path / "glm5.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


class NotifyListener:
    """An AF_UNIX SOCK_DGRAM socket standing in for systemd's notify socket."""

    def __init__(self, path: Path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.1)
        self.messages: list[tuple[float, str]] = []
        self._stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self._stop:
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            self.messages.append((time.monotonic(), data.decode()))

    def assignments(self) -> list[str]:
        """Every KEY=VALUE sent, in order (a datagram may carry several)."""
        return [part for _, message in self.messages for part in message.split("\n")]

    def close(self):
        self._stop = True
        self.thread.join(1)
        self.sock.close()


class ServeProcess:
    def __init__(self, config_path: Path, env: dict[str, str]):
        self.config = yaml.safe_load(config_path.read_text())
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "glm5svc", "--config", str(config_path), "serve"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=REPO,
        )
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for raw in self.proc.stdout:
            self.lines.append(raw.decode("utf-8", "replace").rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    @property
    def listen_url(self) -> str:
        service = self.config["service"]
        return f"http://{service['listen_host']}:{service['listen_port']}"

    def get(self, path: str, timeout: float = 2.0) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.listen_url + path, timeout=timeout) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def status(self) -> dict:
        return json.loads(self.get("/status")[1])

    def wait_for(self, predicate, timeout: float, what: str):
        timeout = scaled(timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                value = predicate()
            except OSError:
                value = None
            if value:
                return value
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"serve exited ({self.proc.returncode}) waiting for {what}:\n"
                    f"{self.output[-4000:]}"
                )
            time.sleep(0.05)
        raise AssertionError(
            f"timed out after {timeout} s waiting for {what}:\n{self.output[-4000:]}"
        )

    def wait_ready(self, timeout: float = 30.0) -> dict:
        return self.wait_for(lambda: (s := self.status()).get("ready") and s, timeout, "ready")

    def wait_exit(self, timeout: float) -> int:
        timeout = scaled(timeout)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"serve still running after {timeout} s:\n{self.output[-4000:]}"
            ) from None
        self.reader.join(5)
        return code

    def terminate(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)


@pytest.fixture
def notify_socket(tmp_path):
    listener = NotifyListener(tmp_path / "notify.sock")
    yield listener
    listener.close()


@pytest.fixture
def serve(tmp_path, notify_socket):
    """serve(mode, watchdog_usec=None, server=None, env=None, **service) -> ServeProcess.

    `server`: extra server.* settings; `env`: environment overrides for serve itself.
    Killed at teardown.
    """
    started: list[ServeProcess] = []

    def start(
        mode: str,
        watchdog_usec: int | None = None,
        server: dict | None = None,
        env: dict | None = None,
        **service,
    ) -> ServeProcess:
        environ = {
            k: v for k, v in os.environ.items() if k not in ("WATCHDOG_USEC", "WATCHDOG_PID")
        }
        environ["NOTIFY_SOCKET"] = str(notify_socket.path)
        environ["GLM5SVC_LOG_TARGET"] = "stderr"
        environ["RUNTIME_DIRECTORY"] = str(tmp_path / "run")
        if watchdog_usec:
            environ["WATCHDOG_USEC"] = str(watchdog_usec)
        environ.update(env or {})
        process = ServeProcess(write_config(tmp_path, mode, server, **service), environ)
        started.append(process)
        return process

    yield start
    for process in started:
        process.terminate()
        try:
            process.proc.wait(15)
        except subprocess.TimeoutExpired:
            process.proc.kill()
            process.proc.wait(5)
