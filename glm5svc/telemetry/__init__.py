"""GPU telemetry: a cheap NVML sampler, measurement windows and Prometheus metrics.

sampler = Sampler(period_s=1.0, pcie_period_s=0.02).start()
register_gpu_collector(registry, sampler)          # /metrics serves the snapshot
w = sampler.open_window("c=64"); ...; stats = sampler.close_window(w)
"""

from glm5svc.nvml import GpuIdentity, NvmlSource, NvmlUnavailable, PynvmlSource, RawSample
from glm5svc.telemetry.sampler import Sampler
from glm5svc.telemetry.snapshot import GpuSnapshot, Snapshot
from glm5svc.telemetry.window_stats import GpuWindowStats, WindowStats
from glm5svc.telemetry.windows import Window

__all__ = [
    "GpuIdentity",
    "GpuSnapshot",
    "GpuWindowStats",
    "NvmlSource",
    "NvmlUnavailable",
    "PynvmlSource",
    "RawSample",
    "Sampler",
    "Snapshot",
    "Window",
    "WindowStats",
    "register_gpu_collector",
]


def register_gpu_collector(registry, sampler):
    """Serve the sampler's GPU metrics from a prometheus_client registry (imported lazily)."""
    from glm5svc.telemetry.prometheus import register_gpu_collector as register

    return register(registry, sampler)
