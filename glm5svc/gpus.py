"""What the launch plan and preflight need to know about the GPUs: from NVML (glm5svc.nvml),
else from config."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from glm5svc.config import Config
from glm5svc.nvml import NvmlUnavailable, PynvmlSource

SM120 = (12, 0)


@dataclass(frozen=True)
class GpuFacts:
    count: int
    compute_capability: tuple[int, int]
    driver_version: str | None
    names: list[str] = field(default_factory=list)
    source: str = "config"  # "nvml" or "config"
    note: str = ""
    memory_mib: int | None = None  # the smallest GPU's memory (NVML); None from config

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


def read_nvml_facts(source: PynvmlSource | None = None) -> GpuFacts:
    """Count, compute capability and driver from NVML; raises NvmlUnavailable saying why not."""
    source = source or PynvmlSource()
    gpus = source.open()
    try:
        capabilities = {source.compute_capability(gpu.index) for gpu in gpus}
        driver = source.driver_version()
    finally:
        source.close()
    note = "" if len(capabilities) == 1 else f"mixed compute capabilities: {sorted(capabilities)}"
    memory = [gpu.memory_total_bytes for gpu in gpus if gpu.memory_total_bytes]
    return GpuFacts(
        count=len(gpus),
        compute_capability=min(capabilities),
        driver_version=driver,
        names=[gpu.name for gpu in gpus],
        source="nvml",
        note=note,
        memory_mib=min(memory) // 2**20 if memory else None,
    )


def detect_gpus(config: Config) -> GpuFacts:
    try:
        return read_nvml_facts()
    except NvmlUnavailable as exc:
        return facts_from_config(config, str(exc))
