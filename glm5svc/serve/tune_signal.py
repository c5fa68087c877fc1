"""While `glm5svc tune` holds the GPUs, the listener's port says so.

A tune stops glm5.service (or finds it stopped) and runs its trials on private ports, so
nothing would answer on service.listen_port and every alert on the replica would take the
night for an outage. The tune serves this instead: /metrics with `glm5svc_tune_running 1`
(the rules leave a replica alone while it is 1), /readyz 503, /livez 200, so Prometheus
sees a replica stopped on purpose. The port is given back before the service starts again.
"""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from glm5svc.serve.listener import BoundedHTTPServer, make_text_handler
from glm5svc.serve.metrics import TUNE_RUNNING, TUNE_RUNNING_HELP, exposition


class _TuneRunning(Collector):
    def collect(self):
        yield GaugeMetricFamily(TUNE_RUNNING, TUNE_RUNNING_HELP, value=1.0)


class TuneSignal:
    """The listener's port during a tune; `start` returns None when the port is taken."""

    def __init__(self, server: BoundedHTTPServer):
        self.server = server
        self.thread = threading.Thread(target=server.serve_forever, name="tune-signal", daemon=True)

    @classmethod
    def start(cls, host: str, port: int) -> TuneSignal | None:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_TuneRunning())

        def answer(path: str, accept: str | None) -> tuple[int, bytes, str]:
            if path == "/metrics":
                body, content_type = exposition(registry, accept)
                return 200, body, content_type
            if path == "/livez":
                return 200, b"a glm5svc tune holds the GPUs\n", "text/plain; charset=utf-8"
            if path == "/readyz":
                return 503, b"not serving: a glm5svc tune runs\n", "text/plain; charset=utf-8"
            return 404, b"a glm5svc tune runs: try /metrics\n", "text/plain; charset=utf-8"

        try:
            server = BoundedHTTPServer((host, port), make_text_handler(answer))
        except OSError:
            return None
        signal = cls(server)
        signal.thread.start()
        return signal

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
