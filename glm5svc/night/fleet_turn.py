"""Replicas behind the gateway take their turns one at a time (docs/scale-out.md).

Before a step takes glm5.service down (the tune, the apply's restart, a rollback), the
night waits for its turn: every other replica of the config's `fleet:` section ready (its
/status), healthy at the gateway (smg's GET /workers, as `status --fleet` reads it) and
not in a turn of its own. It then marks its turn (TURN_FILE under service.results_dir,
which the replica's /metrics shows as `glm5svc_night_turn 1`) and looks again: when a
replica earlier in `fleet.replicas` marked one too, the later one steps back. The stop
itself is serve's drain: /readyz and sglang's /health turn 503 at once, the gateway takes
the replica out after its failed checks, and requests in flight finish. The turn ends
when the gateway counts the replica healthy again.

Without a gateway or with one replica there are no turns to take.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit

from glm5svc.atomic_file import write_atomic
from glm5svc.config import Config, read_api_key
from glm5svc.errors import Glm5Error
from glm5svc.fleet import read_fleet
from glm5svc.http_fetch import FetchError, fetch_text
from glm5svc.metrics_text import MetricsTextError, parse_metrics
from glm5svc.night.children import Stopped
from glm5svc.records import NIGHT_TURN_FILE

TURN_FILE = NIGHT_TURN_FILE
TURN_METRIC = "glm5svc_night_turn"
POLL_S = 5.0
BACK_IN_ROTATION_WAIT_S = 600.0
TIMEOUT_S = 10.0


class NoTurn(Glm5Error):
    """The other replicas did not all serve before the night's deadline."""


def local_names(listen_host: str) -> set[str]:
    names = {"127.0.0.1", "localhost", "::1", listen_host, socket.gethostname()}
    try:
        names |= set(socket.gethostbyname_ex(socket.gethostname())[2])
    except OSError:
        pass
    return names


def own_replica(config: Config) -> str | None:
    """This replica's URL in fleet.replicas: its listener port on one of this host's names."""
    service = config.service
    ports = [u for u in config.fleet.replicas if urlsplit(u).port == service.listen_port]
    if len(ports) == 1:
        return ports[0]
    names = local_names(service.listen_host)
    return next((u for u in ports if urlsplit(u).hostname in names), None)


class FleetTurn:
    def __init__(self, config: Config, state, log: Callable[[str], None]):
        self.config = config
        self.state = state
        self.log = log
        self.me = own_replica(config)
        self.others = [u for u in config.fleet.replicas if u != self.me]
        self.active = bool(config.fleet.gateway and self.me and self.others)
        self.turn_file = Path(config.service.results_dir) / TURN_FILE

    def wait_for_turn(self, stop: threading.Event, bounded: bool = True) -> None:
        if not self.active:
            return
        deadline = datetime.fromisoformat(self.state.deadline_at).timestamp()
        said = None
        while True:
            why = self._others_busy()
            if why is None:
                write_atomic(self.turn_file, f"{self.state.night_dir}\n", mode=0o644)
                earlier = self._earlier_in_turn()
                if earlier is None:
                    self.state.note(f"fleet: my turn ({self.me}); the others serve")
                    return
                self.turn_file.unlink(missing_ok=True)
                why = f"{earlier} takes its turn first"
            if why != said:
                self.log(f"night: waiting for my turn: {why}")
                said = why
            if stop.is_set():
                raise Stopped("while waiting for the fleet's turn")
            if bounded and time.time() > deadline:
                raise NoTurn(f"no turn before the night's deadline: {why}")
            time.sleep(POLL_S)

    def back_in_rotation(self, stop: threading.Event) -> None:
        """Wait until the gateway counts this replica healthy, then end the turn."""
        if not self.active:
            return
        deadline = time.monotonic() + BACK_IN_ROTATION_WAIT_S
        while time.monotonic() < deadline and not stop.is_set():
            row = self._view().replicas[0]
            if row.in_gateway == "healthy":
                break
            time.sleep(POLL_S)
        self.turn_file.unlink(missing_ok=True)

    def _view(self, urls: list[str] | None = None):
        api_key = read_api_key(self.config.server.api_key_file)
        return read_fleet(urls or [self.me], self.config.fleet.gateway, TIMEOUT_S, api_key)

    def _others_busy(self) -> str | None:
        view = self._view(self.others)
        for row in view.replicas:
            if not row.ready:
                return f"{row.status_url} is not ready ({row.reason or row.phase})"
            if row.in_gateway != "healthy":
                return f"{row.status_url} is {row.in_gateway} at the gateway"
            if _in_turn(row.status_url):
                return f"{row.status_url} is in its turn"
        return None

    def _earlier_in_turn(self) -> str | None:
        replicas = list(self.config.fleet.replicas)
        earlier = replicas[: replicas.index(self.me)] if self.me in replicas else []
        return next((u for u in earlier if _in_turn(u)), None)


def _in_turn(replica_url: str) -> bool:
    try:
        samples = parse_metrics(fetch_text(replica_url + "/metrics", timeout_s=TIMEOUT_S))
    except (FetchError, MetricsTextError):
        return False
    return bool(samples.value(TURN_METRIC))
