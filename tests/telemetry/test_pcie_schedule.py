"""The PCIe read schedule: quiet links are read seldom, busy ones often, no wrap is lost."""

import pytest

from glm5svc.telemetry import PynvmlSource, Sampler
from glm5svc.telemetry.decoding import (
    PCIE_BUSY_SHARE,
    PCIE_COUNTER_MODULUS,
    PCIE_QUIET_SHARE,
    pcie_max_counter_rate,
    pcie_read_period_s,
    pcie_wrap_period_s,
)
from testkit import fake_pynvml
from testkit.fake_pynvml import PcieTraffic

TOP = pcie_max_counter_rate(5, 16)  # the fake GPUs' link: PCIe 5 x16
QUIET = PCIE_QUIET_SHARE * pcie_wrap_period_s(TOP)


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def rig(gpus=1):
    module = fake_pynvml.make_module(gpus)
    clock = Clock()
    traffic = [PcieTraffic(clock) for _ in range(gpus)]
    for device, flow in zip(module.devices, traffic, strict=True):
        device.pcie_traffic = flow
    sampler = Sampler(PynvmlSource(module), clock=clock, wall_clock=clock)
    assert sampler.open()
    return module, clock, traffic, sampler


def run_fast_loop(sampler, clock, until, slow_period=1.0):
    """What the fast loop does, on the fake clock, with a slow sample every slow_period."""
    next_sample = clock.t + slow_period
    while clock.t < until:
        wait = sampler.poll_pcie_if_due()
        assert wait > 0  # a read is never due again at once: no spinning
        clock.t = min(clock.t + wait, next_sample)
        if clock.t >= next_sample:
            sampler.sample_now()  # its field batch reads the counters too
            next_sample += slow_period


def intervals(times, start, end):
    inside = [t for t in times if start <= t <= end]
    return [b - a for a, b in zip(inside, inside[1:], strict=False)]


def test_period_is_quiet_share_of_shortest_wrap_busy_share_of_wrap_at_seen_rate():
    assert pcie_read_period_s(TOP, 0.0, 0.001) == pytest.approx(QUIET)
    assert pcie_read_period_s(TOP, 1e9, 0.001) == pytest.approx(QUIET)  # 1 GB/s: quiet
    busy = PCIE_BUSY_SHARE * PCIE_COUNTER_MODULUS / TOP
    assert pcie_read_period_s(TOP, TOP, 0.001) == pytest.approx(busy) and busy < QUIET
    assert pcie_read_period_s(TOP, TOP, 0.05) == 0.05  # never below the configured floor
    slow_link = pcie_max_counter_rate(3, 4)
    assert pcie_read_period_s(slow_link, 0.0, 0.001) > 0.5


def test_jump_to_top_rate_just_after_a_quiet_read_loses_no_wrap():
    module, clock, (traffic,), sampler = rig()
    start = clock.t
    traffic.set_rates(1e6, 2e6)
    run_fast_loop(sampler, clock, start + 2.0)
    # The worst moment: the link goes to its top rate right after a read, while quiet.
    clock.t = traffic.read_times[-1] + 1e-6
    traffic.set_rates(TOP, 0.5 * TOP)
    jump = clock.t
    run_fast_loop(sampler, clock, jump + 3.0)
    traffic.set_rates(0.0, 0.0)
    stop = clock.t
    run_fast_loop(sampler, clock, stop + 2.0)
    sampler.poll_pcie_now()

    first, last = traffic.read_times[0], traffic.read_times[-1]
    tx, rx = traffic.total_bytes(first, last)
    assert tx > 40 * PCIE_COUNTER_MODULUS  # the counters wrapped many times
    state = sampler.sample_now().gpus[0]
    assert (state.pcie_tx_bytes_total, state.pcie_rx_bytes_total) == (tx, rx)
    assert state.pcie_gaps == 0

    quiet_reads = intervals(traffic.read_times, start + 0.1, jump)
    busy_reads = intervals(traffic.read_times, jump + 0.2, stop)
    after = intervals(traffic.read_times, stop + 0.2, stop + 2.0)
    busy = PCIE_BUSY_SHARE * PCIE_COUNTER_MODULUS / TOP
    assert max(quiet_reads) == pytest.approx(QUIET, rel=0.05)
    assert max(busy_reads) == pytest.approx(busy, rel=0.05)
    assert max(after) == pytest.approx(QUIET, rel=0.05)  # quiet again: slow again
    stats = sampler.pcie_counter_stats()[0]
    assert stats["shortest_period_s"] == pytest.approx(busy, rel=0.01)
    assert stats["longest_period_s"] == pytest.approx(QUIET, rel=0.01)
    assert stats["max_read_interval_s"] < pcie_wrap_period_s(TOP)


def test_the_same_traffic_read_at_a_fixed_long_period_loses_wraps():
    """The check above can fail: reads 0.2 s apart miss wraps and are flagged."""
    module, clock, (traffic,), sampler = rig()
    traffic.set_rates(TOP, 0.0)
    first = clock.t
    for _ in range(10):
        clock.t += 0.2
        sampler.poll_pcie_now()
    gpu = sampler.sample_now().gpus[0]
    true_tx, _ = traffic.total_bytes(first, traffic.read_times[-1])
    assert gpu.pcie_tx_bytes_total < true_tx - PCIE_COUNTER_MODULUS
    assert gpu.pcie_gaps > 0


