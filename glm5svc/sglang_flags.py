"""What sglang's launch_server flags are called in each version, and which must never be used.

The one table of flag history (FLAG_HISTORY) is data read from the released wheels'
`sglang/srt/server_args.py` (0.5.1 .. 0.5.23); docs/targets.md lists it with its sources.
The tests check it against the real parser of every profile's sglang and against the
cached wheels' server_args.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from packaging.version import Version

from glm5svc.errors import ConfigError

if TYPE_CHECKING:
    from glm5svc.gpus import GpuFacts

# The oldest and newest sglang whose parsers the table was read from.
CHECKED_VERSIONS = (Version("0.5.1"), Version("0.5.23"))


@dataclass(frozen=True)
class FlagHistory:
    since: str | None = None  # first version that has it (None: 0.5.1 or earlier)
    removed_in: str | None = None  # first version without it
    deprecated_from: str | None = None  # first version that warns about it
    replacement: str = ""  # what to use instead, once deprecated or removed

    def exists_in(self, version: Version) -> bool:
        if self.since and version < Version(self.since):
            return False
        return not (self.removed_in and version >= Version(self.removed_in))

    def deprecated_in(self, version: Version) -> bool:
        return bool(self.deprecated_from) and version >= Version(self.deprecated_from)


FLAG_HISTORY: dict[str, FlagHistory] = {
    # DeepSeek-style sparse attention (DSA/NSA) kernels: renamed 0.5.13, old names gone 0.5.20.
    "--nsa-decode-backend": FlagHistory(removed_in="0.5.20", replacement="--dsa-decode-backend"),
    "--nsa-prefill-backend": FlagHistory(removed_in="0.5.20", replacement="--dsa-prefill-backend"),
    "--dsa-decode-backend": FlagHistory(since="0.5.13"),
    "--dsa-prefill-backend": FlagHistory(since="0.5.13"),
    "--disable-cuda-graph": FlagHistory(
        deprecated_from="0.5.14", replacement="the --cuda-graph-backend-* options"
    ),
    # The decode CUDA graph ceiling: its own flag from 0.5.14 (server_args.py, a deprecated
    # action names it the replacement), the old one gone in 0.5.20.
    "--cuda-graph-max-bs": FlagHistory(
        deprecated_from="0.5.14", removed_in="0.5.20", replacement="--cuda-graph-max-bs-decode"
    ),
    "--cuda-graph-max-bs-decode": FlagHistory(since="0.5.14"),
    "--fp4-gemm-backend": FlagHistory(since="0.5.8"),
}

# One option, several spellings over the versions: the first that exists is used.
SPELLINGS: dict[str, tuple[str, ...]] = {
    "sparse_decode_backend": ("--dsa-decode-backend", "--nsa-decode-backend"),
    "sparse_prefill_backend": ("--dsa-prefill-backend", "--nsa-prefill-backend"),
    "decode_graph_ceiling": ("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs"),
}


def flag_exists(name: str, version: str | Version) -> bool:
    """Does sglang `version` have the flag? Flags not in the table exist in every version."""
    history = FLAG_HISTORY.get(name)
    return history is None or history.exists_in(Version(str(version)))


def flag_name(option: str, version: str | Version) -> str:
    """How sglang `version` spells `option` (a key of SPELLINGS), e.g. --nsa-decode-backend."""
    for name in SPELLINGS[option]:
        if flag_exists(name, version):
            return name
    raise ConfigError(f"sglang {version} has none of {', '.join(SPELLINGS[option])}")


def version_problem(name: str, version: str | Version) -> str | None:
    """Why `name` cannot be passed to sglang `version` (None if it can)."""
    history = FLAG_HISTORY.get(name)
    if history is None or history.exists_in(Version(str(version))):
        return None
    if history.since and Version(str(version)) < Version(history.since):
        return f"{name} exists from sglang {history.since}; this sglang is {version}"
    instead = f"; use {history.replacement}" if history.replacement else ""
    return f"{name} was removed in sglang {history.removed_in}; this sglang is {version}{instead}"


def deprecation_note(name: str, version: str | Version) -> str | None:
    history = FLAG_HISTORY.get(name)
    if history is None or not history.deprecated_in(Version(str(version))):
        return None
    return (
        f"{name} is deprecated from sglang {history.deprecated_from} "
        f"(use {history.replacement}); this sglang is {version}"
    )


# sglang derives a gRPC port from --port (port + 10000, or SGLANG_GRPC_PORT) and refuses to
# start when it is past 65535: "SGLANG_GRPC_PORT (70011) must be between 1 and 65535"
# (0.5.11 server_args.py, _handle_deprecated_args; 0.5.10.post1 has no such port; seen on
# the H200 when a trial's port was 60011).
GRPC_PORT_OFFSET = 10000
GRPC_PORT_SINCE = Version("0.5.11")


def port_problem(port: int, version: str | Version, env: dict[str, str]) -> str | None:
    """Why sglang `version` would refuse server.port at start (None if it would not)."""
    if Version(str(version)) < GRPC_PORT_SINCE or "SGLANG_GRPC_PORT" in env:
        return None
    if port + GRPC_PORT_OFFSET <= 65535:
        return None
    return (
        f"server.port {port}: sglang {version} puts its gRPC port at port + "
        f"{GRPC_PORT_OFFSET} = {port + GRPC_PORT_OFFSET}, past 65535, and refuses to start; "
        f"use a port up to {65535 - GRPC_PORT_OFFSET}, or set SGLANG_GRPC_PORT in server.env"
    )


@dataclass(frozen=True)
class ForbiddenFlag:
    reason: str
    fix: str
    sm120_only: bool = False

    def applies(self, gpus: GpuFacts) -> bool:
        return not self.sm120_only or gpus.is_sm120_family


FORBIDDEN_FLAGS = {
    "--enable-flashinfer-allreduce-fusion": ForbiddenFlag(
        reason=(
            "the TRT-LLM allreduce fusion kernels support only SM90/SM100: on SM120 it does "
            "nothing up to sglang 0.5.13 and is a hard error from 0.5.14; on the reference "
            "deployment it cut throughput to 236 tok/s (-75%)"
        ),
        fix="remove it from server.extra_args",
        sm120_only=True,
    ),
    "--num-continuous-decode-steps": ForbiddenFlag(
        reason="sglang 0.5.1-0.5.23 parse it but read it nowhere: it would change nothing",
        fix="remove it from server.extra_args",
    ),
    "--tp": ForbiddenFlag(
        reason="--tp is not a flag, only an argparse abbreviation of --tp-size",
        fix="set gpus.expected_count (tensor parallel size = GPUs used)",
    ),
    # A key in argv is visible to every local user (ps, /proc/PID/cmdline) and in /status.
    "--api-key": ForbiddenFlag(
        reason="a key on the command line is readable by every local user (ps) and in /status",
        fix="put the key in a 0600 file and set server.api_key_file",
    ),
    "--admin-api-key": ForbiddenFlag(
        reason="a key on the command line is readable by every local user (ps) and in /status",
        fix="leave it out of server.extra_args (sglang's admin endpoints stay closed)",
    ),
}


@dataclass(frozen=True)
class GuardedFlag:
    """A flag the plan sets from a configuration key and relies on: no other way in."""

    dest: str  # its dest in sglang's parser (tests compare it with the real parser's)
    spellings: tuple[str, ...]  # every option string the parser gives that dest
    key: str  # the configuration key that sets it
    other_dests: tuple[str, ...] = ()  # the dest's name in other versions


# sglang 0.5.10.post1 and 0.5.11 (srt/server_args.py, add_cli_args): `--model-path` and
# `--model` are one option, `--tensor-parallel-size` and `--tp-size` another (dest
# tensor_parallel_size, copied to tp_size), `--dist-init-addr` and the older
# `--nccl-init-addr` a third. launch_server's parser also takes any unambiguous prefix of a
# long option (argparse's allow_abbrev), so `--tensor-parallel 4` is `--tp-size 4`.
GUARDED_FLAGS: tuple[GuardedFlag, ...] = (
    GuardedFlag("model_path", ("--model-path", "--model"), "model.path"),
    GuardedFlag("tokenizer_path", ("--tokenizer-path",), "model.tokenizer_path"),
    GuardedFlag("served_model_name", ("--served-model-name",), "model.served_name"),
    GuardedFlag("host", ("--host",), "server.host"),
    GuardedFlag("port", ("--port",), "server.port"),
    GuardedFlag(
        "tensor_parallel_size",
        ("--tensor-parallel-size", "--tp-size"),
        "gpus.expected_count or gpus.visible_devices (tensor parallel size = GPUs used)",
        other_dests=("tp_size",),  # sglang 0.5.23 (arg_groups) names the dest tp_size
    ),
    GuardedFlag("nnodes", ("--nnodes",), "multinode.nnodes"),
    GuardedFlag("node_rank", ("--node-rank",), "multinode.node_rank"),
    GuardedFlag(
        "dist_init_addr", ("--dist-init-addr", "--nccl-init-addr"), "multinode.dist_init_addr"
    ),
    GuardedFlag("api_key", ("--api-key",), "server.api_key_file (a 0600 file with the key)"),
)
GUARDED_BY_SPELLING = {name: flag for flag in GUARDED_FLAGS for name in flag.spellings}
# Environment variables the plan derives from a key, and that key.
GUARDED_ENV = {"CUDA_VISIBLE_DEVICES": "gpus.visible_devices"}


def guarded_flag(name: str) -> GuardedFlag | None:
    """The guarded flag `name` reaches sglang as: a spelling, or an abbreviation of one."""
    if name in GUARDED_BY_SPELLING:
        return GUARDED_BY_SPELLING[name]
    for spelling, flag in GUARDED_BY_SPELLING.items():
        if len(name) > 2 and spelling.startswith(name):
            return flag
    return None


def abbreviation_of(name: str, known: list[str]) -> list[str]:
    """The flags in `known` that `name` abbreviates (argparse reads `--mem-frac` as
    `--mem-fraction-static`); empty when `name` is one of them or abbreviates none."""
    if name in known:
        return []
    return sorted({flag for flag in known if flag.startswith(name) and len(name) > 2})


def parse_extra_args(tokens: list[str]) -> list[tuple[str, list[str]]]:
    """['--a', '1', '--b', '--c=x'] -> [('--a', ['1']), ('--b', []), ('--c', ['x'])]."""
    pairs: list[tuple[str, list[str]]] = []
    for token in tokens:
        if token.startswith("--"):
            name, sep, value = token.partition("=")
            pairs.append((name, [value] if sep else []))
        elif pairs:
            pairs[-1][1].append(token)
        else:
            raise ConfigError(
                f"server.extra_args: {token!r} comes before any flag; extra_args must be "
                "sglang flags like ['--chunked-prefill-size', '8192']"
            )
    return pairs
