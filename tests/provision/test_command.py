"""`glm5svc provision` for real through ansible-runner, on a small local playbook."""

from __future__ import annotations

import json
import sys

import pytest

from glm5svc.cli import build_parser, main
from glm5svc.commands import provision

PLAYBOOK = """\
- name: A play on this machine
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: A report for the operator
      ansible.builtin.debug:
        msg: [first line, second line]
    - name: A file that check mode only reports
      ansible.builtin.copy:
        dest: "{{ playbook_dir }}/written"
        content: "x\\n"
        mode: "0644"
    - name: Tagged greeting
      ansible.builtin.debug:
        msg: "greeting: {{ greeting | default('none') }}"
      tags: [greet]
    - name: Tagged farewell
      ansible.builtin.debug:
        msg: farewell
      tags: [farewell]
"""


@pytest.fixture
def project(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "play.yml").write_text(PLAYBOOK)
    (project / "ansible.cfg").write_text("[defaults]\ninterpreter_python = auto_silent\n")
    (project / "hosts.yml").write_text(
        "all:\n  children:\n    lab:\n      hosts:\n        localhost:\n"
        f"          ansible_python_interpreter: {sys.executable}\n"
    )
    return project


@pytest.mark.timeout(120)
def test_check_runs_the_playbook_and_keeps_only_the_log(project, tmp_path, capsys):
    logs = tmp_path / "logs"
    status = main(
        [
            "provision", "--check", "--project", str(project), "--playbook", "play.yml",
            "-i", str(project / "hosts.yml"), "--log-dir", str(logs),
        ]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert status == 0, out
    assert not (project / "written").exists()  # check mode
    assert "localhost: 1 changed, 0 failed" in out
    assert "A report for the operator:\n    first line\n    second line" in out
    assert "provisioned" in out
    [log] = list(logs.iterdir())  # no ansible-runner directory left beside it
    assert log.name.startswith("provision-") and "A report for the operator" in log.read_text()


def test_a_missing_playbook_is_named_and_nothing_is_written(project, tmp_path, capsys):
    logs = tmp_path / "logs"
    status = main(["provision", "--project", str(project), "--log-dir", str(logs)])
    err = capsys.readouterr()
    assert status == 1
    assert f"no playbook {project / 'site.yml'}: pass --project" in err.err + err.out
    assert not logs.exists()


@pytest.mark.timeout(120)
def test_ansible_options_pass_through_and_json(project, tmp_path, capsys):
    status = main(
        [
            "provision", "--check", "--diff", "--project", str(project), "--playbook",
            "play.yml", "-i", str(project / "hosts.yml"), "--log-dir", str(tmp_path / "logs"),
            "--limit", "lab", "--tags", "greet,farewell", "--skip-tags", "farewell",
            "-e", "greeting='hello world'", "-e", "unused=1", "--json",
        ]
    )  # fmt: skip
    doc = json.loads(capsys.readouterr().out)
    assert status == 0 and doc["schema"] == "glm5svc.provision/1" and doc["ok"] is True
    assert doc["ansible_arguments"][:2] == ["--check", "--diff"]
    messages = doc["hosts"]["localhost"]["messages"]
    # -e with a space reached ansible whole; only the task tagged greet ran.
    assert messages == {"Tagged greeting": "greeting: hello world"}
    assert not (project / "written").exists()


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("pattern", "limit"), [("nosuchgroup", None), ("lab", "nosuchhost")], ids=["play", "limit"]
)
def test_no_host_matched_is_an_error_naming_the_pattern_and_groups(
    project, tmp_path, capsys, pattern, limit
):
    (project / "play.yml").write_text(PLAYBOOK.replace("hosts: localhost", f"hosts: {pattern}"))
    argv = ["provision", "--project", str(project), "--playbook", "play.yml",
            "-i", str(project / "hosts.yml"), "--log-dir", str(tmp_path / "logs")]  # fmt: skip
    status = main(argv + (["--limit", limit] if limit else []))
    captured = capsys.readouterr()
    assert status == 1, captured
    assert "no hosts matched: nothing was provisioned" in captured.err
    assert "provisioned" not in captured.out.replace("nothing was provisioned", "")
    assert pattern in captured.err and (limit or pattern) in captured.err
    assert f"the groups with hosts in {project / 'hosts.yml'}: lab" in captured.err


