"""GPU figures for one level, from a telemetry window that spans exactly its measured run.

The sampler (glm5svc.telemetry.Sampler) is used through a two-method protocol so that a
benchmark without NVML, or a test, can pass anything with the same shape.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

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
    stats: Any, output_tokens: int | None, input_tokens: int | None
) -> LevelTelemetry:
    """Reduce a WindowStats to the level's figures; tokens turn energy into J/token."""
    if not getattr(stats, "available", False) or not getattr(stats, "gpus", None):
        return unavailable(getattr(stats, "reason", None) or "no GPU telemetry in the window")
    duration = float(stats.duration_s) or None
    gpus = [_gpu_figures(g, duration) for g in stats.gpus]
    energy = _sum([g.energy_joules for g in gpus])
    total_tokens = (output_tokens or 0) + (input_tokens or 0)
    return LevelTelemetry(
        available=True,
        window_s=duration,
        energy_joules=energy,
        joules_per_output_token=energy / output_tokens if energy and output_tokens else None,
        joules_per_token=energy / total_tokens if energy and total_tokens else None,
        mean_power_w=_mean([g.average_power_w for g in gpus]),
        max_peak_power_w=_max([g.peak_power_w for g in gpus]),
        mean_power_share=_mean([g.power_share_of_limit for g in gpus]),
        max_power_share=_max([g.power_share_of_limit for g in gpus]),
        max_peak_power_share=_max([g.peak_power_share_of_limit for g in gpus]),
        mean_gpu_utilization=_mean([g.gpu_utilization for g in gpus]),
        pcie_tx_gb_per_s=_sum([g.pcie_tx_gb_per_s for g in gpus]),
        pcie_rx_gb_per_s=_sum([g.pcie_rx_gb_per_s for g in gpus]),
        power_limited_s=_max([g.power_limited_s for g in gpus]),
        thermal_limited_s=_max([g.thermal_limited_s for g in gpus]),
        gpus=gpus,
    )


def _gpu_figures(gpu: Any, duration: float | None) -> GpuFigures:
    def rate(nbytes: int | None) -> float | None:
        return nbytes / duration / GB if nbytes is not None and duration else None

    average = gpu.average_power_w if gpu.average_power_w is not None else gpu.mean_sampled_power_w
    return GpuFigures(
        gpu=gpu.gpu,
        average_power_w=average,
        peak_power_w=gpu.peak_power_w,
        power_limit_w=gpu.power_limit_w,
        power_share_of_limit=gpu.power_share_of_limit,
        peak_power_share_of_limit=gpu.peak_power_share_of_limit,
        gpu_utilization=gpu.mean_gpu_utilization,
        energy_joules=gpu.energy_joules,
        pcie_tx_gb_per_s=rate(gpu.pcie_tx_bytes),
        pcie_rx_gb_per_s=rate(gpu.pcie_rx_bytes),
        power_limited_s=float(gpu.power_limited_s or 0.0),
        thermal_limited_s=float(gpu.thermal_limited_s or 0.0),
    )


def _known(values: list[float | None]) -> list[float]:
    return [v for v in values if v is not None]


def _sum(values: list[float | None]) -> float | None:
    # A sum over some GPUs only would understate the whole: all or nothing.
    return sum(values) if values and None not in values else None  # type: ignore[arg-type]


def _mean(values: list[float | None]) -> float | None:
    known = _known(values)
    return sum(known) / len(known) if known else None


def _max(values: list[float | None]) -> float | None:
    known = _known(values)
    return max(known) if known else None
