"""The wrapper's own HTTP listener: /livez, /readyz, /status, /metrics (stdlib threads).

HTTP/1.1 (a connection stays open for the next request, as Prometheus keeps it), GET and
HEAD (the same status and headers, no body).

Bounded, since any local user can connect: at most MAX_CONNECTIONS handler threads
(more connections are closed at once) and REQUEST_TIMEOUT_S for each socket read or
write, so half-sent requests cannot pile up threads in `serve`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from glm5svc.serve.metrics import exposition
from glm5svc.serve.state import SupervisorState

MAX_CONNECTIONS = 32
REQUEST_TIMEOUT_S = 2.0


class BoundedHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # listen backlog: a burst of scrapes is accepted, then bounded

    def __init__(self, address, handler, max_connections: int = MAX_CONNECTIONS):
        self._slots = threading.BoundedSemaphore(max_connections)
        self.refused = 0
        super().__init__(address, handler)

    def process_request(self, request, client_address):
        if not self._slots.acquire(blocking=False):
            self.refused += 1
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


class HealthListener:
    def __init__(
        self,
        state: SupervisorState,
        registry,
        host: str,
        port: int,
        loop_stale_after_s: float = 30.0,
    ):
        self.state = state
        self.registry = registry
        self.loop_stale_after_s = loop_stale_after_s
        handler = _make_handler(self)
        self.server = BoundedHTTPServer((host, port), handler)
        self.thread = threading.Thread(
            target=self.server.serve_forever, name="health-listener", daemon=True
        )

    @property
    def address(self) -> tuple[str, int]:
        return self.server.server_address[:2]

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def liveness(self) -> tuple[bool, str]:
        """The supervision loop's heartbeat (SupervisorState.beat), not this thread's."""
        age = self.state.loop_age()
        if age > self.loop_stale_after_s:
            return False, f"supervision loop stalled for {age:.1f} s"
        return True, "supervision loop alive"


def _make_handler(listener: HealthListener):
    def answer(path: str, accept: str | None) -> tuple[int, bytes, str]:
        if path == "/livez":
            ok, reason = listener.liveness()
            return 200 if ok else 503, (reason + "\n").encode(), TEXT
        if path == "/readyz":
            ok, reason = listener.state.readiness()
            return 200 if ok else 503, (reason + "\n").encode(), TEXT
        if path == "/status":
            body = listener.state.snapshot().to_json() + "\n"
            return 200, body.encode(), "application/json"
        if path == "/metrics":
            body, content_type = exposition(listener.registry, accept)
            return 200, body, content_type
        return 404, b"not found: try /livez /readyz /status /metrics\n", TEXT

    return make_text_handler(answer)


TEXT = "text/plain; charset=utf-8"


def make_text_handler(answer: Callable[[str, str | None], tuple[int, bytes, str]]):
    """A handler class for GET and HEAD that answers each path with `answer(path, Accept)`:
    (status, body, content type)."""

    class Handler(BaseHTTPRequestHandler):
        server_version = "glm5svc"
        protocol_version = "HTTP/1.1"
        timeout = REQUEST_TIMEOUT_S  # StreamRequestHandler: a timeout on the socket
        with_body = True

        def log_message(self, format, *args):  # noqa: A002 - stdlib signature
            pass

        def do_GET(self):  # noqa: N802 - stdlib name
            code, body, content_type = answer(
                self.path.split("?", 1)[0], self.headers.get("Accept")
            )
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.with_body:
                self.wfile.write(body)

        def do_HEAD(self):  # noqa: N802 - stdlib name
            self.with_body = False  # one handler serves every request of a connection
            try:
                self.do_GET()
            finally:
                self.with_body = True

    return Handler
