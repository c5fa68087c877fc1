"""The terminal view of a snapshot (rich): one row per GPU."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from glm5svc.telemetry.snapshot import GpuSnapshot, Snapshot

BAR_WIDTH = 20


def power_bar(power: float | None, limit: float | None) -> Text:
    if power is None or not limit:
        return Text("n/a")
    share = max(0.0, min(1.0, power / limit))
    filled = round(share * BAR_WIDTH)
    colour = "red" if share >= 0.95 else "yellow" if share >= 0.8 else "green"
    bar = Text("█" * filled, style=colour) + Text("░" * (BAR_WIDTH - filled), style="dim")
    return bar + Text(f" {power:4.0f}/{limit:.0f} W")


def _num(value, fmt: str, unit: str = "") -> str:
    return "n/a" if value is None else f"{value:{fmt}}{unit}"


def _pcie(gpu: GpuSnapshot) -> str:
    tx, rx = gpu.pcie_tx_bytes_per_s, gpu.pcie_rx_bytes_per_s
    link = f"Gen{gpu.pcie_generation}x{gpu.pcie_width}" if gpu.pcie_generation else ""
    flag = f" gaps {gpu.pcie_gaps}" if gpu.pcie_gaps else ""
    return f"↑{_num(tx and tx / 1e9, '.2f')} ↓{_num(rx and rx / 1e9, '.2f')} GB/s {link}{flag}"


def render(snapshot: Snapshot) -> Table | Text:
    if not snapshot.available:
        return Text(f"GPU telemetry unavailable: {snapshot.reason}", style="bold red")
    table = Table(title=f"GPUs (driver {snapshot.driver_version})", expand=False)
    for column in (
        "GPU",
        "power / limit",
        "util",
        "mem util",
        "SM / mem clock",
        "reasons",
        "PCIe tx/rx",
        "temp",
        "memory",
    ):
        table.add_column(column)
    for gpu in snapshot.gpus:
        used, total = gpu.memory_used_bytes, gpu.memory_total_bytes
        memory = f"{used / 2**30:.1f}/{total / 2**30:.0f} GiB" if used and total else "n/a"
        table.add_row(
            f"{gpu.index} {gpu.name}",
            power_bar(gpu.power_w, gpu.power_limit_w),
            _num(gpu.gpu_utilization_pct, ".0f", "%"),
            _num(gpu.memory_utilization_pct, ".0f", "%"),
            f"{_num(gpu.sm_clock_mhz, '.0f')}/{_num(gpu.memory_clock_mhz, '.0f')} MHz",
            ", ".join(gpu.clock_event_reasons) or "-",
            _pcie(gpu),
            _num(gpu.temperature_c, ".0f", " °C"),
            memory,
        )
    return table
