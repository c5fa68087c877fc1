"""roles/glm5_monitoring renders, through Ansible, a prometheus.yml that promtool accepts (a
job per kind of target, instance = the replica's name, no key, Alertmanager wired), an
alertmanager.yml that amtool accepts, the rules `glm5svc rules` gives for the objectives,
and the replicas' nftables table from the inventory's addresses; it refuses a replica that
listens on loopback only but is scraped elsewhere, naming the fix."""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from glm5svc.config import MonitoringSection
from glm5svc.monitoring_rules import render_text
from testkit.prometheus import binary

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
OBJECTIVES = {"ttft": {"threshold_s": 10, "target": 0.995}, "start_budget_s": 1200}
INVENTORY = {
    "all": {
        "children": {
            "glm5_containers": {
                "vars": {
                    "glm5_service_host": "0.0.0.0",
                    "glm5_service_config_extra": {"service": {"listen_host": "0.0.0.0"}},
                },
                "hosts": {
                    "glm5-gpu01": {"glm5_gateway_worker_address": "192.0.2.20"},
                    "glm5-gpu02": {
                        "ansible_host": "2001:db8::21",
                        "glm5_service_listen_port": 9500,
                    },
                },
            },
            "glm5_gateways": {"hosts": {"glm5-gw01": {"ansible_host": "192.0.2.30"}}},
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


def run_role(tmp_path: Path, inventory: dict) -> tuple[subprocess.CompletedProcess, Path]:
    """The role's controller-side tasks (render.yml) and its templates, written to tmp_path."""
    out = tmp_path / "out"
    out.mkdir()
    role = REPO / "roles" / "glm5_monitoring"
    include = {"name": "glm5_monitoring", "tasks_from": "render", "public": True}
    tasks = [{"ansible.builtin.include_role": include}]
    templates = (
        ("prometheus.yml.j2", "prometheus.yml"),
        ("listener-firewall.nft.j2", "firewall.nft"),
        ("alertmanager.yml.j2", "alertmanager.yml"),
    )
    firewall_ports = {"__glm5_monitoring_port": 9400, "__glm5_monitoring_engine_port": 30000}
    for src, dest in templates:
        template = {"src": str(role / "templates" / src), "dest": str(out / dest), "mode": "0644"}
        tasks.append({"ansible.builtin.template": template, "vars": firewall_ports})
    rules = {
        "content": "{{ __glm5_monitoring_rules_text.stdout }}\n",
        "dest": str(out / "rules.yml"),
        "mode": "0644",
    }
    tasks.append({"ansible.builtin.copy": rules})
    playbook = [{"hosts": "mon01", "gather_facts": False, "tasks": tasks}]
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "play.yml").write_text(yaml.safe_dump(playbook))
    extra = {
        "__glm5_monitoring_rules": str(out / "rules.yml"),
        "glm5_monitoring_objectives": OBJECTIVES,
        "glm5_monitoring_node_exporter_port": 9100,
        "glm5_monitoring_alert_email_to": "oncall@example.org",
        "glm5_monitoring_alert_webhook_url": "http://192.0.2.50:8080/alerts",
    }
    done = subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", str(tmp_path / "inventory.yml"), str(tmp_path / "play.yml"),
         "-e", yaml.safe_dump(extra, default_flow_style=True, width=1000).strip()],
        cwd=REPO, capture_output=True, text=True, timeout=120,
        env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")},
    )  # fmt: skip
    return done, out


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    done, out = run_role(tmp_path_factory.mktemp("monitoring-role"), INVENTORY)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    return out


def check(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout + done.stderr


def test_the_role_renders_a_config_promtool_accepts_and_the_firewall(rendered):
    out = rendered
    check(binary("promtool"), "check", "config", str(out / "prometheus.yml"))
    config = yaml.safe_load((out / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert jobs["glm5svc"]["static_configs"] == [
        {"targets": ["192.0.2.20:9400"], "labels": {"instance": "glm5-gpu01"}},
        {"targets": ["[2001:db8::21]:9500"], "labels": {"instance": "glm5-gpu02"}},
    ]
    assert [c["targets"] for c in jobs["sglang"]["static_configs"]] == [
        ["192.0.2.20:30000"], ["[2001:db8::21]:30000"]
    ]  # fmt: skip
    assert [c["targets"] for c in jobs["node"]["static_configs"]] == [
        ["192.0.2.20:9100"], ["[2001:db8::21]:9100"]
    ]  # fmt: skip
    assert "dcgm" not in jobs
    assert all("authorization" not in job for job in jobs.values())  # no key on this host
    assert config["alerting"]["alertmanagers"] == [
        {"static_configs": [{"targets": ["127.0.0.1:9093"]}]}
    ]
    nft = (out / "firewall.nft").read_text()
    assert "tcp dport 9400 ip saddr { 192.0.2.40, 192.0.2.20 } accept" in nft
    assert "tcp dport 9400 ip6 saddr { 2001:db8::21 } accept" in nft
    assert "tcp dport 30000 ip saddr { 192.0.2.40, 192.0.2.20, 192.0.2.30 } accept" in nft
    assert nft.index("tcp dport 9400 drop") < nft.index("tcp dport 30000 ip saddr")


def test_the_rules_are_glm5svc_rules_for_the_objectives(rendered):
    text = (rendered / "rules.yml").read_text()
    assert text == render_text(MonitoringSection.model_validate(OBJECTIVES))
    assert 'le="10.0"' in text and "for: 20m" in text
    check(binary("promtool"), "check", "rules", str(rendered / "rules.yml"))


def test_amtool_accepts_the_alertmanager_config_and_its_routes(rendered):
    check(binary("amtool"), "check-config", str(rendered / "alertmanager.yml"))
    config = yaml.safe_load((rendered / "alertmanager.yml").read_text())
    receivers = {r["name"]: r for r in config["receivers"]}
    assert receivers["pages"]["webhook_configs"][0]["url"] == "http://192.0.2.50:8080/alerts"
    assert receivers["pages"]["email_configs"][0]["to"] == "oncall@example.org"
    assert "webhook_configs" not in receivers["tickets"]
    routes = {tuple(r["matchers"]): r["receiver"] for r in config["route"]["routes"]}
    assert routes == {('alertname="Watchdog"',): "watchdog", ('severity="critical"',): "pages"}


def test_a_replica_on_loopback_scraped_from_elsewhere_is_refused_naming_the_fix(tmp_path):
    inventory = copy.deepcopy(INVENTORY)
    replicas = inventory["all"]["children"]["glm5_containers"]
    replicas["hosts"]["glm5-gpu02"]["glm5_service_config_extra"] = {}
    done, out = run_role(tmp_path, inventory)
    assert done.returncode != 0
    assert "glm5-gpu02: the listener listens on 127.0.0.1" in done.stdout
    assert "set glm5_service_config_extra: {service: {listen_host: 0.0.0.0}}" in done.stdout
    assert "glm5-gpu01" not in done.stdout.split("FAILED")[-1]
    assert not (out / "prometheus.yml").exists()


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
