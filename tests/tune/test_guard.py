"""tune's refusal on a serving machine points at a step that works: --take-over only where
the unit serves, the process to stop where something else holds the port; while it runs, the
listener's port says a tune runs."""

from __future__ import annotations

import socket

import pytest

from glm5svc.config import Config
from glm5svc.http_fetch import FetchError, fetch_bytes, fetch_text
from glm5svc.metrics_text import parse_metrics
from glm5svc.tune import guard
from glm5svc.tune.guard import EngineBusy, TakeOver
from testkit.engine import free_port


@pytest.fixture
def held_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def config_on(port: int) -> Config:
    return Config.model_validate({"server": {"port": port}})


@pytest.mark.parametrize("take_over", [False, True])
def test_a_port_held_by_another_process_never_hints_take_over(held_port, monkeypatch, take_over):
    monkeypatch.setattr(guard, "unit_active", lambda unit=guard.UNIT: False)
    with pytest.raises(EngineBusy) as refused:
        TakeOver(take_over).begin(config_on(held_port))
    message = str(refused.value)
    assert f"the engine port {held_port} is held by pid" in message
    assert "stop that process first" in message
    assert "Pass --take-over" not in message


def test_a_serving_unit_is_refused_with_the_take_over_hint(held_port, monkeypatch):
    monkeypatch.setattr(guard, "unit_active", lambda unit=guard.UNIT: True)
    with pytest.raises(EngineBusy, match="Pass --take-over to drain and stop glm5.service"):
        TakeOver(False).begin(config_on(held_port))


def test_the_tune_holds_the_listener_port_saying_so_and_gives_it_back(monkeypatch):
    """While the tune runs, the listener's port serves glm5svc_tune_running 1 (the alerts
    leave the replica alone); after restore the port is free for the service again."""
    monkeypatch.setattr(guard, "unit_active", lambda unit=guard.UNIT: False)
    port = free_port()
    config = Config.model_validate(
        {"server": {"port": free_port()}, "service": {"listen_port": port}}
    )
    taken = TakeOver(False)
    taken.begin(config)
    try:
        metrics = parse_metrics(fetch_text(f"http://127.0.0.1:{port}/metrics", timeout_s=5))
        assert metrics.value("glm5svc_tune_running") == 1.0
        assert metrics.matching("glm5svc_ready") == ()
        with pytest.raises(FetchError, match="HTTP 503"):
            fetch_bytes(f"http://127.0.0.1:{port}/readyz", timeout_s=5)
    finally:
        taken.restore()
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the listener does
        sock.bind(("127.0.0.1", port))  # given back: the service can listen there


def test_a_taken_listener_port_leaves_the_tune_without_the_signal(held_port, monkeypatch):
    monkeypatch.setattr(guard, "who_serves", lambda config, unit=guard.UNIT: None)
    config = Config.model_validate(
        {"server": {"port": free_port()}, "service": {"listen_port": held_port}}
    )
    taken = TakeOver(False)
    taken.begin(config)
    assert taken.signal is None
    taken.restore()
