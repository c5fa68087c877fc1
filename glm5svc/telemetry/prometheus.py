"""Prometheus metrics from the sampler's snapshot: a scrape never calls NVML.

Names follow Prometheus conventions (the `glm5svc_` prefix, base units, `_total` counters,
0-1 ratios, snake_case labels; `promtool check metrics` has nothing to say) and carry DCGM
exporter's labels `gpu` and `UUID`, so dashboards can join the two (`UUID` is DCGM's
spelling, which promtool accepts).
"""

from __future__ import annotations

import time

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from glm5svc.telemetry.decoding import CLOCK_EVENT_REASONS
from glm5svc.telemetry.sampler import Sampler
from glm5svc.telemetry.snapshot import GpuSnapshot

GPU_LABELS = ("gpu", "UUID")
INFO_LABELS = ("gpu", "UUID", "pci_bus_id", "model_name", "driver_version")


def _scaled(value, factor):
    return None if value is None else value * factor


# (name, help, snapshot attribute, factor to base units)
_GPU_METRICS = (
    ("glm5svc_gpu_power_watts", "Board power, NVML's averaged reading (W).", "power_w", 1),
    ("glm5svc_gpu_power_instant_watts", "Instantaneous board power (W).", "power_instant_w", 1),
    ("glm5svc_gpu_power_limit_watts", "Enforced power limit (W).", "power_limit_w", 1),
    (
        "glm5svc_gpu_utilization_ratio",
        "Time a kernel was running (0-1).",
        "gpu_utilization_pct",
        0.01,
    ),
    (
        "glm5svc_gpu_memory_utilization_ratio",
        "Time device memory was being read or written (0-1).",
        "memory_utilization_pct",
        0.01,
    ),
    ("glm5svc_gpu_memory_used_bytes", "Device memory in use.", "memory_used_bytes", 1),
    ("glm5svc_gpu_memory_total_bytes", "Device memory in total.", "memory_total_bytes", 1),
    ("glm5svc_gpu_temperature_celsius", "GPU core temperature.", "temperature_c", 1),
    ("glm5svc_gpu_sm_clock_hertz", "SM clock.", "sm_clock_mhz", 1e6),
    ("glm5svc_gpu_memory_clock_hertz", "Memory clock.", "memory_clock_mhz", 1e6),
    (
        "glm5svc_gpu_performance_state",
        "Performance state (0 = P0, fastest).",
        "performance_state",
        1,
    ),
)


class GpuCollector(Collector):
    """Renders `sampler.snapshot()` at scrape time."""

    def __init__(self, sampler: Sampler):
        self._sampler = sampler

    def describe(self):
        return []  # metric set depends on the snapshot: don't collect at registration

    def collect(self):
        snapshot = self._sampler.snapshot()
        up = GaugeMetricFamily(
            "glm5svc_telemetry_up", "1 if NVML telemetry is being sampled, 0 if not (no driver)."
        )
        up.add_metric([], 1.0 if snapshot.available else 0.0)
        yield up
        if not snapshot.available:
            return
        age = snapshot.age_s(time.monotonic())
        if age is not None:
            stale = GaugeMetricFamily(
                "glm5svc_telemetry_sample_age_seconds", "Seconds since the last GPU sample."
            )
            stale.add_metric([], age)
            yield stale
        yield _info(snapshot.gpus, snapshot.driver_version or "")
        for name, help_text, attribute, factor in _GPU_METRICS:
            family = GaugeMetricFamily(name, help_text, labels=GPU_LABELS)
            for gpu in snapshot.gpus:
                value = _scaled(getattr(gpu, attribute), factor)
                if value is not None:
                    family.add_metric(_labels(gpu), value)
            yield family
        yield from _counters(snapshot.gpus)
        yield _clock_events(snapshot.gpus)


def _labels(gpu: GpuSnapshot) -> list[str]:
    return [str(gpu.index), gpu.uuid]


def _info(gpus, driver: str) -> GaugeMetricFamily:
    info = GaugeMetricFamily(
        "glm5svc_gpu_info", "GPU identity; value always 1.", labels=INFO_LABELS
    )
    for gpu in gpus:
        info.add_metric([str(gpu.index), gpu.uuid, gpu.pci_bus_id, gpu.name, driver], 1.0)
    return info


def _counters(gpus):
    energy = CounterMetricFamily(
        "glm5svc_gpu_energy_joules",
        "Energy the GPU used since the sampler started (NVML total energy counter).",
        labels=GPU_LABELS,
    )
    pcie = CounterMetricFamily(
        "glm5svc_gpu_pcie_bytes",
        "PCIe bytes since the sampler started, 32-bit counters wrap-corrected.",
        labels=(*GPU_LABELS, "direction"),
    )
    gaps = CounterMetricFamily(
        "glm5svc_gpu_pcie_read_gaps",
        "PCIe counter read intervals long enough that a wrap may have been missed.",
        labels=GPU_LABELS,
    )
    replay = CounterMetricFamily(
        "glm5svc_gpu_pcie_replay", "PCIe replay counter (link retries).", labels=GPU_LABELS
    )
    for gpu in gpus:
        labels = _labels(gpu)
        if gpu.energy_joules_total is not None:
            energy.add_metric(labels, gpu.energy_joules_total)
        if gpu.pcie_tx_bytes_total is not None:
            pcie.add_metric([*labels, "tx"], gpu.pcie_tx_bytes_total)
        if gpu.pcie_rx_bytes_total is not None:
            pcie.add_metric([*labels, "rx"], gpu.pcie_rx_bytes_total)
        gaps.add_metric(labels, gpu.pcie_gaps)
        if gpu.pcie_replay_count is not None:
            replay.add_metric(labels, gpu.pcie_replay_count)
    return energy, pcie, gaps, replay


def _clock_events(gpus) -> GaugeMetricFamily:
    family = GaugeMetricFamily(
        "glm5svc_gpu_clock_event_active",
        "1 while NVML reports this clock-event reason (why clocks are below maximum).",
        labels=(*GPU_LABELS, "reason"),
    )
    for gpu in gpus:
        if gpu.clock_event_reasons_mask is None:
            continue
        active = set(gpu.clock_event_reasons)
        for reason in CLOCK_EVENT_REASONS.values():
            family.add_metric([*_labels(gpu), reason], 1.0 if reason in active else 0.0)
    return family


def register_gpu_collector(registry: CollectorRegistry, sampler: Sampler) -> GpuCollector:
    """Serve the sampler's GPU metrics from `registry` (e.g. prometheus_client.REGISTRY)."""
    collector = GpuCollector(sampler)
    registry.register(collector)
    return collector
