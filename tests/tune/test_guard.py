"""tune's refusal on a serving machine points at a step that works: --take-over only where
the unit serves, the process to stop where something else holds the port."""

from __future__ import annotations

import socket

import pytest

from glm5svc.config import Config
from glm5svc.tune import guard
from glm5svc.tune.guard import EngineBusy, TakeOver


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
