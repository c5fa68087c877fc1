"""What sglang's launch_server flags are called in each version, and which must never be used.

Facts: shared/reference/sglang-versions.md (read from the released wheels' parsers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from glm5svc.errors import ConfigError

if TYPE_CHECKING:
    from glm5svc.gpus import GpuFacts


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
}


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
