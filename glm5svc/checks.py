"""Check rows and their statuses: what every preflight check returns.

The checks (preflight, container_resources, model_check, topology, patches.preflight) all
import this module; it imports none of them, so no check ever imports another to get a row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from glm5svc.config import Config
from glm5svc.gpus import GpuFacts

OK, WARN, FAIL, UNKNOWN = "ok", "warn", "fail", "unknown"
STATUSES = (OK, WARN, FAIL, UNKNOWN)

UNIVERSAL = "universal"  # a row that holds on any GPU machine the service runs on


@dataclass(frozen=True)
class CheckRow:
    name: str
    status: str
    detail: str
    fix: str = ""
    # Which machines the row's rule is about: UNIVERSAL, or a target's name for a rule that
    # only that target needs (a row about a different target's rule is not a failure here).
    scope: str = UNIVERSAL
    # The row fails because this machine has no NVIDIA GPU or kernel driver (a lab, CI):
    # expected there, a real failure on the target.
    no_gpu: bool = False


@dataclass
class PreflightContext:
    """What every check gets: the configuration and the GPUs NVML saw (None: why not)."""

    config: Config
    gpus: GpuFacts | None
    nvml_error: str | None


Check = Callable[[PreflightContext], list[CheckRow]]
