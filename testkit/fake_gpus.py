"""A time-driven NvmlSource for tests: GPUs that draw a steady power and move PCIe bytes."""

from __future__ import annotations

import time

from glm5svc.telemetry import GpuIdentity, RawSample

MODULUS = 2**32


class SteadyGpus:
    """`count` GPUs, each drawing `watts` of a `limit_w` limit and moving tx/rx bytes/s."""

    def __init__(self, count=2, watts=150.0, limit_w=600.0, tx_per_s=1e9, rx_per_s=5e8):
        self.count = count
        self.watts = watts
        self.limit_w = limit_w
        self.tx_per_s = tx_per_s
        self.rx_per_s = rx_per_s
        self.t0 = time.monotonic()

    def _elapsed(self) -> float:
        return time.monotonic() - self.t0

    def open(self) -> list[GpuIdentity]:
        return [
            GpuIdentity(
                i, "NVIDIA RTX PRO 6000 Blackwell (fake)", f"GPU-fake-{i}", f"0000:0{i}:00.0"
            )
            for i in range(self.count)
        ]

    def close(self) -> None:
        pass

    def driver_version(self) -> str:
        return "999.99-fake"

    def read_sample(self, index: int) -> RawSample:
        return RawSample(
            power_w=self.watts,
            power_limit_w=self.limit_w,
            energy_mj=self.read_energy_mj(index),
            gpu_utilization_pct=40.0,
            clock_event_reasons=0,
            pcie_generation=5,
            pcie_width=16,
        )

    def read_energy_mj(self, index: int) -> int:
        return int(self._elapsed() * self.watts * 1000)

    def has_gpm_pcie(self, index: int) -> bool:
        return False  # the 32-bit counters below, as on a GPU without GPM

    def read_gpm_pcie(self, index: int) -> None:
        raise NotImplementedError("SteadyGpus has no GPM")

    def read_pcie_bytes(self, index: int) -> tuple[int, int]:
        t = self._elapsed()
        return int(t * self.tx_per_s) % MODULUS, int(t * self.rx_per_s) % MODULUS
