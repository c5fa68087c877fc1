"""A stand-in for the `pynvml` module (tests only): the real error classes, scripted values.

`make_module(gpus=2)` returns a module-like object whose nvml* functions read from
`FakeDevice` objects; set `init_error` to make nvmlInit raise like a machine with no driver.
A device's PCIe counters replay `pcie_tx`/`pcie_rx` one value per read, or, with
`pcie_traffic` set, follow a `PcieTraffic`: exact byte totals at scripted rates, read
through 32-bit counters that wrap, as NVML's do. A device with `gpm=True` also answers the
GPM calls: a sample holds the traffic's exact totals, a metric query the MiB/s between two.
"""

from __future__ import annotations

import ctypes
import types
from collections.abc import Callable
from dataclasses import dataclass, field

import pynvml as real


@dataclass
class FakeDevice:
    index: int
    power_mw: int = 250_000
    power_instant_mw: int = 240_000
    limit_mw: int = 600_000
    energy_mj: int = 1_000_000
    util_gpu: int = 50
    util_mem: int = 20
    mem_used: int = 10 * 2**30
    mem_total: int = 96 * 2**30
    temperature: int = 55
    sm_clock: int = 1800
    mem_clock: int = 12000
    reasons: int = 0x4
    capability: tuple[int, int] = (12, 0)  # SM120: RTX PRO 6000 Blackwell
    pstate: int = 0
    pcie_gen: int = 5
    pcie_width: int = 16
    replay: int = 3
    pcie_tx: list[int] = field(default_factory=lambda: [0])
    pcie_rx: list[int] = field(default_factory=lambda: [0])
    pcie_reads: int = 0
    pcie_traffic: PcieTraffic | None = None
    gpm: bool = False
    gpm_samples: int = 0
    unsupported: set[str] = field(default_factory=set)


class PcieTraffic:
    """Bytes moved each way at rates that change at set times, on a caller's clock.

    `set_rates(tx, rx)` changes the rates from the clock's now on; `raw()` is what the
    32-bit NVML counters would show now; `total_bytes(t0, t1)` the exact bytes between.
    """

    MODULUS = 2**32

    def __init__(self, clock: Callable[[], float], tx: float = 0.0, rx: float = 0.0):
        self._clock = clock
        self._segments = [(clock(), tx, rx)]  # (from t, tx bytes/s, rx bytes/s)
        self.read_times: list[float] = []

    def set_rates(self, tx: float, rx: float) -> None:
        self._segments.append((self._clock(), tx, rx))

    def total_bytes(self, t0: float, t1: float) -> tuple[int, int]:
        return self._moved(t1)[0] - self._moved(t0)[0], self._moved(t1)[1] - self._moved(t0)[1]

    def raw(self) -> tuple[int, int]:
        now = self._clock()
        self.read_times.append(now)
        tx, rx = self._moved(now)
        return tx % self.MODULUS, rx % self.MODULUS

    def exact(self) -> tuple[float, int, int]:
        """(now, tx, rx): what a GPM sample holds, no wrap."""
        now = self._clock()
        self.read_times.append(now)
        return (now, *self._moved(now))

    def _moved(self, t: float) -> tuple[int, int]:
        tx = rx = 0.0
        for i, (start, tx_rate, rx_rate) in enumerate(self._segments):
            end = self._segments[i + 1][0] if i + 1 < len(self._segments) else t
            span = max(0.0, min(end, t) - start)
            tx, rx = tx + tx_rate * span, rx + rx_rate * span
        return int(tx), int(rx)


def _field(field_id: int, value: int | None, scope: int = 0) -> real.c_nvmlFieldValue_t:
    entry = real.c_nvmlFieldValue_t()
    entry.fieldId = field_id
    entry.scopeId = scope
    if value is None:
        entry.nvmlReturn = real.NVML_ERROR_NOT_SUPPORTED
    else:
        entry.nvmlReturn = 0
        entry.valueType = 3  # unsigned long long
        entry.value.ullVal = ctypes.c_ulonglong(value).value
    return entry


def _pci(d: FakeDevice):
    return types.SimpleNamespace(busId=f"00000000:{d.index + 1:02X}:00.0")


