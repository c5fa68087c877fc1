"""The lab reaches a stand-in host with community.docker.nsenter at the PID of the host's init,
also when a container's task is delegated to the host (glm5_container_driver does that):
Ansible templates the delegated host's connection variables with inventory_hostname still
the container's, and the lab once looked the PID up by inventory_hostname, so nsenter got the
container's init PID as the host numbers it. Fake lxc-info and nsenter on PATH record which
PID each task entered; nothing is booted (no root, no LXC)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
# Each lab system's init PID as lxc-info reports it. A container runs in its host's PID
# namespace, so its number is the host's and means nothing (or something else) here.
PIDS = {"glm5-lab-host": 4101, "glm5-lab-host2": 4102, "glm5-lab-ct": 63, "glm5-lab-ct2": 64}

FAKE_LXC_INFO = """#!/bin/sh
while [ $# -gt 0 ]; do [ "$1" = -n ] && name=$2; shift; done
case "$name" in {cases} *) exit 1 ;; esac
"""
# `nsenter --target PID --uts hostname` (lab/system_pid.sh's check) answers the name of the
# system whose init is PID; any other command is recorded and run here.
FAKE_NSENTER = """#!/bin/sh
for arg; do case "$arg" in --target=*) pid=${{arg#--target=}} ;; esac; done
[ "$1" = --target ] && pid=$2
if [ "$*" = "--target $pid --uts hostname" ]; then
  case "$pid" in {names} *) exit 1 ;; esac
  exit 0
fi
echo "$pid" >> "$NSENTER_LOG"
while [ "$1" != -- ]; do shift; done; shift
exec "$@"
"""


def fakes(bindir: Path) -> None:
    bindir.mkdir()
    lxc_info = " ".join(f"{name}) echo {pid} ;;" for name, pid in PIDS.items())
    hosts = " ".join(f"{pid}) echo {name} ;;" for name, pid in PIDS.items() if "-host" in name)
    for name, text in (
        ("lxc-info", FAKE_LXC_INFO.format(cases=lxc_info)),
        ("nsenter", FAKE_NSENTER.format(names=hosts)),
    ):
        (bindir / name).write_text(text)
        (bindir / name).chmod(0o755)


@pytest.fixture(scope="module")
def collections() -> None:
    subprocess.run(
        [sys.executable, str(REPO / "molecule" / "shared" / "fetch_collections.py")],
        cwd=REPO, check=True, capture_output=True,
    )  # fmt: skip


def run_probe(tmp_path: Path, *inventories: str) -> tuple[subprocess.CompletedProcess, list[int]]:
    fakes(tmp_path / "bin")
    log = tmp_path / "nsenter.log"
    env = dict(
        os.environ,
        PATH=f"{tmp_path / 'bin'}{os.pathsep}{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        NSENTER_LOG=str(log),
        HOME=str(tmp_path),
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(REPO / ".cache" / "ansible_collections"),
        ANSIBLE_CONNECTION_PLUGINS=os.pathsep.join(
            str(REPO / d) for d in ("lab/connection_plugins", "connection_plugins")
        ),
    )
    sources = [arg for name in inventories for arg in ("-i", str(REPO / name))]
    done = subprocess.run(
        [str(VENV_BIN / "ansible-playbook"), *sources,
         str(REPO / "tests" / "ansible" / "lab_delegation_probe.yml")],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=120,
    )  # fmt: skip
    entered = [int(line) for line in log.read_text().split()] if log.exists() else []
    return done, entered


@pytest.mark.parametrize(
    ("inventories", "hosts"),
    [
        (("lab/inventory.yml",), ["glm5-lab-host"]),
        (("lab/inventory.yml", "lab/replicas.yml"), ["glm5-lab-host", "glm5-lab-host2"]),
    ],
)
def test_delegated_tasks_enter_the_host_not_the_container(
    collections, tmp_path, inventories, hosts
):
    done, entered = run_probe(tmp_path, *inventories)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    host_pids = {PIDS[name] for name in hosts}
    assert entered and set(entered) == host_pids, entered
    assert "glm5-lab-ct -> glm5-lab-host" in done.stdout


def test_system_pid_refuses_a_pid_that_is_not_the_named_system(tmp_path):
    fakes(tmp_path / "bin")
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    script = str(REPO / "lab" / "system_pid.sh")

    def ask(name: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [script, "/var/lib/glm5-lab/lxc", name], capture_output=True, text=True, env=env
        )

    host = ask("glm5-lab-host")
    assert (host.returncode, host.stdout) == (0, "4101\n")
    container = ask("glm5-lab-ct")
    assert container.returncode == 1 and container.stdout == ""
    assert "PID 63 (lxc-info for glm5-lab-ct) is not glm5-lab-ct here" in container.stderr
    missing = ask("glm5-lab-nowhere")
    assert missing.returncode == 1 and "is not running" in missing.stderr
