"""glm5_host_lxc_resources' modules: the NUMA cpuset from sysfs and the config edits."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("ansible")

from glm5svc.hostfacts import gpu_numa as numa  # noqa: E402
from tests.support.ansible_modules import load_module  # noqa: E402

pve = load_module("library/glm5_pve_lxc_config.py")

# 2 sockets x 32 cores with SMT: node 0 = 0-31,64-95, node 1 = 32-63,96-127.
NODES = {0: "0-31,64-95", 1: "32-63,96-127"}
GPUS_2_NODES = {
    "0000:01:00.0": 0, "0000:21:00.0": 0, "0000:41:00.0": 0, "0000:61:00.0": 0,
    "0000:81:00.0": 1, "0000:a1:00.0": 1, "0000:c1:00.0": 1, "0000:e1:00.0": 1,
}  # fmt: skip


def make_sysfs(root: Path, gpus: dict[str, int], nodes: dict[int, str]) -> Path:
    def device(bdf: str, vendor: str, klass: str, node: int) -> None:
        path = root / "bus/pci/devices" / bdf
        path.mkdir(parents=True)
        for name, value in (("vendor", vendor), ("class", klass), ("numa_node", str(node))):
            (path / name).write_text(value + "\n")

    for bdf, node in gpus.items():
        device(bdf, "0x10de", "0x030200", node)
    device("0000:02:00.1", "0x10de", "0x040300", 0)  # the GPU's audio function: not a GPU
    device("0000:c2:00.0", "0x15b3", "0x020700", 1)  # a NIC
    for node, cpulist in nodes.items():
        (root / f"devices/system/node/node{node}").mkdir(parents=True)
        (root / f"devices/system/node/node{node}/cpulist").write_text(cpulist + "\n")
    return root


def test_cpulist_round_trip():
    assert numa.parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert numa.format_cpulist([11, 0, 1, 2, 3, 8, 10]) == "0-3,8,10-11"
    assert numa.format_cpulist([]) == ""


def test_eight_gpus_over_two_numa_nodes_give_both_nodes(tmp_path):
    root = make_sysfs(tmp_path, GPUS_2_NODES, NODES)
    gpus = numa.nvidia_gpus(str(root))
    assert [bdf for bdf, _ in gpus] == sorted(GPUS_2_NODES)  # no audio function, no NIC
    found = numa.placement(gpus, numa.node_cpus(str(root)))
    assert found["numa_nodes"] == [0, 1]
    assert found["cpuset_cpus"] == "0-127"
    assert found["cpuset_mems"] == "0,1"
    assert found["cpu_count"] == 128 and found["reason"] == ""


def test_gpus_on_one_node_pin_to_that_node(tmp_path):
    four = {bdf: node for bdf, node in GPUS_2_NODES.items() if node == 1}
    root = make_sysfs(tmp_path, four, NODES)
    found = numa.placement(numa.nvidia_gpus(str(root)), numa.node_cpus(str(root)))
    assert (found["cpuset_cpus"], found["cpuset_mems"]) == ("32-63,96-127", "1")
    assert found["cpu_count"] == 64


def test_no_numa_information_gives_no_cpuset_and_says_why(tmp_path):
    root = make_sysfs(tmp_path, dict.fromkeys(GPUS_2_NODES, -1), {0: "0-15"})
    found = numa.placement(numa.nvidia_gpus(str(root)), numa.node_cpus(str(root)))
    assert found["cpuset_cpus"] == "" and "numa_node -1" in found["reason"]
    empty = numa.placement([], {0: [0]})
    assert empty["cpuset_cpus"] == "" and "no NVIDIA GPU" in empty["reason"]


CONF = """#GPU container
arch: amd64
cores: 32
dev0: /dev/nvidia0,mode=0666
memory: 262144
mp0: local-lvm:vm-200-disk-1,mp=/data,size=8G
swap: 0
lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,create=file
lxc.prlimit.nofile: 4096
parent: clean

[clean]
cores: 32
memory: 262144
lxc.prlimit.nofile: 4096
"""
RULE = pve.Ownership(
    gpu_lines=False,
    raw_keys=frozenset({"lxc.prlimit.memlock", "lxc.prlimit.nofile", "lxc.cgroup2.cpuset.cpus"}),
    mount_targets=frozenset({"models/GLM-5-NVFP4"}),
)
MODEL_MP = "/srv/models/GLM-5-NVFP4,mp=/models/GLM-5-NVFP4,ro=1"
LIMITS = ["lxc.prlimit.memlock: unlimited", "lxc.prlimit.nofile: 1048576"]


def _render(text, mount_points=(), raw=(), options=None):
    return pve.render(
        text, [], list(raw), set(), rule=RULE, mount_points=list(mount_points), options=options
    )[0]


def test_mount_point_limits_and_sizes_above_the_snapshot_leaving_gpu_lines_alone():
    options = {"cores": "48", "memory": "393216", "swap": "0"}
    text = _render(CONF, [MODEL_MP], LIMITS, options)
    main, snapshot = text.split("\n[clean]\n")
    assert snapshot == CONF.split("\n[clean]\n")[1]
    lines = main.splitlines()
    assert "mp1: " + MODEL_MP in lines  # mp0 is taken by another volume
    assert "mp0: local-lvm:vm-200-disk-1,mp=/data,size=8G" in lines
    assert lines[-2:] == LIMITS and "lxc.prlimit.nofile: 4096" not in lines
    assert "cores: 48" in lines and lines.index("cores: 48") == 2  # changed in place
    assert "dev0: /dev/nvidia0,mode=0666" in lines
    assert "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,create=file" in lines
    assert _render(text, [MODEL_MP], LIMITS, options) == text  # idempotent


def test_raw_mount_replaces_the_mount_point_and_absent_removes_only_owned_lines():
    text = _render(CONF, [MODEL_MP], LIMITS)
    entry = (
        "lxc.mount.entry: /srv/models/GLM-5-NVFP4 models/GLM-5-NVFP4 none bind,ro,create=dir 0 0"
    )
    raw = _render(text, [], [entry, *LIMITS])
    assert "mp1:" not in raw and entry in raw.splitlines()
    assert _render(raw, [], [entry, *LIMITS]) == raw
    removed = _render(raw)
    assert "GLM-5" not in removed and "lxc.prlimit" not in removed.split("[clean]")[0]
    assert "dev0: /dev/nvidia0,mode=0666" in removed and "mp0: local-lvm" in removed


def test_gpu_role_keeps_the_resource_lines():
    text = _render(CONF, [MODEL_MP], LIMITS)
    gpu = pve.render(text, ["/dev/nvidia0,mode=0666", "/dev/nvidiactl,mode=0666"], [], {195})[0]
    assert "mp1: " + MODEL_MP in gpu and all(line in gpu for line in LIMITS)
    assert "dev1: /dev/nvidiactl,mode=0666" in gpu


def test_options_must_be_plain_keys():
    with pytest.raises(ValueError, match="plain Proxmox key"):
        pve.normalise_options({"mp0": "x"})
    assert pve.normalise_options({"cores": 8, "swap": None}) == {"cores": "8"}
