"""What a first deployment checks before it changes anything, without contacting a host:
site.yml refuses the example inventory without its vaulted API key (every container named,
the vault commands in the fix); a new container's net0 must give it the address the
inventory reaches it at. The template check (pveam) runs in `molecule test -s fresh`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = str(Path(sys.executable).parent / "ansible-playbook")
CREATE_PLAY = """\
- hosts: proxmox_hosts
  connection: local
  gather_facts: false
  tasks:
    - ansible.builtin.include_role: {name: glm5_host_lxc_gpu, tasks_from: create.yml}
"""


def _run(args: list[str], home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PLAYBOOK, *args], cwd=REPO, capture_output=True, text=True, timeout=300,
        env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(home),
             "ANSIBLE_NOCOLOR": "1", "ANSIBLE_CALLBACK_RESULT_FORMAT": "json"},
    )  # fmt: skip


def test_the_example_inventory_without_its_vault_stops_before_the_host_play(tmp_path):
    done = _run(["-i", "inventory/example/hosts.yml", "site.yml", "--check"], tmp_path)
    said = done.stdout + done.stderr
    assert done.returncode != 0, said[-3000:]
    for container in ("glm5-gpu01", "glm5-gpu02"):
        assert f"The engine of {container} would listen on 0.0.0.0 with no API key" in said
    assert "ansible-vault create inventory/<site>/group_vars/all/vault.yml" in said
    assert "--ask-vault-pass" in said and "Nothing was changed" in said
    # any_errors_fatal: not even the host play's facts were gathered.
    assert "Gathering Facts" not in said and "pve-gpu01" not in said


@pytest.mark.parametrize(
    ("net0", "address_refused"),
    [
        ("name=eth0,bridge=vmbr0,ip=dhcp", True),
        ("name=eth0,bridge=vmbr0,ip=192.0.2.99/24,gw=192.0.2.1", True),
        ("name=eth0,bridge=vmbr0,ip=192.0.2.20/24,gw=192.0.2.1", False),
        ("name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:00:20,ip=dhcp", False),
    ],
)  # fmt: skip
def test_a_new_container_gets_the_address_the_inventory_names(tmp_path, net0, address_refused):
    inventory = {
        "proxmox_hosts": {"hosts": {"pve": {"glm5_host_lxc_gpu_conf_dir": str(tmp_path / "lxc")}}},
        "glm5_containers": {"hosts": {"ct": {
            "glm5_container_driver_host": "pve", "glm5_gateway_worker_address": "192.0.2.20"}}},
    }  # fmt: skip
    (tmp_path / "hosts.yml").write_text(json.dumps(inventory))
    (tmp_path / "play.yml").write_text(CREATE_PLAY)
    done = _run(
        ["-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml"),
         "-e", json.dumps({"glm5_host_lxc_gpu_create_net0": net0})],
        tmp_path,
    )  # fmt: skip
    said = done.stdout + done.stderr
    assert done.returncode != 0  # the address, else the template this machine lacks
    assert ("glm5_gateway_worker_address 192.0.2.20" in said) is address_refused, said[-3000:]
    if address_refused:
        assert "ip=192.0.2.20/<prefix>,gw=<router>" in said and "hwaddr=<MAC>" in said
    else:
        fix = "pveam update && pveam download local debian-12-standard_12.12-1_amd64.tar.zst"
        assert fix in said
    assert not (tmp_path / "lxc").exists()
