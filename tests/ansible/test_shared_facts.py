"""Facts the Ansible modules and glm5svc both compute come from glm5svc/hostfacts, and both
sides agree on the same recorded inputs.

The modules run for real through ansible-runner with the repository's ansible.cfg (the path
`glm5svc provision` takes), so the `module_utils = glm5svc/hostfacts` setting is exercised
as it is on a Proxmox host; glm5svc's side is its preflight code on the same inputs.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("ansible_runner")

from glm5svc.hostfacts.gpu_numa import format_cpulist  # noqa: E402
from glm5svc.preflight.container import gpu_numa_nodes  # noqa: E402
from glm5svc.preflight.topology import assess  # noqa: E402
from glm5svc.provision.runner import run_playbook  # noqa: E402
from tests.ansible.test_lxc_resources_modules import GPUS_2_NODES, NODES, make_sysfs  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
RECORDINGS = REPO / "tests" / "fixtures" / "nvidia_smi"
TOPOLOGIES = {  # name: (topo -m, topo -p2p r or None)
    "h200x2": ("h200x2-topo-m.txt", "h200x2-topo-p2p-r.txt"),
    "pcie8": ("pcie8-topo-m.txt", "pcie8-topo-p2p-r-ns.txt"),
    "legacy4-soc": ("legacy4-soc-topo-m.txt", None),
}
FAKE_NVIDIA_SMI = """#!/bin/sh
case "$*" in
  "topo -m") file="$GLM5_TEST_TOPO" ;;
  "topo -p2p r") file="$GLM5_TEST_P2P" ;;
esac
[ -n "$file" ] && exec cat "$file"
echo "no recording for: $*" >&2
exit 6
"""
PLAYBOOK = """
- name: The modules on recorded inputs
  hosts: localhost
  gather_facts: false
  tasks:
    - name: P2P facts on each recorded topology
      glm5_p2p_facts:
        cmdline_path: {cmdline}
      environment:
        PATH: "{bin}:{{{{ lookup('ansible.builtin.env', 'PATH') }}}}"
        GLM5_TEST_TOPO: "{{{{ item.topo }}}}"
        GLM5_TEST_P2P: "{{{{ item.p2p }}}}"
      loop: {cases}
      register: p2p

    - name: NUMA facts on each made-up sysfs
      glm5_gpu_numa_facts:
        sysfs_root: "{{{{ item }}}}"
      loop: {sysfs}
      register: numa
"""


@pytest.fixture(scope="module")
def module_results(tmp_path_factory):
    """{task name: [result per loop item]} from one ansible-runner run of both modules."""
    work = tmp_path_factory.mktemp("shared-facts")
    bin_dir = work / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(FAKE_NVIDIA_SMI)
    (bin_dir / "nvidia-smi").chmod(0o755)
    (bin_dir / "lspci").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "lspci").chmod(0o755)
    (work / "cmdline").write_text("ro quiet iommu=pt\n")
    cases = [
        {"topo": str(RECORDINGS / topo), "p2p": str(RECORDINGS / p2p) if p2p else ""}
        for topo, p2p in TOPOLOGIES.values()
    ]
    sysfs = [
        str(make_sysfs(work / "two-nodes", GPUS_2_NODES, NODES)),
        str(make_sysfs(work / "no-node", dict.fromkeys(GPUS_2_NODES, -1), {0: "0-15"})),
    ]
    # The module of a role is found through its role: link it next to the playbook.
    (work / "library").symlink_to(REPO / "roles" / "glm5_host_p2p_report" / "library")
    playbook = work / "playbook.yml"
    playbook.write_text(
        PLAYBOOK.format(cmdline=work / "cmdline", bin=bin_dir, cases=cases, sysfs=sysfs)
    )
    inventory = work / "hosts.ini"
    inventory.write_text(
        f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}\n"
    )
    results: dict[str, list] = {}

    def on_event(event: dict) -> None:
        data = event.get("event_data") or {}
        if event.get("event") in ("runner_on_ok", "runner_on_failed"):
            results[data.get("task", "")] = (data.get("res") or {}).get("results", [])

    path = os.environ["PATH"]
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{path}"
    try:
        log = work / "provision.log"
        rc = run_playbook(REPO, str(playbook), str(inventory), [], log, on_event)
    finally:
        os.environ["PATH"] = path
    assert rc == 0, log.read_text()[-3000:]
    return results


def _glm5svc_sys_pairs(topo: str, p2p: str | None) -> tuple[int, list[str]]:
    """(count, pairs shown) of SYS links in preflight's 'gpu topology' row."""
    (row,) = [r for r in assess(topo, p2p, "SYS") if r.name == "gpu topology"]
    found = re.search(r"SYS x(\d+) \(([^)]*)\)", row.detail)
    if not found:
        return 0, []
    shown = [pair for pair in found.group(2).split() if "-" in pair]
    return int(found.group(1)), shown


