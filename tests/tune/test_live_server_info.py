"""The live cap's read-back on a /server_info of another shape (not an object, no
internal_states, ranks that disagree, a value that is not a whole number) and a
/set_internal_state that fails: each a LiveSetError saying what the engine answered."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from glm5svc.tune.live_knobs import LiveSetError, set_live

CAP = "tuning.max_running_requests"
ARG = "pp_max_micro_batch_size"


def serve(server_info: bytes, set_status: int = 200, set_body: bytes = b"[true]"):
    class Engine(BaseHTTPRequestHandler):
        def _answer(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):  # noqa: N802 - http.server's name
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self._answer(set_status, set_body)

        def do_GET(self):  # noqa: N802
            self._answer(200, server_info)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Engine)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def live_error(server_info: bytes, **answers) -> str:
    server = serve(server_info, **answers)
    try:
        with pytest.raises(LiveSetError) as raised:
            set_live(f"http://127.0.0.1:{server.server_port}", {}, CAP, 8)
    finally:
        server.shutdown()
    said = str(raised.value)
    assert "Traceback" not in said
    return said


@pytest.mark.parametrize(
    ("info", "said"),
    [
        ([{"internal_states": [{ARG: 8}]}], "answered JSON that is list, not an object"),
        ({"version": "0.5.9"}, "has no internal_states list"),
        ({"internal_states": [{"other": 1}]}, f"has no internal_states[].{ARG}"),
        ({"internal_states": [{ARG: 8}, {ARG: 64}]}, f"reports {ARG} 8, 64 across its 2 ranks"),
        ({"internal_states": [{ARG: "8"}]}, f"reports {ARG} '8', not a whole number"),
    ],
    ids=["list", "no-states", "no-arg", "ranks-disagree", "text"],
)
def test_a_server_info_without_one_whole_cap_says_what_it_held(info, said):
    message = live_error(json.dumps(info).encode())
    assert said in message and "restart: true" in message


def test_a_server_info_that_is_not_json_is_quoted():
    message = live_error(b"<html>gateway</html>")
    assert "not JSON" in message and "<html>gateway</html>" in message


def test_a_set_the_engine_fails_quotes_its_answer():
    message = live_error(b"{}", set_status=500, set_body=b"scheduler is busy")
    assert "HTTP 500" in message and "'scheduler is busy'" in message and "log says why" in message
