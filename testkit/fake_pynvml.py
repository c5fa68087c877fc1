"""A stand-in for the `pynvml` module (tests only): the real error classes, scripted values.

`make_module(gpus=2)` returns a module-like object whose nvml* functions read from
`FakeDevice` objects; set `init_error` to make nvmlInit raise like a machine with no driver.
"""

from __future__ import annotations

import ctypes
import types
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
    unsupported: set[str] = field(default_factory=set)


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
        for wanted in ids:  # a field id, or (field id, scope id) as pynvml also takes
            field_id, scope = wanted if isinstance(wanted, tuple) else (wanted, 0)
            if field_id == 197:
                d.pcie_reads += 1
                value = d.pcie_tx[min(d.pcie_reads - 1, len(d.pcie_tx) - 1)]
            elif field_id == 198:
                value = d.pcie_rx[min(d.pcie_reads - 1, len(d.pcie_rx) - 1)]
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
    return m


def _no_nvlink(device, link):
    raise real.NVMLError_NotSupported()
