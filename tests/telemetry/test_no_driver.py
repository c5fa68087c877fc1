import pynvml
import pytest

from glm5svc.telemetry import PynvmlSource, Sampler
from testkit import fake_pynvml


@pytest.mark.parametrize(
    ("error", "words"),
    [
        (pynvml.NVMLError_LibraryNotFound, "libnvidia-ml.so.1) was not found"),
        (pynvml.NVMLError_DriverNotLoaded, "kernel driver is not loaded"),
    ],
)
def test_no_driver_gives_a_clear_state(error, words):
    module = fake_pynvml.make_module(1, init_error=error())
    sampler = Sampler(PynvmlSource(module), retry_s=60)
    sampler.start()
    try:
        snap = sampler.snapshot()
        assert not snap.available and not sampler.available
        assert snap.reason.startswith("no NVIDIA driver") and words in snap.reason
        assert not sampler.wait_for_sample(0.2)
        assert module.inits == 1  # sleeps retry_s between tries: no spin
        stats = sampler.close_window(sampler.open_window("x"))
        assert not stats.available and stats.gpus == () and "no NVIDIA driver" in stats.reason
    finally:
        sampler.stop()
    assert module.shutdowns == 0


def test_real_pynvml_without_a_driver_does_not_crash(monkeypatch):
    def no_library():
        raise pynvml.NVMLError_LibraryNotFound()

    monkeypatch.setattr(pynvml, "nvmlInit", no_library)
    sampler = Sampler(retry_s=60).start()
    try:
        assert "no NVIDIA driver" in sampler.snapshot().reason
    finally:
        sampler.stop()


def test_driver_appearing_later_is_picked_up():
    module = fake_pynvml.make_module(1, init_error=pynvml.NVMLError_DriverNotLoaded())
    sampler = Sampler(PynvmlSource(module), period_s=0.05, pcie_period_s=0.01, retry_s=0.05)
    sampler.start()
    try:
        module.init_error = None
        assert sampler.wait_for_sample(10)
        assert sampler.snapshot().available
    finally:
        sampler.stop()
