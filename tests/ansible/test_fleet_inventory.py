"""inventory/example describes a fleet: two Proxmox hosts with a replica each and a gateway.
Rendered by ansible-playbook (local connection, nothing contacted): each replica reaches its
own Proxmox host, per-host differences stay per host, the gateway's worker list comes from
the replica group, and the fleet section glm5svc gets passes glm5svc's own validation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from glm5svc.config import config_from_mapping

REPO = Path(__file__).resolve().parents[2]


def render(out: Path) -> dict[str, object]:
    env = dict(os.environ, ANSIBLE_ROLES_PATH=str(REPO / "roles"))
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i", str(REPO / "inventory/example/hosts.yml"),
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
