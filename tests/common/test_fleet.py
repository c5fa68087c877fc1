"""`glm5svc status --fleet` and the bench's target provenance against stand-in HTTP servers
that answer like glm5svc's /status and smg 1.13.0's /readiness and /workers (shapes taken from
a real smg 1.13.0 in front of two test engines)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from glm5svc.bench.outputs import target_line
from glm5svc.bench.provenance import target_facts
from glm5svc.cli import main
from glm5svc.config import parse_config
from glm5svc.errors import ConfigError
from glm5svc.records import PlanSummary, SglangInstall, StatusDocument

KEY = "fleet-key-1"


class Stub:
    """An HTTP server answering GET path -> (status, JSON); paths in `protected` need KEY."""

    def __init__(self, routes: dict[str, tuple[int, object]], protected: tuple[str, ...] = ()):
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                if self.path in protected and self.headers.get("Authorization") != f"Bearer {KEY}":
                    status, body = 401, {"error": {"message": "Missing API key"}}
                else:
                    status, body = stub.routes.get(self.path, (404, {"error": "no route"}))
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.routes = routes
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def replica_status(ready: bool, engine_port: int, phase: str = "serving") -> dict:
    plan = PlanSummary(
        argv=("python", "-m", "sglang.launch_server", "--port", str(engine_port)),
        env={},
        sglang_version="0.5.11",
        sglang=SglangInstall("0.5.11", True, "the venv's metadata"),
        profile="sglang-0.5.11",
        target="blackwell-rtx-pro-6000",
        model_architecture=None,
        tp_size=8,
        gpus={},
    )
    reason = "ready: serving" if ready else "draining: the service is stopping"
    return StatusDocument(ready, phase, ready_reason=reason, launch_plan=plan).to_dict()


@pytest.fixture
def fleet(tmp_path):
    """Two replicas (one ready, one draining) and a gateway that lists both plus a stranger."""
    a = Stub({"/status": (200, replica_status(True, 30001))})
    b = Stub({"/status": (200, replica_status(False, 30002, phase="draining"))})
    workers = [
        {"url": "http://127.0.0.1:30001", "is_healthy": True, "status": "ready", "load": 3},
        {"url": "http://127.0.0.1:30002", "is_healthy": False, "status": "ready", "load": 0},
        {"url": "http://127.0.0.1:30009", "is_healthy": True, "status": "ready", "load": 0},
    ]
    gateway = Stub(
        {
            "/readiness": (200, {"status": "ready", "healthy_workers": 2, "total_workers": 3}),
            "/workers": (200, {"workers": workers, "total": 3, "stats": {}}),
        },
        protected=("/workers",),
    )
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")
    key_file.chmod(0o600)
    config = tmp_path / "glm5.yaml"
    config.write_text(
        f"server: {{api_key_file: {key_file}}}\n"
        f"fleet: {{replicas: [{a.url}, {b.url}], gateway: {gateway.url}}}\n"
    )
    yield {"a": a, "b": b, "gateway": gateway, "config": config, "tmp": tmp_path}
    for stub in (a, b, gateway):
        stub.close()


def test_fleet_table_joins_replicas_with_the_gateway(fleet, capsys):
    code = main(["--config", str(fleet["config"]), "status", "--fleet"])
    out = capsys.readouterr().out
    line_a = next(line for line in out.splitlines() if line.startswith(fleet["a"].url))
    line_b = next(line for line in out.splitlines() if line.startswith(fleet["b"].url))
    assert "yes" in line_a and "healthy" in line_a and "http://127.0.0.1:30001" in line_a
    assert " no " in line_b and "unhealthy" in line_b and "draining" in line_b
    assert "1 of 2 replicas ready" in out
    assert "2 of 3 workers healthy" in out
    assert "worker http://127.0.0.1:30009 (healthy) matches no listed replica" in out
    assert code == 1


def test_fleet_json_and_all_ready_exits_zero(fleet, capsys):
    fleet["b"].routes["/status"] = (200, replica_status(True, 30002))
    fleet["gateway"].routes["/workers"][1]["workers"][1]["is_healthy"] = True
    code = main(["--config", str(fleet["config"]), "status", "--fleet", "--json"])
    view = json.loads(capsys.readouterr().out)
    assert [row["in_gateway"] for row in view["replicas"]] == ["healthy", "healthy"]
    assert view["ready_replicas"] == 2
    assert code == 0


def test_worker_list_needs_the_key(fleet, capsys):
    config = fleet["tmp"] / "nokey.yaml"
    config.write_text(f"fleet: {{replicas: [{fleet['a'].url}], gateway: {fleet['gateway'].url}}}\n")
    code = main(["--config", str(config), "status", "--fleet"])
    out = capsys.readouterr().out
    assert "worker list: HTTP 401" in out and "server.api_key_file" in out
    assert code == 1


def test_an_unreachable_replica_is_matched_by_its_host(fleet, capsys):
    """Its /status does not answer (no engine port): the one worker left on its host is it."""
    fleet["b"].routes["/status"] = (503, "down")
    main(["--config", str(fleet["config"]), "status", "--fleet", "--json"])
    rows = json.loads(capsys.readouterr().out)["replicas"]
    assert rows[0]["in_gateway"] == "healthy"
    # two workers (30002 and 30009) are left on 127.0.0.1: no guess
    assert (rows[1]["reachable"], rows[1]["in_gateway"]) == (False, "not registered")
    workers = fleet["gateway"].routes["/workers"][1]["workers"]
    del workers[2]
    main(["--config", str(fleet["config"]), "status", "--fleet", "--json"])
    rows = json.loads(capsys.readouterr().out)["replicas"]
    assert rows[1]["in_gateway"] == "unhealthy"
    assert rows[1]["engine_url"] == "http://127.0.0.1:30002"


def test_a_replica_answering_another_programs_json_is_not_counted(fleet, capsys):
    fleet["b"].routes["/status"] = (200, {"ready": "yes", "phase": "up"})
    main(["--config", str(fleet["config"]), "status", "--fleet", "--json"])
    row = json.loads(capsys.readouterr().out)["replicas"][1]
    assert row["reachable"] is False and row["ready"] is False
    assert row["reason"] == (
        "not a glm5svc /status: StatusDocument.ready is 'yes', expected a bool"
    )


def test_flags_replace_the_config_and_unreachable_gateway_exits_3(fleet, capsys):
    code = main(
        [
            "--config", str(fleet["config"]), "status",
            "--replica", fleet["a"].url, "--gateway", "http://127.0.0.1:1",
        ]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert fleet["b"].url not in out
    assert "gateway http://127.0.0.1:1: unreachable" in out
    assert code == 3


def test_bad_fleet_urls_are_refused_with_the_fix(tmp_path, capsys):
    with pytest.raises(ConfigError) as excinfo:
        parse_config("fleet: {replicas: [10.0.0.11:9400]}\n")
    assert "fleet.replicas" in " ".join(excinfo.value.problems)
    assert "http://10.0.0.11:9400" in " ".join(excinfo.value.problems)
    config = tmp_path / "empty.yaml"
    config.write_text("{}\n")
    assert main(["--config", str(config), "status", "--fleet"]) == 78
    assert "fleet.replicas" in capsys.readouterr().err


def test_bench_provenance_names_the_gateway(fleet):
    facts = target_facts(fleet["gateway"].url, KEY)
    assert facts["kind"] == "gateway"
    assert facts["healthy_workers"] == 2 and len(facts["workers"]) == 3
    assert "the gateway at " + fleet["gateway"].url in target_line(facts)
    direct = target_facts(fleet["a"].url)
    assert direct == {"kind": "server", "base_url": fleet["a"].url}
    assert target_line(direct) is None
