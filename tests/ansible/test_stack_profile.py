"""The container play's first task: the stack profile against the container's Debian release.

Every Debian release x stack profile x install either runs (the profile lists it under
`containers`; debian12 and debian13 with cu128 are proven by `molecule test -s container`)
or is refused by roles/glm5_stack before anything is installed, with the profile's reason
and the combinations that run. One ansible-runner run of the real role over one local
host per combination (their distribution facts set by a stand-in module, nothing
contacted), compared with glm5svc's reading of the same profile files.
"""

from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("ansible_runner")

from glm5svc.profiles import known_profiles, load_profile  # noqa: E402
from glm5svc.provision.runner import run_playbook  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
RELEASES = {"debian11": ("Debian", "11"), "debian12": ("Debian", "12"),
            "debian13": ("Debian", "13"), "ubuntu24": ("Ubuntu", "24")}  # fmt: skip
INSTALLS = ("lock", "sglang-only")
CHECK = "Check the stack profile against the container's Debian release"
FACTS_MODULE = """#!/usr/bin/python
from ansible.module_utils.basic import AnsibleModule

module = AnsibleModule(argument_spec={"facts": {"type": "dict", "required": True}})
module.exit_json(changed=False, ansible_facts=module.params["facts"])
"""
PLAYBOOK = """
- name: The stack role on made-up distributions
  hosts: all
  gather_facts: false
  pre_tasks:
    - name: Stand in for the distribution facts
      glm5_test_facts:
        facts:
          distribution: "{{ test_distribution }}"
          distribution_major_version: "{{ test_major }}"
          distribution_version: "{{ test_major }}.1"
  roles:
    - glm5_stack
"""
COMBINATIONS = [
    *itertools.product(known_profiles() + ["cu999"], RELEASES, INSTALLS),
]


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, dict]:
    """{host: result of the check task} for one host per combination."""
    work = tmp_path_factory.mktemp("stack-profile")
    (work / "library").mkdir()
    (work / "library" / "glm5_test_facts.py").write_text(FACTS_MODULE)
    hosts = {}
    for profile, release, install in COMBINATIONS:
        distribution, major = RELEASES[release]
        hosts[f"{profile}-{release}-{install}"] = {
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
            "test_distribution": distribution,
            "test_major": major,
            "glm5_stack_profile": profile,
            "glm5_venv_stack": install,
        }
    inventory = work / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    playbook = work / "playbook.yml"
    playbook.write_text(PLAYBOOK)
    found: dict[str, dict] = {}

    def on_event(event: dict) -> None:
        data = event.get("event_data") or {}
        if data.get("task") == CHECK and event.get("event") in ("runner_on_ok", "runner_on_failed"):
            found[data["host"]] = {"failed": event["event"] == "runner_on_failed", **data["res"]}

    path = os.environ["PATH"]
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{path}"
    try:
        run_playbook(REPO, str(playbook), str(inventory), ["--forks", "20"], work / "log", on_event)
    finally:
        os.environ["PATH"] = path
    assert len(found) == len(hosts), (work / "log").read_text()[-3000:]
    return found


@pytest.mark.parametrize(("profile", "release", "install"), COMBINATIONS)
def test_each_combination_runs_or_is_refused_at_the_first_task(results, profile, release, install):
    result = results[f"{profile}-{release}-{install}"]
    if profile == "cu999":
        assert result["failed"] and "'cu999', which is not a stack profile" in result["msg"]
        assert "cu128" in result["msg"]
        return
    refusal = load_profile(profile).container_refusal(release, install)
    assert result["failed"] == (refusal is not None), result
    if refusal is not None:
        message = " ".join(result["msg"].split())
        assert " ".join(refusal.split()) in message
        assert f"{profile} with glm5_venv_stack {install} is refused" in message
        assert "The container play runs: cu128 on debian12 (lock, sglang-only)" in message


def test_debian13_gpu_stack_is_refused_for_the_cuda_header_clash():
    """The known clash: glibc 2.41's C23 math vs CUDA < 13.1 (the refusal names it)."""
    for profile in known_profiles():
        refusal = load_profile(profile).container_refusal("debian13", "lock")
        assert refusal and "exception specification is incompatible" in refusal
    assert load_profile("cu128").container_refusal("debian12", "lock") is None


def test_the_stack_role_is_the_container_plays_first_task():
    (play,) = yaml.safe_load((REPO / "playbooks/glm5_container.yml").read_text())
    assert "tasks" not in play
    # Before it only the skip of a container whose host waits for a reboot, and the facts:
    # nothing that installs or writes.
    actions = set()
    for task in play.get("pre_tasks", []):
        for step in task.get("block", [task]):
            actions |= {key for key in step if key.startswith("ansible.builtin.")}
    assert actions <= {"ansible.builtin.debug", "ansible.builtin.meta", "ansible.builtin.setup"}
    assert play["roles"][0]["role"] == "glm5_stack"
    # Roles that read the profile depend on it, so they work alone too.
    for role in ("glm5_cuda_toolkit", "glm5_venv", "glm5_service"):
        meta = yaml.safe_load((REPO / "roles" / role / "meta/main.yml").read_text())
        assert {"role": "glm5_stack"} in meta["dependencies"], role
