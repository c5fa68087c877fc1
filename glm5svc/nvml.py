"""The one way to NVML: a small interface (`NvmlSource`) and its pynvml implementation.

Everything that reads the GPUs goes through here: the launch plan's and preflight's GPU
facts (glm5svc.gpus), preflight's GPU holders, and the telemetry sampler. One error type
(`NvmlUnavailable`, saying why), one text helper. Tests pass `PynvmlSource` the fake module
testkit.fake_pynvml, or substitute a whole `NvmlSource` fed with recorded counters.

PCIe traffic comes one of two ways. Where the GPU has GPM (GPU Performance Monitoring,
Hopper and newer), one GPM sample per read gives the average TX/RX rate since the previous
one, over any interval: ~0.2-0.3 ms of CPU on an H200. Elsewhere, the 32-bit byte counters
(fields 197/198, ~0.8 ms a read) must be read before they can wrap, ~18 times a second at
PCIe 5 x16 (docs/performance-telemetry.md).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Protocol

# NVML field ids (nvml.h), so this module needs no pynvml import to be read.
FI_TOTAL_ENERGY_CONSUMPTION = 83
FI_PCIE_REPLAY_COUNTER = 94
FI_POWER_INSTANT = 186
FI_PCIE_COUNT_TX_BYTES = 197
FI_PCIE_COUNT_RX_BYTES = 198

# One batched field read per sample. The energy counter is not in it: on an H200 it takes
# ~3.2 ms (p99 ~17 ms) by field or function alike, so it is read on its own, once a period.
# The PCIe byte counters ride in the same batch: one NVML call instead of two per sample.
SAMPLE_FIELDS = (
    FI_POWER_INSTANT,
    FI_PCIE_REPLAY_COUNTER,
    FI_PCIE_COUNT_TX_BYTES,
    FI_PCIE_COUNT_RX_BYTES,
)
PCIE_FIELDS = (FI_PCIE_COUNT_TX_BYTES, FI_PCIE_COUNT_RX_BYTES)
# Where GPM gives the PCIe rates, the sample batch leaves the counters out.
SAMPLE_FIELDS_WITHOUT_PCIE = tuple(f for f in SAMPLE_FIELDS if f not in PCIE_FIELDS)

# nvmlGpmMetricId_t (nvml.h): PCIe traffic from / to the GPU, in MiB/s between two samples.
GPM_METRIC_PCIE_TX_PER_SEC = 20
GPM_METRIC_PCIE_RX_PER_SEC = 21
MIB = 2**20


class NvmlUnavailable(Exception):
    """NVML cannot be used on this machine (no driver, no library, no GPU); says why."""


@dataclass(frozen=True)
class GpuIdentity:
    index: int
    name: str
    uuid: str
    pci_bus_id: str
    memory_total_bytes: int | None = None
    max_pcie_generation: int | None = None
    max_pcie_width: int | None = None


@dataclass
class RawSample:
    """One slow-period reading of one GPU; None where the GPU does not support a reading."""

    power_w: float | None = None
    power_instant_w: float | None = None
    power_limit_w: float | None = None
    energy_mj: int | None = None
    gpu_utilization_pct: float | None = None
    memory_utilization_pct: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    temperature_c: float | None = None
    sm_clock_mhz: float | None = None
    memory_clock_mhz: float | None = None
    clock_event_reasons: int | None = None
    performance_state: int | None = None
    pcie_generation: int | None = None
    pcie_width: int | None = None
    pcie_replay_count: int | None = None
    pcie_tx_raw: int | None = None  # raw 32-bit counters, read in the same batch
    pcie_rx_raw: int | None = None
    processes: list[tuple[int, int | None]] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)


class NvmlSource(Protocol):
    def open(self) -> list[GpuIdentity]:
        """Initialise NVML and list the GPUs; raise NvmlUnavailable saying why not."""

    def close(self) -> None: ...

    def driver_version(self) -> str | None: ...

    def read_sample(self, index: int) -> RawSample:
        """Everything but the energy counter; PCIe counters optional (pcie_*_raw)."""

    def read_energy_mj(self, index: int) -> int | None:
        """The cumulative energy counter (slow: milliseconds)."""

    def read_pcie_bytes(self, index: int) -> tuple[int | None, int | None]:
        """Raw (tx, rx) 32-bit counter values."""

    def has_gpm_pcie(self, index: int) -> bool:
        """True when read_gpm_pcie works for this GPU (then its counters are not read)."""

    def read_gpm_pcie(self, index: int) -> tuple[float, float] | None:
        """Average (tx, rx) bytes/s since the previous call; None on the first call. Raises
        when it cannot tell; the next call then covers both intervals."""


def text(value: Any) -> str:
    """NVML strings are bytes in older bindings, str in newer ones."""
    return value.decode() if isinstance(value, bytes) else str(value)


def field_value(entry: Any) -> int | float | None:
    """The value of one nvmlFieldValue_t, or None if NVML reported an error for it."""
    if entry.nvmlReturn != 0:
        return None
    kind = entry.valueType
    value = entry.value
    # nvmlValueType_t: 0 double, 1 uint, 2 ulong, 3 ulonglong, 4 slonglong, 5 sint, 6 ushort
    return {
        0: lambda: value.dVal,
        1: lambda: value.uiVal,
        2: lambda: value.ulVal,
        3: lambda: value.ullVal,
        4: lambda: value.sllVal,
        5: lambda: value.siVal,
        6: lambda: value.usVal,
    }.get(kind, lambda: value.ullVal)()


class PynvmlSource:
    """NvmlSource over nvidia-ml-py (module `pynvml`)."""

    def __init__(self, module: Any = None, use_gpm: bool = True):
        self._nvml = module
        self._handles: list[Any] = []
        self._initialised = False
        self._use_gpm = use_gpm
        self._gpm: list[list[Any] | None] = []  # per GPU: two GPM sample buffers, or None
        self._gpm_previous: list[int | None] = []  # which buffer holds the previous sample

    def open(self) -> list[GpuIdentity]:
        nvml = self._nvml
        if nvml is None:
            try:
                nvml = self._nvml = importlib.import_module("pynvml")
            except ImportError:
                raise NvmlUnavailable(
                    "no NVML binding: install nvidia-ml-py (module pynvml)"
                ) from None
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            raise NvmlUnavailable(describe_init_error(nvml, exc)) from None
        self._initialised = True
        try:
            count = nvml.nvmlDeviceGetCount()
            self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            gpus = [self._identity(i, h) for i, h in enumerate(self._handles)]
            self._gpm = [self._gpm_buffers(h) for h in self._handles]
            self._gpm_previous = [None] * len(self._handles)
        except nvml.NVMLError as exc:
            self.close()
            raise NvmlUnavailable(f"NVML could not list the GPUs: {exc}") from None
        if not gpus:
            self.close()
            raise NvmlUnavailable("the NVIDIA driver is loaded but reports no GPU")
        return gpus

    def close(self) -> None:
        for buffers in self._gpm:
            for sample in buffers or ():
                try:
                    self._nvml.nvmlGpmSampleFree(sample)
                except self._nvml.NVMLError:
                    pass
        self._gpm, self._gpm_previous = [], []
        if self._initialised:
            self._initialised = False
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError:
                pass
        self._handles = []

    def driver_version(self) -> str | None:
        driver = self._optional("driver", self._nvml.nvmlSystemGetDriverVersion, {})
        return text(driver) if driver is not None else None

    def compute_capability(self, index: int) -> tuple[int, int]:
        """(major, minor) of one GPU; raises NvmlUnavailable when NVML cannot tell."""
        try:
            major, minor = self._nvml.nvmlDeviceGetCudaComputeCapability(self._handles[index])
        except self._nvml.NVMLError as exc:
            raise NvmlUnavailable(
                f"NVML could not read GPU {index}'s compute capability: {exc}"
            ) from None
        return int(major), int(minor)

    def compute_processes(self, index: int) -> list[tuple[int, int | None]]:
        """(pid, used bytes or None) of every compute process on one GPU; raises
        NvmlUnavailable when NVML cannot list them."""
        nvml = self._nvml
        try:
            procs = nvml.nvmlDeviceGetComputeRunningProcesses(self._handles[index])
        except nvml.NVMLError as exc:
            raise NvmlUnavailable(f"NVML could not list GPU {index}'s processes: {exc}") from None
        return [(p.pid, p.usedGpuMemory) for p in procs]

    def _identity(self, index: int, handle: Any) -> GpuIdentity:
        nvml = self._nvml
        errors: dict[str, str] = {}
        pci = self._optional("pci", nvml.nvmlDeviceGetPciInfo, errors, handle)
        memory = self._optional("memory", nvml.nvmlDeviceGetMemoryInfo, errors, handle)
        return GpuIdentity(
            index=index,
            name=text(nvml.nvmlDeviceGetName(handle)),
            uuid=text(nvml.nvmlDeviceGetUUID(handle)),
            pci_bus_id=text(pci.busId) if pci is not None else "",
            memory_total_bytes=memory.total if memory is not None else None,
            max_pcie_generation=self._optional(
                "pcie_gen", nvml.nvmlDeviceGetMaxPcieLinkGeneration, errors, handle
            ),
            max_pcie_width=self._optional(
                "pcie_width", nvml.nvmlDeviceGetMaxPcieLinkWidth, errors, handle
            ),
        )

    def _optional(self, name: str, call, errors: dict[str, str], *args):
        try:
            return call(*args)
        except self._nvml.NVMLError_NotSupported:
            return None
        except self._nvml.NVMLError as exc:
            errors[name] = str(exc)
            return None

    def _gpm_buffers(self, handle: Any) -> list[Any] | None:
        """Two GPM sample buffers when the GPU supports GPM, else None (older bindings too)."""
        nvml = self._nvml
        if not self._use_gpm or not hasattr(nvml, "nvmlGpmQueryDeviceSupport"):
            return None
        try:
            if not nvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice:
                return None
            return [nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc()]
        except nvml.NVMLError:
            return None

    def has_gpm_pcie(self, index: int) -> bool:
        return self._gpm[index] is not None

    def read_gpm_pcie(self, index: int) -> tuple[float, float] | None:
        nvml, buffers = self._nvml, self._gpm[index]
        previous = self._gpm_previous[index]
        current = 1 if previous == 0 else 0
        nvml.nvmlGpmSampleGet(self._handles[index], buffers[current])
        if previous is None:
            self._gpm_previous[index] = current
            return None
        query = nvml.c_nvmlGpmMetricsGet_t()
        query.version = nvml.NVML_GPM_METRICS_GET_VERSION
        query.numMetrics = 2
        query.sample1, query.sample2 = buffers[previous], buffers[current]
        query.metrics[0].metricId = GPM_METRIC_PCIE_TX_PER_SEC
        query.metrics[1].metricId = GPM_METRIC_PCIE_RX_PER_SEC
        nvml.nvmlGpmMetricsGet(query)
        tx, rx = query.metrics[0], query.metrics[1]
        if tx.nvmlReturn != 0 or rx.nvmlReturn != 0:
            raise NvmlUnavailable(
                f"GPU {index}: GPM PCIe rates not given (NVML return {tx.nvmlReturn}/"
                f"{rx.nvmlReturn})"
            )
        # Only now is the new sample the baseline: a failed query leaves the older one,
        # so the next rate spans the whole interval the caller is timing.
        self._gpm_previous[index] = current
        return tx.value * MIB, rx.value * MIB

    def read_sample(self, index: int) -> RawSample:
        nvml, handle = self._nvml, self._handles[index]
        s = RawSample()
        e = s.errors
        opt = self._optional
        milliwatts = opt("power", nvml.nvmlDeviceGetPowerUsage, e, handle)
        s.power_w = milliwatts / 1000 if milliwatts is not None else None
        limit = opt("power_limit", nvml.nvmlDeviceGetEnforcedPowerLimit, e, handle)
        s.power_limit_w = limit / 1000 if limit is not None else None
        wanted = SAMPLE_FIELDS_WITHOUT_PCIE if self.has_gpm_pcie(index) else SAMPLE_FIELDS
        fields = opt("fields", nvml.nvmlDeviceGetFieldValues, e, handle, list(wanted))
        if fields is not None:
            values = dict(zip(wanted, (field_value(f) for f in fields), strict=True))
            instant, replay = values[FI_POWER_INSTANT], values[FI_PCIE_REPLAY_COUNTER]
            tx, rx = values.get(FI_PCIE_COUNT_TX_BYTES), values.get(FI_PCIE_COUNT_RX_BYTES)
            s.power_instant_w = instant / 1000 if instant is not None else None
            s.pcie_replay_count = int(replay) if replay is not None else None
            s.pcie_tx_raw = int(tx) if tx is not None else None
            s.pcie_rx_raw = int(rx) if rx is not None else None
        if s.pcie_replay_count is None:
            s.pcie_replay_count = opt("replay", nvml.nvmlDeviceGetPcieReplayCounter, e, handle)
        util = opt("utilization", nvml.nvmlDeviceGetUtilizationRates, e, handle)
        if util is not None:
            s.gpu_utilization_pct, s.memory_utilization_pct = util.gpu, util.memory
        memory = opt("memory", nvml.nvmlDeviceGetMemoryInfo, e, handle)
        if memory is not None:
            s.memory_used_bytes, s.memory_total_bytes = memory.used, memory.total
        s.temperature_c = opt(
            "temperature", nvml.nvmlDeviceGetTemperature, e, handle, nvml.NVML_TEMPERATURE_GPU
        )
        s.sm_clock_mhz = opt("sm_clock", nvml.nvmlDeviceGetClockInfo, e, handle, nvml.NVML_CLOCK_SM)
        s.memory_clock_mhz = opt(
            "memory_clock", nvml.nvmlDeviceGetClockInfo, e, handle, nvml.NVML_CLOCK_MEM
        )
        s.clock_event_reasons = opt(
            "clock_events", nvml.nvmlDeviceGetCurrentClocksEventReasons, e, handle
        )
        s.performance_state = opt("pstate", nvml.nvmlDeviceGetPerformanceState, e, handle)
        s.pcie_generation = opt("pcie_gen", nvml.nvmlDeviceGetCurrPcieLinkGeneration, e, handle)
        s.pcie_width = opt("pcie_width", nvml.nvmlDeviceGetCurrPcieLinkWidth, e, handle)
        procs = opt("processes", nvml.nvmlDeviceGetComputeRunningProcesses, e, handle) or []
        s.processes = [(p.pid, p.usedGpuMemory) for p in procs]
        return s

    def read_energy_mj(self, index: int) -> int | None:
        nvml, handle = self._nvml, self._handles[index]
        value = self._optional("energy", nvml.nvmlDeviceGetTotalEnergyConsumption, {}, handle)
        return int(value) if value is not None else None

    def read_pcie_bytes(self, index: int) -> tuple[int | None, int | None]:
        nvml = self._nvml
        fields = nvml.nvmlDeviceGetFieldValues(self._handles[index], list(PCIE_FIELDS))
        tx, rx = (field_value(f) for f in fields)
        return (int(tx) if tx is not None else None, int(rx) if rx is not None else None)


def describe_init_error(nvml: Any, exc: Exception) -> str:
    """A clear 'no NVIDIA driver' message for nvmlInit failures."""
    if isinstance(exc, getattr(nvml, "NVMLError_LibraryNotFound", ())):
        return "no NVIDIA driver: the NVML library (libnvidia-ml.so.1) was not found"
    if isinstance(exc, getattr(nvml, "NVMLError_DriverNotLoaded", ())):
        return "no NVIDIA driver: the NVIDIA kernel driver is not loaded"
    if isinstance(exc, getattr(nvml, "NVMLError_NoPermission", ())):
        return "NVML refused access (no permission on /dev/nvidia*)"
    return f"NVML failed to initialise: {exc}"
