"""A level's GPU figures from a telemetry window (glm5svc.bench.power)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from glm5svc.bench.power import LevelTelemetry, level_telemetry
from glm5svc.telemetry import GpuWindowStats, WindowStats

GPU = GpuWindowStats(
    gpu=0, uuid="GPU-0", name="fake", duration_s=2.0, samples=2, energy_joules=800.0,
    average_power_w=400.0, mean_sampled_power_w=390.0, peak_power_w=450.0, power_limit_w=600.0,
    power_share_of_limit=400 / 600, peak_power_share_of_limit=450 / 600,
    mean_gpu_utilization=0.5, mean_memory_utilization=0.2, max_temperature_c=60.0,
    min_sm_clock_mhz=1800.0, max_sm_clock_mhz=2000.0, pcie_tx_bytes=4 * 10**9,
    pcie_rx_bytes=2 * 10**9, pcie_gaps=0, power_limited_s=0.5, thermal_limited_s=0.0,
    clock_event_reasons_seen=("sw_power_cap",),
)  # fmt: skip


def window(*gpus: GpuWindowStats) -> WindowStats:
    return WindowStats("c=1", True, None, 0.0, 2.0, gpus)


def test_two_gpus_add_up_and_average():
    other = replace(GPU, gpu=1, energy_joules=400.0, average_power_w=200.0,
                    power_share_of_limit=200 / 600, power_limited_s=1.5)  # fmt: skip
    figures = level_telemetry(window(GPU, other), output_tokens=600, input_tokens=600)
    assert figures.energy_joules == 1200.0
    assert figures.joules_per_output_token == 2.0 and figures.joules_per_token == 1.0
    assert figures.mean_power_w == 300.0 and figures.max_peak_power_w == 450.0
    assert figures.mean_power_share == pytest.approx(0.5)
    assert figures.max_power_share == pytest.approx(400 / 600)
    assert figures.pcie_tx_gb_per_s == pytest.approx(4.0)  # 2 GB/s on each GPU
    assert figures.power_limited_s == 1.5
    assert [g.gpu_utilization for g in figures.gpus] == [0.5, 0.5]
    assert LevelTelemetry.from_dict(figures.to_dict()) == figures


def test_a_total_over_some_gpus_only_is_not_given():
    figures = level_telemetry(window(GPU, replace(GPU, gpu=1, energy_joules=None)), 600, 0)
    assert figures.energy_joules is None and figures.joules_per_output_token is None
    assert figures.mean_power_w == 400.0


def test_no_window_is_unavailable_with_the_reason():
    stats = WindowStats("c=1", False, "no NVIDIA driver", 0.0, 2.0, ())
    figures = level_telemetry(stats, 600, 600)
    assert not figures.available and figures.reason == "no NVIDIA driver"