def _glm5svc_p2p_not_ok(topo: str, p2p: str | None) -> tuple[int, set[str]]:
    """(count, statuses) of pairs without P2P read in preflight's 'gpu p2p read' row."""
    (row,) = [r for r in assess(topo, p2p, "SYS") if r.name == "gpu p2p read"]
    found = re.match(r"(\d+) of \d+ pairs without P2P read: (.*)", row.detail)
    if not found:
        return 0, set()
    return int(found.group(1)), set(re.findall(r"(\w+) \(", found.group(2)))


@pytest.mark.parametrize("index", range(len(TOPOLOGIES)), ids=list(TOPOLOGIES))
def test_host_report_and_container_preflight_agree_on_recorded_topologies(module_results, index):
    topo_file, p2p_file = list(TOPOLOGIES.values())[index]
    topo = (RECORDINGS / topo_file).read_text()
    p2p = (RECORDINGS / p2p_file).read_text() if p2p_file else None
    result = module_results["P2P facts on each recorded topology"][index]
    assert result["topology"] == topo  # the module really read the recording

    count, shown = _glm5svc_sys_pairs(topo, p2p)
    cross = result["cross_socket_pairs"]
    assert len(cross) == count
    assert [pair.replace("GPU", "") for pair in cross[: len(shown)]] == shown
    assert any(f["topic"] == "topology" for f in result["findings"]) == (count > 0)

    count, statuses = _glm5svc_p2p_not_ok(topo, p2p)
    not_ok = result["p2p_not_ok_pairs"]
    assert len(not_ok) == count and set(not_ok.values()) == statuses
    # Nothing in the recordings is unreadable to either side.
    assert not any("cannot read" in f["problem"] for f in result["findings"])


def test_soc_and_colour_codes_are_read_alike():
    """The cases the role's old parser got wrong: SOC (old drivers) and ANSI-coloured headers."""
    legacy = (RECORDINGS / "legacy4-soc-topo-m.txt").read_text()
    assert "SOC" in legacy and "SYS" not in legacy.split("Legend")[0]
    assert _glm5svc_sys_pairs(legacy, None) == (4, ["0-2", "0-3", "1-2", "1-3"])
    assert "\x1b[" in (RECORDINGS / "h200x2-topo-m.txt").read_text()


def test_host_cpuset_and_container_numa_check_agree(module_results, tmp_path):
    two_nodes, no_node = module_results["NUMA facts on each made-up sysfs"]
    root = make_sysfs(tmp_path, GPUS_2_NODES, NODES)
    seen_inside = gpu_numa_nodes(root)
    assert sorted(seen_inside) == two_nodes["numa_nodes"] == [0, 1]
    all_cpus = [cpu for cpus in seen_inside.values() for cpu in cpus]
    assert format_cpulist(all_cpus) == two_nodes["cpuset_cpus"] == "0-127"
    assert two_nodes["cpu_count"] == len(set(all_cpus))

    unknown = make_sysfs(tmp_path / "unknown", dict.fromkeys(GPUS_2_NODES, -1), {0: "0-15"})
    assert gpu_numa_nodes(unknown) == {}
    assert no_node["cpuset_cpus"] == "" and "numa_node -1" in no_node["reason"]