def test_each_gpu_is_read_at_its_own_period():
    module, clock, (busy_gpu, quiet_gpu), sampler = rig(gpus=2)
    busy_gpu.set_rates(TOP, TOP)
    run_fast_loop(sampler, clock, clock.t + 3.0)
    busy = PCIE_BUSY_SHARE * PCIE_COUNTER_MODULUS / TOP
    assert len(busy_gpu.read_times) == pytest.approx(3.0 / busy, rel=0.1)
    assert len(quiet_gpu.read_times) == pytest.approx(3.0 / QUIET, rel=0.1)


def test_unreadable_counters_are_not_retried_in_a_spin():
    module = fake_pynvml.make_module(1)
    module.devices[0].unsupported = {"field197", "field198"}
    clock = Clock()
    sampler = Sampler(PynvmlSource(module), clock=clock, wall_clock=clock)
    sampler.open()
    assert sampler.poll_pcie_if_due() == pytest.approx(QUIET)
    reads = module.devices[0].pcie_reads
    clock.t += 0.01
    assert sampler.poll_pcie_if_due() == pytest.approx(QUIET - 0.01)
    assert module.devices[0].pcie_reads == reads


def gpm_rig(gpus=1, use_gpm=True, gpm=(True, True)):
    module = fake_pynvml.make_module(gpus)
    clock = Clock()
    traffic = [PcieTraffic(clock) for _ in range(gpus)]
    for device, flow, has_gpm in zip(module.devices, traffic, gpm, strict=False):
        device.pcie_traffic, device.gpm = flow, has_gpm
    sampler = Sampler(PynvmlSource(module, use_gpm=use_gpm), clock=clock, wall_clock=clock)
    assert sampler.open()
    return module, clock, traffic, sampler


def test_gpm_gpu_is_read_once_per_sample_and_counts_every_byte():
    module, clock, (traffic,), sampler = gpm_rig()
    traffic.set_rates(1e6, 2e6)
    run_fast_loop(sampler, clock, clock.t + 2.0)
    traffic.set_rates(TOP, 0.5 * TOP)  # long past any 32-bit wrap between samples
    run_fast_loop(sampler, clock, clock.t + 3.0)
    traffic.set_rates(0.0, 0.0)
    run_fast_loop(sampler, clock, clock.t + 1.0)
    window = sampler.open_window("edges")  # a window's edge takes a GPM reading too
    gpu = sampler.sample_now().gpus[0]
    tx, rx = traffic.total_bytes(traffic.read_times[0], traffic.read_times[-1])
    assert tx > 40 * PCIE_COUNTER_MODULUS
    reads = sampler.pcie_counter_stats()[0]["reads"]
    assert abs(gpu.pcie_tx_bytes_total - tx) <= reads  # rate x interval, rounded per read
    assert abs(gpu.pcie_rx_bytes_total - rx) <= reads
    assert gpu.pcie_gaps == 0
    device = module.devices[0]
    assert device.pcie_reads == 0  # the 32-bit counters are never read
    assert device.gpm_samples == 1 + 6 + 1 + 1  # open, 6 slow samples, window, sample_now
    assert sampler.pcie_counter_stats()[0]["source"] == "gpm"
    sampler.close_window(window)


def test_gpm_and_counter_gpus_side_by_side():
    module, clock, (counted, gpm_flow), sampler = gpm_rig(gpus=2, gpm=(False, True))
    counted.set_rates(TOP, 0.0)
    gpm_flow.set_rates(TOP, 0.0)
    run_fast_loop(sampler, clock, clock.t + 2.0)
    gpus = sampler.sample_now().gpus
    assert [s["source"] for s in sampler.pcie_counter_stats()] == ["counters", "gpm"]
    assert module.devices[0].pcie_reads > 40 and module.devices[1].pcie_reads == 0
    assert module.devices[1].gpm_samples == 1 + 2 + 1
    for gpu, flow in zip(gpus, (counted, gpm_flow), strict=True):
        tx, _ = flow.total_bytes(flow.read_times[0], flow.read_times[-1])
        assert abs(gpu.pcie_tx_bytes_total - tx) <= 10 and gpu.pcie_gaps == 0


def test_failed_gpm_reading_is_spanned_by_the_next():
    module, clock, (traffic,), sampler = gpm_rig()
    device = module.devices[0]
    traffic.set_rates(TOP, 0.0)
    clock.t += 1.0
    sampler.poll_pcie_now()
    device.unsupported = {"gpm"}
    clock.t += 1.0
    sampler.poll_pcie_now()
    device.unsupported = set()
    clock.t += 1.0
    gpu = sampler.sample_now().gpus[0]
    assert gpu.pcie_tx_bytes_total == pytest.approx(3.0 * TOP, rel=1e-9)
    assert sampler.pcie_counter_stats()[0]["read_errors"] == 1 and gpu.pcie_gaps == 0


def test_gpm_can_be_turned_off_and_all_gpm_needs_no_fast_thread():
    module, clock, _, sampler = gpm_rig(use_gpm=False)
    assert sampler.pcie_counter_stats()[0]["source"] == "counters"
    module = fake_pynvml.make_module(2)
    for device in module.devices:
        device.gpm = True
    with Sampler(PynvmlSource(module), period_s=0.05) as running:
        assert running.wait_for_sample(10)
        assert [t.name for t in running.threads] == ["glm5-telemetry"]
    assert module.devices[0].pcie_reads == 0 and module.devices[0].gpm_samples >= 2
