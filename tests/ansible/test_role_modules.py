"""The two custom modules of the host roles, on their pure functions."""

from __future__ import annotations

import pytest

pytest.importorskip("ansible")

from tests.support.ansible_modules import load_module  # noqa: E402

pve = load_module("library/glm5_pve_lxc_config.py")
p2p = load_module("roles/glm5_host_p2p_report/library/glm5_p2p_facts.py")

CONF = """#GPU container
arch: amd64
dev0: /dev/dri/renderD128,gid=993
hostname: glm5
lxc.cgroup2.devices.allow: c 10:200 rwm
parent: clean

[clean]
arch: amd64
dev0: /dev/dri/renderD128,gid=993
hostname: glm5
"""
GPUS = ["/dev/nvidia0,mode=0666", "/dev/nvidiactl,mode=0666"]


def test_dev_entries_take_free_indices_above_the_snapshot_section():
    text, lines = pve.render(CONF, GPUS, [], {195, 240})
    main, snapshot = text.split("\n[clean]\n")
    assert lines == ["dev1: /dev/nvidia0,mode=0666", "dev2: /dev/nvidiactl,mode=0666"]
    assert main.splitlines()[-2:] == lines
    assert snapshot == CONF.split("\n[clean]\n")[1]
    assert "lxc.cgroup2.devices.allow: c 10:200 rwm" in main  # not ours: kept


def test_render_is_idempotent_and_keeps_indices_after_proxmox_reorders():
    text, _ = pve.render(CONF, GPUS, [], {195})
    assert pve.render(text, GPUS, [], {195})[0] == text
    # pct set rewrites keys in its own order; the same entries must not be renumbered.
    reordered = text.replace("dev2: /dev/nvidiactl,mode=0666\n", "").replace(
        "arch: amd64\n", "arch: amd64\ndev2: /dev/nvidiactl,mode=0666\n", 1
    )
    assert pve.render(reordered, GPUS, [], {195})[0] == reordered


def test_switching_to_raw_keys_replaces_dev_entries_and_stale_majors():
    text, _ = pve.render(CONF, GPUS, [], {195})
    raw = [
        "lxc.cgroup2.devices.allow: c 195:* rwm",
        "lxc.cgroup2.devices.allow: c 511:* rwm",
        "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,create=file",
    ]
    text, _ = pve.render(text, [], raw, {195, 511})
    assert "/dev/nvidia0,mode" not in text and text.count("c 511:* rwm") == 1
    # The uvm major moved to 510 after a driver upgrade: 511 is owned and goes.
    moved = [line.replace("511", "510") for line in raw]
    text, _ = pve.render(text, [], moved, {195, 510, 511})
    assert "511" not in text and "c 510:* rwm" in text
    assert "lxc.cgroup2.devices.allow: c 10:200 rwm" in text
    removed, _ = pve.render(text, [], [], {195, 510})
    assert "nvidia" not in removed.split("[clean]")[0] and "c 195" not in removed


def test_raw_lines_must_be_lxc_keys():
    with pytest.raises(ValueError, match="lxc"):
        pve.normalise_raw(["dev0: /dev/nvidia0"])


def test_too_many_devices_is_refused():
    with pytest.raises(ValueError, match="do not fit"):
        pve.render(CONF, [f"/dev/nvidia{i}" for i in range(256)], [], {195})


LSPCI = """00:01.1 PCI bridge: Intel Corporation Device 09ab
\tCapabilities: [220 v1] Access Control Services
\t\tACSCap:\tSrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-
\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-
0000:17:00.0 PCI bridge: PLX Technology, Inc. PEX 89xxx
\t\tACSCtl:\tSrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-
0000:18:00.0 PCI bridge: PLX Technology, Inc. PEX 89xxx
\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-
"""


def test_acs_source_validation_is_found_per_bridge():
    assert p2p.acs_bridges(LSPCI) == ["00:01.1", "0000:18:00.0"]
    (finding,) = p2p.acs_findings(["00:01.1"])
    assert finding["topic"] == "acs" and "setpci" in finding["fix"]


@pytest.mark.parametrize(
    ("cmdline", "found"),
    [
        ("ro quiet intel_iommu=on", True),
        ("ro quiet amd_iommu=on iommu=pt", False),
        ("ro quiet", False),
        ("ro intel_iommu=off", False),
    ],
)
def test_iommu_translation_is_reported_unless_passthrough(cmdline, found):
    assert bool(p2p.iommu_findings(cmdline)) is found


def iommu_tree(root, units, group_types):
    for unit in units:
        (root / "class" / "iommu" / unit).mkdir(parents=True)
    for number, kind in enumerate(group_types):
        group = root / "kernel" / "iommu_groups" / str(number)
        group.mkdir(parents=True)
        (group / "type").write_text(kind + "\n")
    return str(root)


def test_iommu_on_by_default_is_read_from_sysfs_not_the_command_line(tmp_path):
    # A stock 6.8+ kernel: no iommu parameter, yet the groups translate DMA (DMA-FQ).
    root = iommu_tree(tmp_path / "stock", ["dmar0", "dmar1"], ["DMA-FQ", "DMA-FQ", "DMA"])
    units, types = p2p.read_iommu(root)
    assert units == ["dmar0", "dmar1"] and types == {"DMA-FQ": 2, "DMA": 1}
    found = p2p.iommu_findings("ro quiet", units, types)
    assert (
        len(found) == 1
        and "3 IOMMU group(s) of type DMA/DMA-FQ on dmar0, dmar1" in (found[0]["problem"])
    )
    # iommu=pt: every group is identity, whatever the command line says.
    root = iommu_tree(tmp_path / "pt", ["ivhd0"], ["identity", "identity"])
    assert p2p.iommu_findings("ro amd_iommu=on", *p2p.read_iommu(root)) == []
    # IOMMU off: no unit, no group; the command line is judged then.
    assert p2p.read_iommu(str(tmp_path / "none")) == ([], {})


def test_p2p_table_and_topology_findings():
    table = " \tGPU0\tGPU1\nGPU0\tX\tCNS\nGPU1\tCNS\tX\n"
    assert "CNS" in p2p.p2p_findings(table)[0]["problem"]
    assert p2p.p2p_findings(table.replace("CNS", "OK")) == []
    matrix = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tSYS\t0-47\nGPU1\tSYS\t X \t48-95\n"
    assert p2p.topology_findings(matrix)[0]["topic"] == "topology"
    assert p2p.topology_findings(matrix.replace("SYS", "PIX")) == []
