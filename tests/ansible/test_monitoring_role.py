"""roles/glm5_monitoring renders, through Ansible, a prometheus.yml that promtool accepts
(a job per kind of target, instance = the replica's name, the key by file only) and the
replicas' nftables table from the inventory's addresses."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testkit.prometheus import RULES, binary

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
INVENTORY = {
    "all": {
        "children": {
            "glm5_containers": {
                "hosts": {
                    "glm5-gpu01": {"glm5_gateway_worker_address": "192.0.2.20"},
                    "glm5-gpu02": {
                        "ansible_host": "2001:db8::21",
                        "glm5_service_listen_port": 9500,
                    },
                }
            },
            "glm5_monitoring": {
                "hosts": {
                    "mon01": {
                        "ansible_host": "192.0.2.40",
                        "ansible_connection": "local",
                        "ansible_python_interpreter": sys.executable,
                    }
                }
            },
        }
    }
}
SECRET = "monitoring-test-key"


def render(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    out.mkdir()
    shutil.copy(RULES, out / "rules.yml")
    role = REPO / "roles" / "glm5_monitoring"
    include = {"name": "glm5_monitoring", "tasks_from": "addresses", "public": True}
    templates = (
        ("prometheus.yml.j2", "prometheus.yml"),
        ("listener-firewall.nft.j2", "firewall.nft"),
    )
    tasks = [{"ansible.builtin.include_role": include}]
    for src, dest in templates:
        template = {"src": str(role / "templates" / src), "dest": str(out / dest), "mode": "0644"}
        tasks.append(
            {"ansible.builtin.template": template, "vars": {"__glm5_monitoring_port": 9400}}
        )
    tasks.append(
        {"ansible.builtin.copy": {"content": SECRET, "dest": str(out / "key"), "mode": "0600"}}
    )
    playbook = [{"hosts": "mon01", "gather_facts": False, "tasks": tasks}]
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(INVENTORY))
    (tmp_path / "play.yml").write_text(yaml.safe_dump(playbook))
    extra = {
        "__glm5_monitoring_rules": str(out / "rules.yml"),
        "__glm5_monitoring_key_file": str(out / "key"),
        "glm5_monitoring_engine_api_key": SECRET,
    }
    done = subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", str(tmp_path / "inventory.yml"), str(tmp_path / "play.yml"),
         "-e", yaml.safe_dump(extra, default_flow_style=True).strip()],
        cwd=REPO, capture_output=True, text=True, timeout=120,
        env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    return out


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    return render(tmp_path_factory.mktemp("monitoring-role"))


def test_the_role_renders_a_config_promtool_accepts_and_the_firewall(rendered):
    out = rendered
    check = subprocess.run(
        [binary("promtool"), "check", "config", str(out / "prometheus.yml")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS" in check.stdout + check.stderr
    config = yaml.safe_load((out / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert jobs["glm5svc"]["static_configs"] == [
        {"targets": ["192.0.2.20:9400"], "labels": {"instance": "glm5-gpu01"}},
        {"targets": ["[2001:db8::21]:9500"], "labels": {"instance": "glm5-gpu02"}},
    ]
    assert [c["targets"] for c in jobs["sglang"]["static_configs"]] == [
        ["192.0.2.20:30000"], ["[2001:db8::21]:30000"]
    ]  # fmt: skip
    assert jobs["sglang"]["authorization"]["credentials_file"] == str(out / "key")
    assert "authorization" not in jobs["glm5svc"]
    assert SECRET not in (out / "prometheus.yml").read_text()
    nft = (out / "firewall.nft").read_text()
    assert "ip saddr { 192.0.2.40, 192.0.2.20 } accept" in nft
    assert "ip6 saddr { 2001:db8::21 } accept" in nft
    assert nft.index("accept\n    tcp dport 9400 drop") > 0  # the drop comes last


def test_nft_accepts_the_firewall_table(rendered):
    """`nft -c` parses the table as the role's validate step does (where nft is installed:
    the lab and CI machines have it: Debian's lxc depends on nftables)."""
    nft = shutil.which("nft") or shutil.which("nft", path="/usr/sbin")
    if nft is None:
        pytest.skip("nft not installed (Debian's nftables)")
    out = rendered
    check = subprocess.run(
        [nft, "-c", "-f", str(out / "firewall.nft")], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stderr


def test_the_role_installs_the_packages_rules_file():
    shipped = REPO / "roles" / "glm5_monitoring" / "files" / "glm5svc-rules.yml"
    assert shipped.resolve() == RULES.resolve()  # a link, never a copy that drifts
