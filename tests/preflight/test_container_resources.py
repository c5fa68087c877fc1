"""The container-resources preflight check on made-up /sys and /proc trees."""

from __future__ import annotations

from pathlib import Path
from resource import RLIM_INFINITY

from glm5svc.config import config_from_mapping
from glm5svc.facts import HostFacts
from glm5svc.hostfacts.limits import MIN_NOFILE
from glm5svc.preflight.container import (
    check_container_resources,
    gpu_numa_nodes,
    read_cgroup_limits,
)
from glm5svc.preflight.limits import rlimit_rows
from glm5svc.preflight.rows import OK, UNKNOWN, WARN, PreflightContext
from glm5svc.preflight.run import default_checks
from glm5svc.proc_limits import read_proc_limits

NODE0, NODE1 = "0-31,64-95", "32-63,96-127"
LIMITS_GOOD = """Limit                     Soft Limit           Hard Limit           Units
Max cpu time              unlimited            unlimited            seconds
Max open files            1048576              1048576              files
Max locked memory         unlimited            unlimited            bytes
"""
LIMITS_LXC_DEFAULT = LIMITS_GOOD.replace(
    "Max open files            1048576              1048576",
    "Max open files            1024                 524288 ",
).replace(
    "Max locked memory         unlimited            unlimited", "Max locked memory  8388608 8388608"
)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def make_tree(root: Path, *, v2=True, cpus="0-47", memory=str(256 * 2**30), quota="max 100000",
              limits=LIMITS_GOOD, gpu_nodes=(0, 0, 0, 0, 1, 1, 1, 1)):  # fmt: skip
    sys_root, proc_root = root / "sys", root / "proc"
    cgroup = sys_root / "fs" / "cgroup"
    if v2:
        _write(proc_root / "self" / "cgroup", "0::/system.slice/glm5.service")
        _write(cgroup / "cgroup.controllers", "cpuset cpu io memory pids")
        _write(cgroup / "cpu.max", quota)
        _write(cgroup / "memory.max", memory)
        _write(cgroup / "cpuset.cpus.effective", cpus)
        unit = cgroup / "system.slice" / "glm5.service"
        _write(unit / "memory.max", "max")
        _write(unit / "cpu.max", "max 100000")
    else:
        _write(cgroup / "cpu" / "cpu.cfs_quota_us", "-1")
        _write(cgroup / "cpu" / "cpu.cfs_period_us", "100000")
        _write(cgroup / "cpuset" / "cpuset.effective_cpus", cpus)
        _write(cgroup / "memory" / "memory.limit_in_bytes", memory)
    _write(proc_root / "self" / "limits", limits)
    for number, node in enumerate(gpu_nodes):
        device = sys_root / "bus" / "pci" / "devices" / f"0000:{number + 1:02x}:00.0"
        _write(device / "vendor", "0x10de")
        _write(device / "class", "0x030200")
        _write(device / "numa_node", str(node))
    nic = sys_root / "bus" / "pci" / "devices" / "0000:c2:00.0"
    _write(nic / "vendor", "0x15b3")
    _write(nic / "class", "0x020700")
    _write(nic / "numa_node", "1")
    _write(sys_root / "devices" / "system" / "node" / "node0" / "cpulist", NODE0)
    _write(sys_root / "devices" / "system" / "node" / "node1" / "cpulist", NODE1)
    return sys_root, proc_root


def rows(tmp_path, affinity, **tree):
    sys_root, proc_root = make_tree(tmp_path, **tree)
    ctx = no_gpu_context(config_from_mapping({}))
    found = check_container_resources(ctx, sys_root, proc_root, affinity=set(affinity))
    return {row.name: row for row in found}


def _cpus(text):
    from glm5svc.preflight.container import parse_cpulist

    return parse_cpulist(text)


def test_a_well_placed_container_passes(tmp_path):
    found = rows(tmp_path, _cpus("0-15,32-47"), cpus="0-15,32-47")
    assert {row.status for row in found.values()} == {OK}, found
    assert found["container cpus"].detail.startswith("32 usable CPUs (cgroup v2); 8 GPU ranks")
    assert found["container memory"].detail == "limit 256 GiB (cgroup v2)"
    assert (
        "memlock unlimited/unlimited, nofile 1048576/1048576" in found["container rlimits"].detail
    )
    assert found["gpu numa placement"].detail.endswith("node 0: 16, node 1: 16")