@pytest.mark.timeout(120)
def test_unreachable_hosts_are_named_with_what_to_check(project, tmp_path, capsys):
    (project / "hosts.yml").write_text(
        "all:\n  children:\n    lab:\n      hosts:\n        gone-host:\n"
        "          ansible_host: 192.0.2.1\n          ansible_connection: ssh\n"
        "          ansible_ssh_common_args: -o ConnectTimeout=1 -o BatchMode=yes\n"
    )
    (project / "play.yml").write_text(PLAYBOOK.replace("hosts: localhost\n  connection: local\n",
                                                       "hosts: lab\n"))  # fmt: skip
    argv = ["provision", "--project", str(project), "--playbook", "play.yml",
            "-i", str(project / "hosts.yml"), "--log-dir", str(tmp_path / "logs")]  # fmt: skip
    status = main(argv)
    out = " ".join(capsys.readouterr().out.split())
    assert status == 4, out
    assert "unreachable: gone-host (" in out
    assert "ansible_host in the inventory is the machine's address" in out
    assert "failed (ansible rc 4)" in out
    status = main([*argv, "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert status == 4 and doc["ok"] is False
    assert doc["hints"][0].startswith("unreachable: gone-host (")


VAULT_PLAYBOOK = """\
- name: A play that reads a vaulted variable
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: The secret's length
      ansible.builtin.debug:
        msg: "length {{ vault_secret_word | length }}"
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("options", "prompt"),
    [(["--ask-vault-pass"], "Vault password: "),
     (["--vault-id", "prod@prompt"], "Vault password (prod): ")],
    ids=["ask-vault-pass", "vault-id-prompt"],
)  # fmt: skip
def test_a_vault_prompt_is_answered_from_here_and_the_password_kept_out(
    project, tmp_path, capsys, monkeypatch, options, prompt
):
    from ansible.parsing.vault import VaultLib, VaultSecret

    secret, password = "open-sesame", "the-vault-password"
    vault = VaultLib([("default", VaultSecret(password.encode()))])
    (project / "group_vars" / "all").mkdir(parents=True)
    (project / "group_vars" / "all" / "vault.yml").write_bytes(
        vault.encrypt(f"vault_secret_word: {secret}\n")
    )
    (project / "vaulted.yml").write_text(VAULT_PLAYBOOK)
    asked = []
    monkeypatch.setattr(
        provision.getpass, "getpass", lambda prompt: asked.append(prompt) or password
    )
    logs = tmp_path / "logs"
    # The playbook as ansible-playbook takes it: positional, after the options.
    status = main(
        [
            "provision", "--project", str(project), "-i", str(project / "hosts.yml"),
            "--log-dir", str(logs), *options, "--json", "vaulted.yml",
        ]
    )  # fmt: skip
    doc = json.loads(capsys.readouterr().out)
    assert asked == [prompt]
    assert status == 0, doc
    assert doc["hosts"]["localhost"]["messages"] == {"The secret's length": f"length {len(secret)}"}
    assert doc["ansible_arguments"] == options
    [log] = list(logs.iterdir())
    written = log.read_text() + json.dumps(doc)
    assert password not in written and secret not in written


def test_the_vault_options_pass_through_and_one_playbook_only(capsys):
    args = build_parser().parse_args(
        ["provision", "--vault-password-file", "/p/a", "--vault-id", "prod@prompt", "night.yml"]
    )
    assert provision.ansible_arguments(args) == [
        "--vault-password-file", "/p/a", "--vault-id", "prod@prompt",
    ]  # fmt: skip
    assert provision.chosen_playbook(args) == "night.yml"
    assert provision.chosen_playbook(build_parser().parse_args(["provision"])) == "site.yml"
    assert main(["provision", "--playbook", "a.yml", "b.yml"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err
    assert main(["provision", "--forks=5"]) == 2
    assert "unrecognized arguments: --forks=5" in capsys.readouterr().err
