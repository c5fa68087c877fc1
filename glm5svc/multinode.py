"""sglang's multi-node flags and environment from the config's multinode section.

sglang 0.5.10.post1 `ServerArgs` (srt/server_args.py): `--nnodes` (default 1), `--node-rank`
(default 0), `--dist-init-addr` (default None; rank 0's host:port, where torch.distributed's
TCPStore rendezvous listens). `--tp-size` counts the GPUs of every node. NCCL picks its
socket interface itself unless NCCL_SOCKET_IFNAME names it (gloo: GLOO_SOCKET_IFNAME).
Returns (kind, name, value, reason) rows; launch_plan turns them into plan entries.
"""

from __future__ import annotations

from glm5svc.config import Config

Row = tuple[str, str, str | None, str]


def tensor_parallel_size(config: Config, gpus_per_node: int) -> tuple[int, str]:
    """(--tp-size, why): every node's GPUs together."""
    nodes = config.multinode.nnodes
    if nodes == 1:
        return gpus_per_node, "tensor parallel size = GPUs used"
    return gpus_per_node * nodes, (
        f"tensor parallel size = {gpus_per_node} GPUs x {nodes} nodes (multinode.nnodes): "
        "sglang counts every node's GPUs"
    )


def multinode_rows(config: Config) -> list[Row]:
    section = config.multinode
    if section.nnodes == 1:
        return []
    rows: list[Row] = [
        ("flag", "--nnodes", str(section.nnodes), "multinode.nnodes: hosts in this one engine"),
        (
            "flag",
            "--node-rank",
            str(section.node_rank),
            "multinode.node_rank: this host's rank (rank 0 serves HTTP, the others compute)",
        ),
        (
            "flag",
            "--dist-init-addr",
            section.dist_init_addr,
            "multinode.dist_init_addr: rank 0's rendezvous address, the same on every node",
        ),
    ]
    if section.nccl_socket_ifname:
        for name in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
            rows.append(
                (
                    "env",
                    name,
                    section.nccl_socket_ifname,
                    "multinode.nccl_socket_ifname: the interface between the nodes",
                )
            )
    return rows


def multinode_notes(config: Config) -> list[str]:
    section = config.multinode
    if section.nnodes == 1:
        return []
    notes = [
        f"multi-node: node {section.node_rank} of {section.nnodes}, rendezvous at "
        f"{section.dist_init_addr}; every node runs this plan with its own node_rank"
    ]
    if not section.nccl_socket_ifname:
        notes.append(
            "multinode.nccl_socket_ifname is not set: NCCL chooses the interface between the "
            "nodes itself (it may take a management or bridge interface)"
        )
    notes.append(
        "NCCL_IB_DISABLE=1 stays (sockets between the nodes); with InfiniBand/RoCE set "
        "server.env NCCL_IB_DISABLE: '0'"
    )
    return notes
