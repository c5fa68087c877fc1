"""`glm5svc status` against answers that are not a glm5svc status; the bounded listener."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from glm5svc.cli import main
from glm5svc.commands.status import render
from glm5svc.records import StatusDocument
from glm5svc.serve.listener import MAX_CONNECTIONS, REQUEST_TIMEOUT_S
from testkit.engine import free_port

REPO = Path(__file__).resolve().parents[2]


def answering(body: bytes):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):  # noqa: N802 - stdlib name
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


@pytest.mark.parametrize(
    ("body", "code", "said"),
    [
        (b"[1, 2]", 4, "a list, not an object"),
        (b'{"ready": "no", "phase": "serving"}', 4, "ready is 'no', expected a bool"),
        (b'{"ready": true, "phase": "serving", "probes": [1]}', 4, "probes is a list"),
        (b'{"schema": "glm5svc.status/9", "ready": true, "phase": "x"}', 4, "upgrade glm5svc"),
        (b"<html>nginx</html>", 4, "not JSON"),
        (b'{"ready": false, "phase": "loading"}', 1, "ready: no"),
        (b'{"ready": true, "phase": "serving"}', 0, "ready: yes"),
    ],
)
def test_status_on_answers_that_are_not_a_glm5svc_status(tmp_path, capsys, body, code, said):
    port = free_port()
    server = ThreadingHTTPServer(("127.0.0.1", port), answering(body))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    config = tmp_path / "glm5.yaml"
    config.write_text(f"service: {{listen_host: 127.0.0.1, listen_port: {port}}}\n")
    try:
        exit_status = main(["--config", str(config), "status"])  # no traceback escapes
    finally:
        server.shutdown()
        server.server_close()
    captured = capsys.readouterr()
    assert exit_status == code, captured
    # A status (ready or not) on stdout; why it is not one on stderr.
    assert said in (captured.out if code in (0, 1) else captured.err)


def test_unreachable_status_says_how_to_recover_from_the_start_limit(tmp_path):
    config = tmp_path / "glm5.yaml"
    config.write_text(f"service: {{listen_host: 127.0.0.1, listen_port: {free_port()}}}\n")
    run = subprocess.run(
        [sys.executable, "-m", "glm5svc", "--config", str(config), "status"],
        capture_output=True, text=True, cwd=REPO, timeout=30,
    )  # fmt: skip
    assert run.returncode == 3
    assert "systemctl reset-failed glm5" in run.stderr and not run.stdout


def _threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no Threads line")


def test_half_sent_requests_cannot_pile_up_threads(serve):
    process = serve("load=0.2")
    process.wait_ready()
    before = _threads(process.proc.pid)
    host, port = process.listen_url.removeprefix("http://").split(":")
    held = []
    for _ in range(300):
        sock = socket.create_connection((host, int(port)))
        sock.sendall(b"GET /status HTTP/1.1\r\nHost: x\r\n")  # never finished
        held.append(sock)
    time.sleep(0.5)
    during = _threads(process.proc.pid)
    assert during <= before + MAX_CONNECTIONS + 2, (before, during)
    # The held connections time out; the listener answers again afterwards.
    time.sleep(REQUEST_TIMEOUT_S + 1)
    assert process.get("/livez")[0] == 200
    for sock in held:
        sock.close()
    print(f"threads: {before} before, {during} with 300 half-sent requests")


@pytest.mark.parametrize(
    ("benchmark", "said"),
    [
        ({"error": "RuntimeError: bench_serving missing"}, "failed: RuntimeError: bench_serving"),
        (
            {"stopped_reason": "server died", "summary": {}, "results_dir": "/r/1", "levels": []},
            "stopped: server died (results: /r/1)",
        ),
        (
            {"summary": {"total_throughput": 1234.5, "concurrency": 64.0}, "levels": []},
            "total_throughput=1,234.5, concurrency=64.0",
        ),
        ({"summary": {}, "levels": []}, "no level measured"),
    ],
)
def test_status_says_the_post_start_benchmark_in_words(benchmark, said):
    document = {"ready": True, "phase": "serving", "benchmark": benchmark}
    text = render(StatusDocument.from_dict(document))
    line = next(x for x in text.splitlines() if "post-start benchmark" in x)
    assert said in line
    assert "{" not in text and "'" not in line  # never a raw Python dict
