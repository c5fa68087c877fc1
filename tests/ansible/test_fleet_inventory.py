"""inventory/example describes a fleet: two Proxmox hosts with a replica each and a gateway;
the lab (lab/inventory.yml, plus lab/replicas.yml for `scripts/lab up --replicas 2`) the same
on this machine. Rendered by ansible-playbook (local connection, nothing contacted): each
replica reaches its own Proxmox host, per-host differences stay per host, the gateway's
worker list comes from the replica group, and the fleet section glm5svc gets passes
glm5svc's own validation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from glm5svc.config import config_from_mapping

REPO = Path(__file__).resolve().parents[2]


def render(out: Path, *inventories: str) -> dict[str, object]:
    env = dict(os.environ, ANSIBLE_ROLES_PATH=str(REPO / "roles"))
    sources = [arg for name in inventories or ("inventory/example/hosts.yml",)
               for arg in ("-i", str(REPO / name))]  # fmt: skip
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            *sources,
            "-e", "ansible_connection=local", "-e", f"ansible_python_interpreter={sys.executable}",
            "-e", f"probe_out={out}",
            str(REPO / "tests/ansible/fleet_inventory_probe.yml"),
        ],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return {path.stem: json.loads(path.read_text()) for path in out.glob("*.json")}


def test_fleet_inventory_renders_per_host_and_group_values(tmp_path):
    rendered = render(tmp_path)
    one, two = rendered["glm5-gpu01"], rendered["glm5-gpu02"]
    assert (one["proxmox_host"], two["proxmox_host"]) == ("192.0.2.10", "192.0.2.11")
    assert one["vmid"] == two["vmid"] == "200"
    assert (one["gpus"], two["gpus"]) == (8, 4)
    assert rendered["glm5-gw01"] == ["http://192.0.2.20:30000", "http://192.0.2.21:30000"]
    fleet = one["extra"]["fleet"]
    assert fleet == two["extra"]["fleet"]
    assert fleet == {
        "replicas": ["http://192.0.2.20:9400", "http://192.0.2.21:9400"],
        "gateway": "http://192.0.2.30:30000",
    }
    config = config_from_mapping(one["extra"])
    assert config.service.listen_host == "0.0.0.0"
    assert config.fleet.gateway == "http://192.0.2.30:30000"


def test_lab_with_two_replicas_is_a_fleet_on_this_machine(tmp_path):
    rendered = render(tmp_path, "lab/inventory.yml", "lab/replicas.yml")
    one, two = rendered["glm5-lab-ct"], rendered["glm5-lab-ct2"]
    # Each container is reached through its own stand-in host, as CTID 200 there.
    assert one["host_command"][-2:] == ["glm5-lab-host", "--"]
    assert two["host_command"][-2:] == ["glm5-lab-host2", "--"]
    assert one["vmid"] == two["vmid"] == "200"
    # One network (this machine's): each replica on its own ports.
    assert (one["port"], one["listen_port"]) == (30220, 9420)
    assert (two["port"], two["listen_port"]) == (30221, 9421)
    assert rendered["glm5-lab-host"] == ["http://127.0.0.1:30220", "http://127.0.0.1:30221"]
    assert one["extra"] == two["extra"]
    config = config_from_mapping(one["extra"])
    assert config.fleet.replicas == ["http://127.0.0.1:9420", "http://127.0.0.1:9421"]
    assert config.fleet.gateway == "http://127.0.0.1:30230"


def test_lab_with_one_replica_has_no_gateway(tmp_path):
    rendered = render(tmp_path, "lab/inventory.yml")
    assert set(rendered) == {"glm5-lab-ct"}
    config = config_from_mapping(rendered["glm5-lab-ct"]["extra"])
    assert config.fleet.replicas == ["http://127.0.0.1:9420"] and config.fleet.gateway is None
