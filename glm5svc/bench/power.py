"""GPU figures for one level, from a telemetry window that spans exactly its measured run.

The sampler (glm5svc.telemetry.Sampler) is used through a two-method protocol so that a
benchmark without NVML, or a test, can pass anything with the same shape.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Protocol

from glm5svc.telemetry.window_stats import (
    GpuWindowStats,
    WindowStats,
    max_known,
    mean_known,
    total_or_none,
)

GB = 1e9


class WindowSampler(Protocol):
    def open_window(self, label: str = "") -> Any: ...

    def close_window(self, window: Any) -> Any: ...


@dataclass(frozen=True)
class GpuFigures:
    gpu: int
    average_power_w: float | None
    peak_power_w: float | None
    power_limit_w: float | None
    power_share_of_limit: float | None
    peak_power_share_of_limit: float | None
    gpu_utilization: float | None  # ratio 0-1
    energy_joules: float | None
    pcie_tx_gb_per_s: float | None
    pcie_rx_gb_per_s: float | None
    power_limited_s: float
    thermal_limited_s: float

    @classmethod
    def from_window(cls, gpu: GpuWindowStats, duration: float | None) -> GpuFigures:
        """The figures a level keeps of one GPU's window: the fields of the same name, the
        utilisation, and PCIe bytes as GB/s over the window."""

        def rate(nbytes: int | None) -> float | None:
            return nbytes / duration / GB if nbytes is not None and duration else None

        same = {f.name: getattr(gpu, f.name) for f in fields(cls) if hasattr(gpu, f.name)}
        return cls(
            **{
                **same,
                "gpu_utilization": gpu.mean_gpu_utilization,
                "pcie_tx_gb_per_s": rate(gpu.pcie_tx_bytes),
                "pcie_rx_gb_per_s": rate(gpu.pcie_rx_bytes),
                "power_limited_s": float(gpu.power_limited_s or 0.0),
                "thermal_limited_s": float(gpu.thermal_limited_s or 0.0),
            }
        )


@dataclass(frozen=True)
class LevelTelemetry:
    available: bool
    reason: str | None = None  # why not available
    window_s: float | None = None
    energy_joules: float | None = None  # all GPUs
    joules_per_output_token: float | None = None
    joules_per_token: float | None = None  # per input + output token
    mean_power_w: float | None = None  # per GPU, averaged over GPUs
    max_peak_power_w: float | None = None
    mean_power_share: float | None = None  # of the enforced limit, averaged over GPUs
    max_power_share: float | None = None  # the busiest GPU's average share
    max_peak_power_share: float | None = None
    mean_gpu_utilization: float | None = None
    pcie_tx_gb_per_s: float | None = None  # all GPUs together
    pcie_rx_gb_per_s: float | None = None
    power_limited_s: float | None = None  # the most of any GPU
    thermal_limited_s: float | None = None
    gpus: list[GpuFigures] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LevelTelemetry:
        gpus = [GpuFigures(**g) for g in data.get("gpus", [])]
        return cls(**{**data, "gpus": gpus})


def unavailable(reason: str) -> LevelTelemetry:
    return LevelTelemetry(available=False, reason=reason)


def level_telemetry(
    stats: WindowStats, output_tokens: int | None, input_tokens: int | None
) -> LevelTelemetry:
    """Reduce a WindowStats to the level's figures; tokens turn energy into J/token."""
    if not getattr(stats, "available", False) or not getattr(stats, "gpus", None):
        return unavailable(getattr(stats, "reason", None) or "no GPU telemetry in the window")
    duration = float(stats.duration_s) or None
    gpus = [GpuFigures.from_window(g, duration) for g in stats.gpus]
    energy = stats.energy_joules
    total_tokens = (output_tokens or 0) + (input_tokens or 0)
    return LevelTelemetry(
        available=True,
        window_s=duration,
        energy_joules=energy,
        joules_per_output_token=energy / output_tokens if energy and output_tokens else None,
        joules_per_token=energy / total_tokens if energy and total_tokens else None,
        mean_power_w=mean_known(g.average_power_w for g in gpus),
        max_peak_power_w=max_known(g.peak_power_w for g in gpus),
        mean_power_share=mean_known(g.power_share_of_limit for g in gpus),
        max_power_share=max_known(g.power_share_of_limit for g in gpus),
        max_peak_power_share=max_known(g.peak_power_share_of_limit for g in gpus),
        mean_gpu_utilization=mean_known(g.gpu_utilization for g in gpus),
        pcie_tx_gb_per_s=total_or_none(g.pcie_tx_gb_per_s for g in gpus),
        pcie_rx_gb_per_s=total_or_none(g.pcie_rx_gb_per_s for g in gpus),
        power_limited_s=max_known(g.power_limited_s for g in gpus),
        thermal_limited_s=max_known(g.thermal_limited_s for g in gpus),
        gpus=gpus,
    )
