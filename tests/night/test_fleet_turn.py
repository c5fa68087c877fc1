"""Replicas behind the gateway take their turns one at a time: a replica's night goes only
while every other replica serves, is healthy at the gateway and holds no turn; a replica
later in fleet.replicas steps back from one earlier that took its turn at the same time.
The replicas and the gateway are HTTP stubs answering as glm5svc and smg 1.13.0 do."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from aiohttp import web

from glm5svc.config import config_from_mapping
from glm5svc.night.fleet_turn import TURN_FILE, FleetTurn, NoTurn, own_replica
from glm5svc.night.state import NightState
from testkit.engine import free_port
from testkit.http_stub import stub


def replica(engine_port: int, ready: bool = True, in_turn: bool = False):
    status = {
        "ready": ready, "phase": "serving" if ready else "stopping",
        "launch_plan": {"argv": ["python", "--port", str(engine_port)], "env": {},
                        "sglang_version": "0.5.11", "tp_size": 1},
    }  # fmt: skip
    metrics = f"# TYPE glm5svc_night_turn gauge\nglm5svc_night_turn {int(in_turn)}\n"
    return {
        ("GET", "/status"): lambda request: web.json_response(status),
        ("GET", "/metrics"): lambda request: web.Response(text=metrics),
    }


def gateway(workers: dict[int, bool]):
    listed = [{"url": f"http://127.0.0.1:{p}", "is_healthy": ok} for p, ok in workers.items()]
    readiness = {"status": "ready", "healthy_workers": sum(workers.values()),
                 "total_workers": len(workers)}  # fmt: skip
    return {
        ("GET", "/readiness"): lambda request: web.json_response(readiness),
        ("GET", "/workers"): lambda request: web.json_response({"workers": listed}),
    }


def turn_for(tmp_path: Path, me: int, replicas: list[str], gateway_url: str, deadline: str):
    config = config_from_mapping({
        "service": {"listen_port": me, "results_dir": str(tmp_path)},
        "fleet": {"replicas": replicas, "gateway": gateway_url},
    })  # fmt: skip
    state = NightState(tmp_path, "/etc/glm5/glm5.yaml", "2026-12-04T20:00:00.000+00:00",
                       deadline, 60.0, {"concurrency": 8}, 3, [])  # fmt: skip
    return FleetTurn(config, state, log=lambda text: None)


def test_a_turn_waits_for_an_earlier_replica_and_goes_when_the_others_serve(tmp_path):
    me, first, third = free_port(), free_port(), free_port()
    engines = {first: free_port(), me: free_port(), third: free_port()}
    with (
        stub(replica(engines[first], in_turn=True)) as first_url,
        stub(replica(engines[third])) as third_url,
        stub(gateway({engines[first]: True, engines[third]: True, engines[me]: True})) as gw,
    ):
        # The stubs listen on ports of their own; this replica is named by its listen port.
        mine = f"http://127.0.0.1:{me}"
        replicas = [first_url, mine, third_url]
        past = "2026-01-01T00:00:00+00:00"
        turn = turn_for(tmp_path, me, replicas, gw, past)
        assert turn.active and own_replica(turn.config) == mine
        with pytest.raises(NoTurn, match=f"{first_url} is in its turn"):
            turn.wait_for_turn(threading.Event())
        assert not (tmp_path / TURN_FILE).exists()
    with (
        stub(replica(engines[first])) as first_url,
        stub(replica(engines[third])) as third_url,
        stub(gateway({engines[first]: True, engines[third]: True})) as gw,
    ):
        turn = turn_for(tmp_path, me, [first_url, mine, third_url], gw, past)
        turn.wait_for_turn(threading.Event())
        assert (tmp_path / TURN_FILE).exists()  # /metrics: glm5svc_night_turn 1
        assert "my turn" in turn.state.events[-1]["text"]


def test_a_replica_unhealthy_at_the_gateway_holds_the_others_back(tmp_path):
    me, engine = free_port(), free_port()
    with (
        stub(replica(engine)) as other_url,
        stub(gateway({engine: False})) as gw,
    ):
        turn = turn_for(tmp_path, me, [other_url, f"http://127.0.0.1:{me}"], gw,
                        "2026-01-01T00:00:00+00:00")  # fmt: skip
        with pytest.raises(NoTurn, match="unhealthy at the gateway"):
            turn.wait_for_turn(threading.Event())


def test_one_replica_or_no_gateway_takes_no_turns(tmp_path):
    alone = turn_for(tmp_path, 9400, ["http://127.0.0.1:9400"], "http://127.0.0.1:1", "x")
    assert not alone.active
    alone.wait_for_turn(threading.Event())  # returns at once
    assert not (tmp_path / TURN_FILE).exists()
