import pynvml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from glm5svc.telemetry import PynvmlSource, Sampler
from glm5svc.telemetry.prometheus import register_gpu_collector
from testkit import fake_pynvml


def scrape(sampler):
    registry = CollectorRegistry()
    register_gpu_collector(registry, sampler)
    text = generate_latest(registry).decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples, text


def test_metrics_render_with_dcgm_labels_and_base_units():
    module = fake_pynvml.make_module(2)
    module.devices[0].pcie_tx = [0, 2**32 - 5, 100]
    sampler = Sampler(PynvmlSource(module))
    sampler.open()
    sampler.poll_pcie_now()
    sampler.sample_now()
    reads_before = module.devices[0].pcie_reads
    samples, text = scrape(sampler)
    assert module.devices[0].pcie_reads == reads_before  # a scrape makes no NVML call
    gpu0 = (("UUID", "GPU-00000000-fake"), ("gpu", "0"))
    assert samples[("glm5svc_telemetry_up", ())] == 1
    assert samples[("glm5svc_gpu_power_watts", gpu0)] == 250
    assert samples[("glm5svc_gpu_power_instant_watts", gpu0)] == 240
    assert samples[("glm5svc_gpu_power_limit_watts", gpu0)] == 600
    assert samples[("glm5svc_gpu_utilization_ratio", gpu0)] == 0.5
    assert samples[("glm5svc_gpu_memory_utilization_ratio", gpu0)] == 0.2
    assert samples[("glm5svc_gpu_memory_total_bytes", gpu0)] == 96 * 2**30
    assert samples[("glm5svc_gpu_sm_clock_hertz", gpu0)] == 1.8e9
    assert samples[("glm5svc_gpu_temperature_celsius", gpu0)] == 55
    assert samples[("glm5svc_gpu_energy_joules_total", gpu0)] == 0
    tx = tuple(sorted((*gpu0, ("direction", "tx"))))
    assert samples[("glm5svc_gpu_pcie_bytes_total", tx)] == 2**32 + 100
    assert samples[("glm5svc_gpu_pcie_replay_total", gpu0)] == 3
    power_cap = (*gpu0[:1], ("gpu", "0"), ("reason", "sw_power_cap"))
    assert samples[("glm5svc_gpu_clock_event_active", power_cap)] == 1
    idle = (*gpu0[:1], ("gpu", "0"), ("reason", "gpu_idle"))
    assert samples[("glm5svc_gpu_clock_event_active", idle)] == 0
    info = {k: v for k, v in samples if k == "glm5svc_gpu_info"}
    labels = dict(next(lbl for name, lbl in samples if name == "glm5svc_gpu_info"))
    assert info and labels["model_name"].startswith("NVIDIA RTX PRO 6000")
    assert labels["pci_bus_id"] == "00000000:01:00.0" and labels["driver_version"]
    assert "# TYPE glm5svc_gpu_energy_joules_total counter" in text


def test_metrics_without_driver_say_down():
    module = fake_pynvml.make_module(1, init_error=pynvml.NVMLError_LibraryNotFound())
    sampler = Sampler(PynvmlSource(module))
    sampler.open()
    samples, _ = scrape(sampler)
    assert samples == {("glm5svc_telemetry_up", ()): 0}
