"""`glm5svc provision` for real through ansible-runner, on a small local playbook."""

from __future__ import annotations

import sys

import pytest

from glm5svc.cli import main

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
"""


@pytest.fixture
def project(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "play.yml").write_text(PLAYBOOK)
    (project / "ansible.cfg").write_text("[defaults]\ninterpreter_python = auto_silent\n")
    (project / "hosts.yml").write_text(
        f"all:\n  hosts:\n    localhost:\n      ansible_python_interpreter: {sys.executable}\n"
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
