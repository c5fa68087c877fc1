"""What the supervisor's threads and signal handlers report on its queue.

The output reader, the probe threads and the post-READY hook only put these; the
supervision loop (glm5svc.serve.supervisor) takes them off and decides.
"""

from __future__ import annotations

from dataclasses import dataclass

from glm5svc.records import BenchmarkStatus
from glm5svc.serve.phases import LineInfo
from glm5svc.serve.probes import ProbeResult


@dataclass(frozen=True)
class EngineLine:
    info: LineInfo
    at: float


@dataclass(frozen=True)
class OutputClosed:
    at: float


@dataclass(frozen=True)
class ReadinessChecked:
    health: ProbeResult
    port: ProbeResult | None = None
    generation: ProbeResult | None = None
    at: float = 0.0

    @property
    def failure(self) -> ProbeResult | None:
        """The first check that failed; a missing generation check is one."""
        checks = (self.health, self.port, self.generation)
        failed = next((check for check in checks if check and not check.ok), None)
        if failed is None and self.generation is None:
            return ProbeResult(False, "no generation check")
        return failed


@dataclass(frozen=True)
class HealthPassed:
    """Start-up: sglang is up (its ready line, or /health_generate); the generation check
    comes next."""


@dataclass(frozen=True)
class HealthProbed:
    counters_before: dict | None
    result: ProbeResult
    counters_after: dict | None
    at: float


@dataclass(frozen=True)
class DrainCounters:
    counters: dict | None
    at: float


@dataclass(frozen=True)
class HookFinished:
    result: BenchmarkStatus | None


@dataclass(frozen=True)
class SignalReceived:
    signum: int


Event = (
    EngineLine
    | OutputClosed
    | ReadinessChecked
    | HealthPassed
    | HealthProbed
    | DrainCounters
    | HookFinished
    | SignalReceived
)
