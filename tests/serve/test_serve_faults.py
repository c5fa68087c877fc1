"""Faults a hostile or unlucky operator causes, against `glm5svc serve` and the test engine.

Each test is a row of the fault table in docs/reliability.md: what the service does,
what systemd is told, what is left running (always nothing).
"""

from __future__ import annotations

import io
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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from glm5svc.child_group import live_group_members
from glm5svc.config import load_config
from glm5svc.http_fetch import fetch_text
from glm5svc.metrics_text import parse_metrics
from glm5svc.serve import supervisor as supervisor_module
from glm5svc.serve.drain import Drain
from glm5svc.serve.events import SignalReceived
from glm5svc.serve.relay import StderrSink
from glm5svc.serve.service import build_service
from testkit.engine import free_port
from tests.serve.conftest import restored_signal_handlers, write_config


def engine_url(process) -> str:
    return f"http://127.0.0.1:{process.config['server']['port']}"


def generate(url: str, max_new_tokens: int, results: list, key: str | None = None) -> None:
    body = {"text": "hello", "sampling_params": {"max_new_tokens": max_new_tokens}}
    request = urllib.request.Request(
        url + "/generate", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            reply = json.loads(response.read())
            results.append(("ok", reply["meta_info"]["completion_tokens"]))
    except Exception as exc:  # noqa: BLE001 - the test reports whatever cut the request
        results.append(("error", f"{type(exc).__name__}: {exc}"))


def engine_metric(url: str, name: str) -> float:
    value = parse_metrics(fetch_text(url + "/metrics", timeout_s=2)).total(f"sglang:{name}")
    assert value is not None, f"no sglang:{name}"
    return value


def wait_gone(pgid: int, timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while (left := live_group_members(pgid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


# ----- the engine never outlives serve ----------------------------------------------------


@pytest.mark.parametrize("where", ["missing", "refused", "over-long"])
def test_notify_socket_failures_are_logged_once_and_never_fatal(serve, tmp_path, where):
    if where == "missing":
        path = str(tmp_path / "no-such-dir" / "notify.sock")
    elif where == "refused":
        path = str(tmp_path / "closed.sock")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(path)
        sock.close()  # the file stays, nobody listens: ECONNREFUSED
    else:
        path = "/tmp/" + "n" * 200  # longer than sockaddr_un allows
    process = serve("load=0.2", env={"NOTIFY_SOCKET": path})
    status = process.wait_ready()
    pgid = status["engine_pid"]
    process.terminate()
    assert process.wait_exit(15) == 0
    assert process.output.count("cannot notify systemd") == 1
    assert "Traceback" not in process.output
    assert live_group_members(pgid) == []


def test_engine_dies_when_serve_is_sigkilled(serve):
    process = serve("load=0.2")
    pgid = process.wait_ready()["engine_pid"]
    assert len(live_group_members(pgid)) >= 2  # the launcher and its scheduler child
    process.proc.send_signal(signal.SIGKILL)
    process.proc.wait(5)
    assert wait_gone(pgid, 10) == []


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGQUIT])
def test_hangup_and_quit_end_the_engine_group(serve, sig):
    process = serve("load=0.2")
    pgid = process.wait_ready()["engine_pid"]
    process.proc.send_signal(sig)
    assert process.wait_exit(15) == 0
    assert live_group_members(pgid) == []
    assert f"received {sig.name}" in process.output


def test_user_signals_are_ignored_deliberately(serve):
    process = serve("load=0.2")
    pgid = process.wait_ready()["engine_pid"]
    process.proc.send_signal(signal.SIGUSR1)
    process.wait_for(lambda: "SIGUSR1: ignored" in process.output, 5, "the ignore message")
    assert process.get("/readyz")[0] == 200
    process.terminate()
    assert process.wait_exit(15) == 0
    assert live_group_members(pgid) == []


def test_an_unexpected_exception_in_the_loop_still_ends_the_group(tmp_path, monkeypatch):
    config = load_config(write_config(tmp_path, "load=0.2"))
    stream = io.StringIO()
    monkeypatch.setattr(supervisor_module, "become_subreaper", lambda: False)
    service = build_service(config, sink=StderrSink(stream))
    supervisor = service.supervisor

    def explode(now):
        raise OverflowError("timestamp too large to convert to C _PyTime_t")

    monkeypatch.setattr(supervisor, "_serving_step", explode)
    with restored_signal_handlers(), pytest.raises(OverflowError):
        service.run()
    assert live_group_members(supervisor.engine.pid) == []
    assert "ended the server's process group on exit: killed" in stream.getvalue()


# ----- READY means our engine --------------------------------------------------------------


class _ImpostorHandler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _reply(self):
        body = json.dumps({"text": "I am not your engine", "meta_info": {}}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _reply  # noqa: N815 - stdlib names


def test_another_server_on_the_engine_port_is_never_taken_for_ours(serve, notify_socket):
    port = free_port()
    impostor = ThreadingHTTPServer(("127.0.0.1", port), _ImpostorHandler)
    threading.Thread(target=impostor.serve_forever, daemon=True).start()
    try:
        process = serve("load=1", server={"port": port})
        code = process.wait_exit(30)
    finally:
        impostor.shutdown()
        impostor.server_close()
    assert "READY=1" not in notify_socket.assignments()
    assert code == 78  # restarting cannot help while another server holds the port
    assert "[engine-port-in-use]" in process.output
    assert f"port {port} is held by pid {os.getpid()}" in process.output


def test_a_frozen_engine_leaves_rotation_within_a_probe_interval(serve):
    process = serve("load=0.2", probe_interval_s=0.3, probe_timeout_s=0.5, wedge_window_s=120)
    pgid = process.wait_ready()["engine_pid"]
    os.killpg(pgid, signal.SIGSTOP)
    try:
        stopped = time.monotonic()
        code, body = process.wait_for(
            lambda: (r := process.get("/readyz"))[0] == 503 and r, 10, "readyz 503"
        )
        dropped_after = time.monotonic() - stopped
        assert "frozen" in body
        assert process.get("/livez")[0] == 200  # the service itself is fine
    finally:
        os.killpg(pgid, signal.SIGCONT)
    process.wait_for(lambda: process.get("/readyz")[0] == 200, 10, "back in rotation")
    print(f"/readyz 503 {dropped_after:.2f} s after SIGSTOP (probe interval 0.3 s)")


def test_failing_probes_without_progress_leave_rotation_before_the_wedge_window(serve):
    process = serve(
        "load=0.2,wedge-after=0.5", probe_interval_s=0.3, probe_timeout_s=0.5, wedge_window_s=120
    )
    process.wait_ready()
    code, body = process.wait_for(
        lambda: (r := process.get("/readyz"))[0] == 503 and r, 15, "readyz 503"
    )
    assert "unresponsive" in body
    status = process.status()
    assert status["wedged"] is False  # the restart decision waits for wedge_window_s
    assert status["probes"]["consecutive_failures"] >= 3


def test_engine_death_clears_readiness_at_once(serve):
    # A helper in the group keeps the output open after the launcher dies, as children
    # tearing down CUDA contexts do: readiness must not wait for the output to close.
    process = serve("load=0.2,linger-output=30")
    pgid = process.wait_ready()["engine_pid"]
    os.kill(pgid, signal.SIGKILL)  # the launcher; serve reaps it
    killed = time.monotonic()
    answers = []
    while time.monotonic() - killed < 3 and process.proc.poll() is None:
        try:
            answers.append((time.monotonic() - killed, process.get("/readyz", timeout=1)[0]))
        except OSError:
            break  # serve has exited and closed its listener
        time.sleep(0.02)
    # main answered 200 for about 2 s after the death; a few loop ticks are allowed.
    late_ready = [(round(t, 2), code) for t, code in answers if code == 200 and t > 0.3]
    assert late_ready == []
    assert process.wait_exit(15) == 1
    assert wait_gone(pgid, 5) == []


# ----- the drain -------------------------------------------------------------------------


def test_stop_drains_the_requests_in_flight(serve):
    # 8 requests of 250 tokens: about 2.5 s of decoding at the test engine's step time.
    process = serve("load=0.2", drain_timeout_s=30)
    pgid = process.wait_ready()["engine_pid"]
    url = engine_url(process)
    results: list = []
    clients = [
        threading.Thread(target=generate, args=(url, 250, results), daemon=True) for _ in range(8)
    ]
    for client in clients:
        client.start()
    process.wait_for(lambda: engine_metric(url, "num_running_reqs") == 8, 10, "8 running")
    started = time.monotonic()
    process.terminate()
    code, body = process.wait_for(
        lambda: (r := process.get("/readyz"))[0] == 503 and r, 2, "readyz 503"
    )
    assert "draining" in body
    assert process.status()["draining"] is True
    # As sglang 0.5.11 did on the H200: requests sent straight to the engine port while it
    # drains are still admitted and finished; only the gateway and /readyz keep them away.
    late = [
        threading.Thread(target=generate, args=(url, 250, results), daemon=True) for _ in range(4)
    ]
    for client in late:
        client.start()
    assert process.wait_exit(30) == 0
    drained_in = time.monotonic() - started
    for client in clients + late:
        client.join(10)
    assert results == [("ok", 250)] * 12, results
    assert live_group_members(pgid) == []
    assert "SIGTERM received. signum=None frame=None. Draining requests" in process.output
    assert "crashed with exit code" not in process.output
    finished = next(line for line in process.output.splitlines() if "drain finished" in line)
    assert "requests in flight when the stop came: 8, most seen while draining: 12" in finished
    assert "the launcher exited with status 0; processes left: 0" in finished
    print(f"drain: 8 in flight + 4 sent after the stop, 12 completed, {drained_in:.2f} s")


# A launcher whose main thread is gone while another still runs: its group looks empty
# (the leader shows as a zombie) before waitpid can reap it, as sglang's many-threaded
# launcher did on the H200 (its drain ended with "server exit status None").
LINGERING_LAUNCHER = """\
import ctypes, os, threading, time
def finish():
    time.sleep(0.8)
    os._exit(0)
threading.Thread(target=finish).start()
ctypes.CDLL(None).pthread_exit(None)
"""


def test_drain_report_waits_for_the_launchers_exit_status(tmp_path, monkeypatch):
    launcher = {"command": [sys.executable, "-c", LINGERING_LAUNCHER]}
    config = load_config(write_config(tmp_path, "load=0.2", launcher, drain_timeout_s=30))
    monkeypatch.setattr(supervisor_module, "become_subreaper", lambda: False)
    out = io.StringIO()
    service = build_service(config, sink=StderrSink(out))
    service.stop()  # only the supervisor's drain step is under test here
    supervisor = service.supervisor
    supervisor.engine.start()
    pgid = supervisor.engine.pid
    deadline = time.monotonic() + 5
    while live_group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert supervisor.engine.group_members() == [] and supervisor.engine.poll() is None
    now = time.monotonic()
    # 64 in flight at the stop, 72 once requests sent to the engine port joined, 8 last.
    supervisor._drain = Drain("SIGTERM", now - 9, now + 21, 64, 8, 72)
    supervisor.output_closed.set()
    supervisor._drain_step(now)
    assert supervisor._exit_status == 0
    finished = next(line for line in out.getvalue().splitlines() if "drain finished" in line)
    assert finished == (
        "glm5svc: drain finished (drained) in 9.0 s: requests in flight when the stop came: 64, "
        "most seen while draining: 72, at the last reading: 8; the launcher exited with "
        "status 0; processes left: 0"
    )
    assert supervisor.state.engine_exit_status == 0
    assert supervisor.state.drain.most_in_flight == 72


def test_livez_stays_alive_during_a_drain_longer_than_the_stale_limit(tmp_path, monkeypatch):
    """In process, with the liveness limit shortened: draining is alive."""
    config = load_config(write_config(tmp_path, "load=0.2,ignore-sigterm", drain_timeout_s=2.0))
    monkeypatch.setattr(supervisor_module, "become_subreaper", lambda: False)
    service = build_service(config, sink=StderrSink(io.StringIO()), loop_stale_after_s=0.5)
    supervisor = service.supervisor
    livez: list[int] = []

    def watch():
        deadline = time.monotonic() + 30
        while not supervisor.state.ready and time.monotonic() < deadline:
            time.sleep(0.05)
        supervisor.events.put(SignalReceived(signal.SIGTERM))
        while not supervisor.state.draining:
            time.sleep(0.01)
        while supervisor.state.draining and supervisor.state.phase.value == "draining":
            url = f"http://127.0.0.1:{config.service.listen_port}/livez"
            try:
                with urllib.request.urlopen(url, timeout=1) as response:
                    livez.append(response.status)
            except urllib.error.HTTPError as exc:
                livez.append(exc.code)
            time.sleep(0.1)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    with restored_signal_handlers():
        assert service.run() == 0
    watcher.join(5)
    assert len(livez) >= 10  # the 2 s drain, four times the stale limit
    assert set(livez) == {200}


def test_a_missing_server_program_is_a_clear_exit_78(tmp_path):
    config_path = write_config(tmp_path, "load=0.2")
    text = config_path.read_text().replace(sys.executable, str(tmp_path / "no-python"))
    config_path.write_text(text)
    run = subprocess.run(
        [sys.executable, "-m", "glm5svc", "--config", str(config_path), "serve"],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "GLM5SVC_LOG_TARGET": "stderr", "NOTIFY_SOCKET": ""},
    )  # fmt: skip
    assert run.returncode == 78, run.stderr[-2000:]
    assert "cannot start the server" in run.stderr and "server.python" in run.stderr
    assert "Traceback" not in run.stderr
