"""playbooks/night.yml's REBOOT REQUIRED line: the command it names continues the same night."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml

from glm5svc.cli import build_parser
from glm5svc.commands.provision import chosen_playbook

REPO = Path(__file__).resolve().parents[2]
OPTIONS = ["--budget", "8h", "--concurrency", "256", "--input-len", "1024", "--output-len", "512"]


def reboot_message(variables: dict) -> str:
    ansible_template = pytest.importorskip("ansible.template")
    from ansible.parsing.dataloader import DataLoader

    plays = yaml.safe_load((REPO / "playbooks" / "night.yml").read_text())
    [task] = [t for play in plays for t in play.get("tasks", []) if "ansible.builtin.fail" in t]
    template = task["ansible.builtin.fail"]["msg"]
    trust = getattr(ansible_template, "trust_as_template", lambda text: text)
    templar = ansible_template.Templar(loader=DataLoader(), variables=variables)
    return templar.template(trust(template))


@pytest.mark.parametrize("options", [OPTIONS, None], ids=["night-options", "none"])
def test_the_reboot_line_continues_with_the_nights_options(options):
    variables = {
        "inventory_hostname": "pve-gpu01",
        "ansible_host": "192.0.2.10",
        "inventory_file": "inventory/site/hosts.yml",
        "glm5_host_reboot_reasons": ["NVIDIA driver 580 is installed but not loaded"],
    }
    if options is not None:
        variables["glm5_night_options"] = options
    said = reboot_message(variables)
    assert said.startswith("REBOOT REQUIRED on pve-gpu01 (NVIDIA driver 580")
    command = shlex.split(said.partition("continue with the same command:")[2])
    assert command[:2] == ["glm5svc", "provision"]
    args = build_parser().parse_args(command[1:])
    assert args.inventory == "inventory/site/hosts.yml"
    assert chosen_playbook(args) == "playbooks/night.yml"
    given = [json.loads(value) for value in args.extra_vars or []]
    assert given == ([{"glm5_night_options": options}] if options else [])
