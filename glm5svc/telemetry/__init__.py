"""GPU telemetry: a cheap NVML sampler, measurement windows and Prometheus metrics.

sampler = Sampler(period_s=1.0, pcie_period_s=0.02).start()
glm5svc.telemetry.prometheus.register_gpu_collector(registry, sampler)  # /metrics
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
]
