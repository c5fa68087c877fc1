"""Check rows and their statuses, and what every check gets: the preflight package's floor.

Every check module here imports this one and no other check, so no check ever imports
another to get a row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from glm5svc.config import Config
from glm5svc.facts import HostFacts
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
    """What every check gets: the configuration and the host's facts, read once
    (glm5svc.facts)."""

    config: Config
    facts: HostFacts

    @property
    def gpus(self) -> GpuFacts | None:
        """The GPUs NVML saw; None when it could not be read (nvml_error says why)."""
        return self.facts.nvml_gpus

    @property
    def nvml_error(self) -> str | None:
        return self.facts.nvml_error


Check = Callable[[PreflightContext], list[CheckRow]]
