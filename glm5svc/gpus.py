"""What the launch plan and preflight need to know about the GPUs: from NVML, else from config."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from glm5svc.config import Config

SM120 = (12, 0)


@dataclass(frozen=True)
class GpuFacts:
    count: int
    compute_capability: tuple[int, int]
    driver_version: str | None
    names: list[str] = field(default_factory=list)
    source: str = "config"  # "nvml" or "config"
    note: str = ""

    @property
    def sm(self) -> str:
        major, minor = self.compute_capability
        return f"SM{major}{minor}"

    @property
    def is_sm120_family(self) -> bool:
        return self.compute_capability[0] == 12

    def to_dict(self) -> dict:
        data = asdict(self)
        data["compute_capability"] = "{}.{}".format(*self.compute_capability)
        data["sm"] = self.sm
        return data


def parse_compute_capability(text: str) -> tuple[int, int]:
    major, minor = text.split(".")
    return int(major), int(minor)


def facts_from_config(config: Config, reason: str) -> GpuFacts:
    return GpuFacts(
        count=config.gpus.expected_count,
        compute_capability=parse_compute_capability(config.gpus.compute_capability),
        driver_version=None,
        source="config",
        note=f"NVML unavailable ({reason}); planning from config: "
        f"{config.gpus.expected_count} GPUs of compute capability {config.gpus.compute_capability}",
    )


def read_nvml_facts() -> GpuFacts:
    """Read count, compute capability and driver from NVML; raises RuntimeError without it."""
    try:
        import pynvml
    except ImportError as exc:  # nvidia-ml-py is a dependency, but be honest if it is missing
        raise RuntimeError(f"nvidia-ml-py is not installed: {exc}") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise RuntimeError(f"no NVIDIA driver: {exc}") from None
    try:
        count = pynvml.nvmlDeviceGetCount()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        names = [_text(pynvml.nvmlDeviceGetName(h)) for h in handles]
        capabilities = {pynvml.nvmlDeviceGetCudaComputeCapability(h) for h in handles}
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
    finally:
        pynvml.nvmlShutdown()
    if not count:
        raise RuntimeError("the NVIDIA driver is loaded but reports no GPU")
    note = "" if len(capabilities) == 1 else f"mixed compute capabilities: {sorted(capabilities)}"
    return GpuFacts(
        count=count,
        compute_capability=tuple(min(capabilities)),
        driver_version=driver,
        names=names,
        source="nvml",
        note=note,
    )


def detect_gpus(config: Config) -> GpuFacts:
    try:
        return read_nvml_facts()
    except RuntimeError as exc:
        return facts_from_config(config, str(exc))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