def test_tightest_limit_on_the_way_up_counts_in_v2(tmp_path):
    sys_root, proc_root = make_tree(tmp_path, memory=str(32 * 2**30), quota="800000 100000")
    limits = read_cgroup_limits(sys_root, proc_root)
    assert (limits.version, limits.cpu_quota, limits.memory_max) == (2, 8.0, 32 * 2**30)
    assert limits.cpuset == list(range(48))


def test_small_container_warns_with_the_host_variables(tmp_path):
    found = rows(tmp_path, range(8), cpus="0-7", memory=str(16 * 2**30), quota="400000 100000")
    cpus, memory = found["container cpus"], found["container memory"]
    assert cpus.status == WARN and "quota 4 CPUs" in cpus.detail and "want >= 16" in cpus.detail
    assert "glm5_host_lxc_resources_cores" in cpus.fix
    assert memory.status == WARN and "limit 16 GiB" in memory.detail
    assert "glm5_host_lxc_resources_memory_mb" in memory.fix


def test_lxc_default_rlimits_warn_naming_the_prlimit_keys(tmp_path):
    found = rows(tmp_path, range(48), limits=LIMITS_LXC_DEFAULT)
    row = found["container rlimits"]
    assert row.status == WARN and "memlock 8388608/8388608, nofile 1024/524288" in row.detail
    assert "lxc.prlimit.memlock: unlimited" in row.fix
    assert read_proc_limits(tmp_path / "proc")["nofile"] == ("1024", "524288")


def test_both_open_file_rows_judge_against_the_one_threshold(tmp_path):
    """The unit's RLIMIT_NOFILE row and the container's row agree: sglang's own target
    (65535) is enough in both, one less warns in both."""
    for hard, expected in ((MIN_NOFILE, OK), (MIN_NOFILE - 1, WARN)):
        limits = LIMITS_GOOD.replace(
            "Max open files            1048576              1048576",
            f"Max open files            {hard}              {hard}",
        )
        container = rows(tmp_path / str(hard), range(48), limits=limits)["container rlimits"]
        unit, _ = rlimit_rows(hard, RLIM_INFINITY, "made up")
        assert (container.status, unit.status) == (expected, expected), (container, unit)
        if expected == WARN:
            assert f"nofile >= {MIN_NOFILE}" in container.detail
            assert f"soft limit to {MIN_NOFILE}" in unit.detail
            assert "lxc.prlimit.nofile: 1048576" in container.fix


def test_cpus_off_the_gpu_nodes_or_a_node_without_cpus_warn(tmp_path):
    one_node = rows(tmp_path / "a", range(32), cpus="0-31")
    assert one_node["gpu numa placement"].status == WARN
    assert "node 1: 0" in one_node["gpu numa placement"].detail
    four_gpus = rows(tmp_path / "b", range(48), gpu_nodes=(1, 1, 1, 1))
    assert four_gpus["gpu numa placement"].status == WARN
    assert "32 CPUs on other nodes" in four_gpus["gpu numa placement"].detail


def test_cgroup_v1_and_unknown_numa(tmp_path):
    found = rows(tmp_path, range(64), v2=False, cpus="0-63", gpu_nodes=(-1,) * 8)
    assert found["container memory"].detail == "limit 256 GiB (cgroup v1)"
    assert found["gpu numa placement"].status == UNKNOWN
    assert gpu_numa_nodes(tmp_path / "sys") == {}
    unlimited = rows(tmp_path / "u", range(64), v2=False, memory=str(2**63 - 4096))
    assert unlimited["container memory"].detail == "no limit (cgroup v1)"


def test_nothing_readable_is_unknown_not_an_error(tmp_path):
    ctx = no_gpu_context(config_from_mapping({}))
    found = {r.name: r for r in check_container_resources(ctx, tmp_path, tmp_path, affinity={0})}
    assert found["container memory"].status == UNKNOWN
    assert found["container rlimits"].status == UNKNOWN
    assert found["gpu numa placement"].status == UNKNOWN


def test_registered_in_default_checks():
    assert check_container_resources in default_checks()


def no_gpu_context(config) -> PreflightContext:
    return PreflightContext(config, HostFacts.given(config, nvml_error="no driver"))
