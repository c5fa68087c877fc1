"""Why a trial measured what it did, from sglang's scheduler gauges and GPU telemetry.

The reference deployment's hand search was guided by exactly these readings: GPUs at
83 W of 600 W with requests queued behind a running-request cap of 64 meant the cap,
not the GPUs, set the throughput.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# A reading this close to the cap counts as "at the cap" (sampling misses a few steps).
AT_CAP = 0.95
KV_FULL = 0.9
QUEUED_SHARE = 0.1  # of the concurrency: a queue this long on average is real


@dataclass(frozen=True)
class GaugeSample:
    running: float | None
    queued: float | None
    token_usage: float | None

    @classmethod
    def from_gauges(cls, values: dict[str, float]) -> GaugeSample:
        return cls(
            values.get("sglang:num_running_reqs"),
            values.get("sglang:num_queue_reqs"),
            values.get("sglang:token_usage"),
        )


def diagnose_run(runs: Sequence[Any], cap: int, concurrency: int, config: Any) -> list[str]:
    """What bounded the trial's measured runs, each finding with the setting to change."""
    if not runs:
        return []
    findings = []
    running = max((r.running_max for r in runs if r.running_max is not None), default=None)
    queued = _mean([r.queue_mean for r in runs])
    usage = max((r.token_usage_max for r in runs if r.token_usage_max is not None), default=None)
    power = _mean([r.power_share for r in runs])
    queue_is_real = queued is not None and queued >= QUEUED_SHARE * concurrency
    if running is not None and running >= AT_CAP * cap and queue_is_real:
        findings.append(
            f"bound by the running-request cap: {running:.0f} running (cap {cap}) with "
            f"{queued:.0f} queued on average; raise tuning.max_running_requests"
        )
    elif usage is not None and usage >= KV_FULL and queue_is_real:
        findings.append(
            f"KV cache full: {usage:.0%} of the pool used with {queued:.0f} queued; raise "
            "tuning.mem_fraction_static or lower the page size (--page-size)"
        )
    threshold = config.benchmark.underused_power_share
    if power is not None and power < threshold:
        findings.append(
            f"GPU power low: {power:.0%} of the limit on average (under {threshold:.0%}): "
            "the GPUs wait on the cap, the queue, the host or PCIe"
        )
    return findings


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None
