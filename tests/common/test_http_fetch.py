"""glm5svc/http_fetch.py against a local HTTP server: answers, errors, and no key in them."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from glm5svc.http_fetch import FetchError, bearer, fetch_json, fetch_text, post_json
from testkit.engine import free_port

KEY = "sk-secret-key-123"


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _send(self, code: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/json":
            self._send(200, b'{"ready": true}')
        elif self.path == "/auth":
            seen = self.headers.get("Authorization")
            self._send(200 if seen == f"Bearer {KEY}" else 401, json.dumps({"seen": seen}).encode())
        elif self.path == "/text":
            self._send(200, "caf\u00e9 \xff".encode("latin-1"), "text/plain")
        elif self.path == "/busy":
            self._send(503, b'{"status": "no healthy workers"}')
        else:
            self._send(200, b"<html>not json</html>", "text/html")

    def do_POST(self):
        length = int(self.headers["Content-Length"])
        body = json.loads(self.rfile.read(length))
        kind = self.headers.get("Content-Type")
        self._send(200, json.dumps({"echo": body, "type": kind}).encode())


@pytest.fixture(scope="module")
def base():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_json_text_and_post(base):
    assert fetch_json(base + "/json", timeout_s=5) == {"ready": True}
    assert fetch_text(base + "/text", timeout_s=5) == "caf\ufffd \ufffd"
    reply = post_json(base + "/echo", {"n": 1}, timeout_s=5)
    assert reply == {"echo": {"n": 1}, "type": "application/json"}
    assert fetch_json(base + "/auth", timeout_s=5, headers=bearer(KEY))["seen"] == f"Bearer {KEY}"


def test_an_http_error_keeps_status_and_body_and_never_the_key(base):
    with pytest.raises(FetchError) as caught:
        fetch_json(base + "/busy", timeout_s=5, headers=bearer(KEY))
    err = caught.value
    assert (err.status, err.cause, str(err)) == (503, "HTTP 503", f"{base}/busy: HTTP 503")
    assert json.loads(err.body) == {"status": "no healthy workers"}
    with pytest.raises(FetchError) as caught:
        fetch_json(base + "/auth", timeout_s=5, headers=bearer("wrong-key"))
    assert "wrong-key" not in str(caught.value) and caught.value.status == 401


def test_not_json_and_unreachable(base):
    with pytest.raises(FetchError, match=r"/html: not JSON .*<html>") as caught:
        fetch_json(base + "/html", timeout_s=5)
    assert caught.value.status is None
    url = f"http://127.0.0.1:{free_port()}/status"
    with pytest.raises(FetchError) as caught:
        fetch_text(url, timeout_s=5)
    assert str(caught.value) == f"{url}: connection refused"
    assert bearer(None) == {} and bearer("") == {}