def make_module(gpus: int = 2, init_error: Exception | None = None):
    devices = [FakeDevice(i) for i in range(gpus)]
    m = types.SimpleNamespace(devices=devices, init_error=init_error, inits=0, shutdowns=0)
    for name in dir(real):
        if name.startswith(("NVMLError", "NVML_")):
            setattr(m, name, getattr(real, name))

    def check(device: FakeDevice, what: str):
        if what in device.unsupported:
            raise real.NVMLError_NotSupported()

    def init():
        m.inits += 1
        if m.init_error is not None:
            raise m.init_error

    def shutdown():
        m.shutdowns += 1

    def field_values(d: FakeDevice, ids):
        out = []
        traffic = None  # one reading of both counters per call, as NVML takes them
        for wanted in ids:  # a field id, or (field id, scope id) as pynvml also takes
            field_id, scope = wanted if isinstance(wanted, tuple) else (wanted, 0)
            if field_id == 197:
                d.pcie_reads += 1
                value = d.pcie_tx[min(d.pcie_reads - 1, len(d.pcie_tx) - 1)]
                if d.pcie_traffic is not None:
                    traffic = traffic or d.pcie_traffic.raw()
                    value = traffic[0]
            elif field_id == 198:
                value = d.pcie_rx[min(d.pcie_reads - 1, len(d.pcie_rx) - 1)]
                if d.pcie_traffic is not None:
                    traffic = traffic or d.pcie_traffic.raw()
                    value = traffic[1]
            else:
                value = {186: d.power_instant_mw, 83: d.energy_mj, 94: d.replay}.get(field_id)
            if f"field{field_id}" in d.unsupported:
                value = None
            out.append(_field(field_id, value, scope))
        return out

    def guarded(what, fn):
        def call(d, *args):
            check(d, what)
            return fn(d, *args)

        return call

    m.nvmlInit = init
    m.nvmlShutdown = shutdown
    m.nvmlDeviceGetCount = lambda: len(devices)
    m.nvmlDeviceGetCudaComputeCapability = guarded("capability", lambda d: d.capability)
    m.nvmlDeviceGetHandleByIndex = lambda i: devices[i]
    m.nvmlSystemGetDriverVersion = lambda: "580.159.04"
    m.nvmlDeviceGetName = lambda d: "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    m.nvmlDeviceGetUUID = lambda d: f"GPU-0000000{d.index}-fake"
    m.nvmlDeviceGetPciInfo = _pci
    m.nvmlDeviceGetMaxPcieLinkGeneration = lambda d: 5
    m.nvmlDeviceGetMaxPcieLinkWidth = lambda d: 16
    m.nvmlDeviceGetPowerUsage = guarded("power", lambda d: d.power_mw)
    m.nvmlDeviceGetEnforcedPowerLimit = guarded("limit", lambda d: d.limit_mw)
    m.nvmlDeviceGetFieldValues = field_values
    m.nvmlDeviceGetTotalEnergyConsumption = guarded("energy", lambda d: d.energy_mj)
    m.nvmlDeviceGetPcieReplayCounter = guarded("replay", lambda d: d.replay)
    m.nvmlDeviceGetUtilizationRates = guarded(
        "util", lambda d: types.SimpleNamespace(gpu=d.util_gpu, memory=d.util_mem)
    )
    m.nvmlDeviceGetMemoryInfo = lambda d: types.SimpleNamespace(
        used=d.mem_used, total=d.mem_total, free=d.mem_total - d.mem_used
    )
    m.nvmlDeviceGetTemperature = guarded("temperature", lambda d, sensor: d.temperature)
    m.nvmlDeviceGetClockInfo = lambda d, kind: (
        d.sm_clock if kind == real.NVML_CLOCK_SM else (d.mem_clock)
    )
    m.nvmlDeviceGetCurrentClocksEventReasons = guarded("reasons", lambda d: d.reasons)
    m.nvmlDeviceGetPerformanceState = guarded("pstate", lambda d: d.pstate)
    m.nvmlDeviceGetCurrPcieLinkGeneration = lambda d: d.pcie_gen
    m.nvmlDeviceGetCurrPcieLinkWidth = lambda d: d.pcie_width
    m.nvmlDeviceGetComputeRunningProcesses = lambda d: [
        types.SimpleNamespace(pid=4242, usedGpuMemory=d.mem_used)
    ]
    m.nvmlDeviceGetPcieThroughput = lambda d, counter: 0
    m.nvmlSystemGetCudaDriverVersion = lambda: 12080
    m.nvmlDeviceGetNvLinkState = _no_nvlink  # PCIe-only boards, like the RTX PRO 6000
    _add_gpm(m)
    return m


class _GpmMetricsGet:
    """Stands in for pynvml.c_nvmlGpmMetricsGet_t."""

    def __init__(self):
        self.version = self.numMetrics = 0
        self.sample1 = self.sample2 = None
        self.metrics = [
            types.SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0) for _ in range(4)
        ]


def _add_gpm(m) -> None:
    def support(d: FakeDevice):
        return types.SimpleNamespace(version=1, isSupportedDevice=int(d.gpm))

    def sample_get(d: FakeDevice, sample: types.SimpleNamespace):
        if not d.gpm or "gpm" in d.unsupported:
            raise real.NVMLError_NotSupported()
        d.gpm_samples += 1
        sample.reading = d.pcie_traffic.exact() if d.pcie_traffic else (0.0, 0, 0)

    def metrics_get(query: _GpmMetricsGet):
        (t1, tx1, rx1), (t2, tx2, rx2) = query.sample1.reading, query.sample2.reading
        rates = {20: (tx2 - tx1) / (t2 - t1), 21: (rx2 - rx1) / (t2 - t1)}
        for metric in query.metrics[: query.numMetrics]:
            metric.value = rates[metric.metricId] / 2**20  # MiB/s, as NVML gives them
        return query

    m.nvmlGpmQueryDeviceSupport = support
    m.nvmlGpmSampleAlloc = lambda: types.SimpleNamespace(reading=None)
    m.nvmlGpmSampleFree = lambda sample: None
    m.nvmlGpmSampleGet = sample_get
    m.nvmlGpmMetricsGet = metrics_get
    m.c_nvmlGpmMetricsGet_t = _GpmMetricsGet


def _no_nvlink(device, link):
    raise real.NVMLError_NotSupported()
