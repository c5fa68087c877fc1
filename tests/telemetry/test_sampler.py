import pytest

from glm5svc.telemetry import PynvmlSource, Sampler
from glm5svc.telemetry.decoding import PCIE_COUNTER_MODULUS
from testkit import fake_pynvml


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def make(gpus=2, **kwargs):
    module = fake_pynvml.make_module(gpus)
    clock = Clock()
    sampler = Sampler(PynvmlSource(module), clock=clock, wall_clock=clock, **kwargs)
    return module, clock, sampler


def test_snapshot_reads_every_field():
    module, clock, sampler = make()
    assert sampler.open()
    snap = sampler.sample_now()
    assert snap.available and snap.driver_version == "580.159.04"
    gpu = snap.gpus[1]
    assert gpu.uuid == "GPU-00000001-fake" and gpu.pci_bus_id == "00000000:02:00.0"
    assert (gpu.power_w, gpu.power_instant_w, gpu.power_limit_w) == (250.0, 240.0, 600.0)
    assert gpu.clock_event_reasons == ("sw_power_cap",)
    assert gpu.pcie_replay_count == 3 and gpu.processes == ((4242, 10 * 2**30),)
    assert gpu.energy_joules_total == 0.0
    assert gpu.to_dict()["processes"] == [{"pid": 4242, "used_bytes": 10 * 2**30}]


def test_unsupported_reading_is_none_not_an_error():
    module, clock, sampler = make(gpus=1)
    module.devices[0].unsupported = {"temperature", "field186"}
    sampler.open()
    gpu = sampler.sample_now().gpus[0]
    assert gpu.temperature_c is None and gpu.power_instant_w is None
    assert gpu.errors == {}


def test_window_energy_pcie_power_and_reason_seconds():
    module, clock, sampler = make(gpus=1)
    device = module.devices[0]
    device.pcie_tx = [0, PCIE_COUNTER_MODULUS - 100, PCIE_COUNTER_MODULUS - 10, 90, 1090]
    device.pcie_rx = [0, 0, 500, 1000, 1500]
    sampler.open()  # PCIe read 1
    window = sampler.open_window("c=64")  # read 2, energy 1_000_000 mJ
    clock.t += 0.02
    sampler.poll_pcie_now()  # read 3
    device.power_mw, device.reasons = 500_000, 0x4
    clock.t += 0.5
    sampler.sample_now()  # read 4 in the batch
    device.power_mw, device.reasons, device.util_gpu = 300_000, 0x1, 100
    clock.t += 0.5
    sampler.sample_now()  # read 5
    device.energy_mj += 400_000
    clock.t += 1.0
    stats = sampler.close_window(window)
    gpu = stats.gpus[0]
    assert stats.available and stats.label == "c=64"
    assert gpu.duration_s == pytest.approx(2.02)
    assert gpu.energy_joules == pytest.approx(400.0)
    assert gpu.average_power_w == pytest.approx(400 / 2.02)
    assert gpu.peak_power_w == 500.0
    assert gpu.power_share_of_limit == pytest.approx(400 / 2.02 / 600)
    assert gpu.pcie_tx_bytes == 1190 and gpu.pcie_rx_bytes == 1500
    # Counter reads 0.5 s apart (> the 59 ms wrap period at PCIe 5 x16): flagged, tx and rx.
    assert gpu.pcie_gaps == 6
    assert gpu.power_limited_s == pytest.approx(0.52)
    assert gpu.mean_gpu_utilization == pytest.approx(0.75)
    assert gpu.clock_event_reasons_seen == ("gpu_idle", "sw_power_cap")
    assert gpu.samples == 2
    assert stats.to_dict()["energy_joules"] == pytest.approx(400.0)
    with pytest.raises(ValueError, match="already closed"):
        sampler.close_window(window)


def test_windows_overlap_independently():
    module, clock, sampler = make(gpus=1)
    sampler.open()
    outer = sampler.open_window("outer")
    module.devices[0].energy_mj += 1000
    inner = sampler.open_window("inner")
    module.devices[0].energy_mj += 2000
    clock.t += 1
    assert sampler.close_window(inner).gpus[0].energy_joules == pytest.approx(2.0)
    assert sampler.close_window(outer).gpus[0].energy_joules == pytest.approx(3.0)


def test_counter_totals_survive_wraps_in_the_snapshot():
    module, clock, sampler = make(gpus=1)
    module.devices[0].pcie_tx = [PCIE_COUNTER_MODULUS - 1, 9, 20]
    sampler.open()
    clock.t += 0.02
    sampler.poll_pcie_now()
    clock.t += 0.02
    gpu = sampler.sample_now().gpus[0]
    assert gpu.pcie_tx_bytes_total == 21
    assert gpu.pcie_gaps == 0


def test_threads_sample_and_stop():
    module = fake_pynvml.make_module(1)
    sampler = Sampler(PynvmlSource(module), period_s=0.05, pcie_period_s=0.01)
    with sampler:
        assert sampler.wait_for_sample(10)
        assert sampler.snapshot().available
    assert module.shutdowns == 1
    assert sampler.snapshot().gpus  # the last snapshot stays readable after stop
