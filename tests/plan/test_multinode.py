"""One engine across hosts: the multinode section renders sglang's --nnodes, --node-rank,
--dist-init-addr (and NCCL/gloo's interface), --tp-size counts every node's GPUs, and each
profile's real sglang parser reads them back."""

from __future__ import annotations

import pytest

from glm5svc.config import config_from_mapping
from glm5svc.errors import ConfigError

from .test_launch_plan import pairs, parsed_by_sglang, plan_for

TWO_NODES = {
    "multinode": {
        "nnodes": 2,
        "node_rank": 1,
        "dist_init_addr": "10.0.0.11:20000",
        "nccl_socket_ifname": "ens1f0",
    }
}


def test_one_host_renders_no_multinode_flag():
    plan = plan_for()
    flags = pairs(plan.argv)
    assert not {"--nnodes", "--node-rank", "--dist-init-addr"} & flags.keys()
    assert flags["--tp-size"] == "8"
    assert "NCCL_SOCKET_IFNAME" not in plan.env


def test_two_nodes_render_the_flags_the_interface_and_the_tp_size():
    plan = plan_for(TWO_NODES)
    flags = pairs(plan.argv)
    assert flags["--nnodes"] == "2"
    assert flags["--node-rank"] == "1"
    assert flags["--dist-init-addr"] == "10.0.0.11:20000"
    assert flags["--tp-size"] == "16"
    assert plan.env["NCCL_SOCKET_IFNAME"] == plan.env["GLOO_SOCKET_IFNAME"] == "ens1f0"
    assert any("node 1 of 2" in note for note in plan.notes)
    tp = next(e for e in plan.entries if e.name == "--tp-size")
    assert "8 GPUs x 2 nodes" in tp.reason


def test_without_an_interface_the_plan_says_so():
    section = {k: v for k, v in TWO_NODES["multinode"].items() if k != "nccl_socket_ifname"}
    plan = plan_for({"multinode": section})
    assert "NCCL_SOCKET_IFNAME" not in plan.env
    assert any("nccl_socket_ifname is not set" in note for note in plan.notes)


@pytest.mark.parametrize(
    ("section", "words"),
    [
        ({"nnodes": 2}, "needs dist_init_addr"),
        ({"nnodes": 2, "node_rank": 2, "dist_init_addr": "h:1"}, "must be below nnodes"),
        ({"nnodes": 2, "dist_init_addr": "10.0.0.11"}, "is not host:port"),
        ({"nnodes": 2, "dist_init_addr": "10.0.0.11:99999"}, "is not host:port"),
    ],
)
def test_bad_multinode_sections_are_refused(section, words):
    with pytest.raises(ConfigError) as excinfo:
        config_from_mapping({"multinode": section})
    assert words in " ".join(excinfo.value.problems)


def test_every_profile_parser_reads_the_multinode_flags(sglang_parser_pythons):
    for profile, python in sglang_parser_pythons.items():
        plan = plan_for({**TWO_NODES, "server": {"profile": profile}})
        (parsed,), _, _ = parsed_by_sglang(python, [plan.argv[3:]])
        assert "error" not in parsed, (profile, parsed)
        dests = parsed["dests"]
        assert (dests["nnodes"], dests["node_rank"]) == (2, 1), profile
        assert dests["dist_init_addr"] == "10.0.0.11:20000"
        assert dests.get("tensor_parallel_size", dests.get("tp_size")) == 16  # tp_size: 0.5.23
