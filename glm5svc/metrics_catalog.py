"""Every metric family the service's /metrics can serve, read from its own collectors.

The collectors render a service in every state at once (ready, start-up figures known, a
benchmark measured at one level, one GPU with every reading), so a family the code adds
appears here without a list kept by hand. docs/metrics.md is this catalog
(`python -m glm5svc.docgen`); tests check the shipped rules and dashboard against it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields

from glm5svc.records import BenchmarkLevel, BenchmarkStatus, LastNight
from glm5svc.serve.metrics import build_registry
from glm5svc.serve.state import SupervisorState
from glm5svc.telemetry.snapshot import GpuSnapshot, Snapshot

# Name endings and the unit they mean, longest first (Prometheus' base-unit suffixes).
UNITS = (
    ("_tokens_per_second", "tokens/s"),
    ("_per_second", "1/s"),
    ("_seconds", "seconds"),
    ("_bytes", "bytes"),
    ("_watts", "watts"),
    ("_hertz", "hertz"),
    ("_joules", "joules"),
    ("_celsius", "°C"),
    ("_ratio", "ratio (1 = 100 %)"),
)


@dataclass(frozen=True)
class Family:
    name: str  # as scraped: counters with their _total
    type: str
    labels: tuple[str, ...]
    unit: str
    help: str
    # A label's values where the code enumerates them (phase, reason, direction).
    values: dict[str, tuple[str, ...]] = field(default_factory=dict)


class _EverySampler:
    """A telemetry sampler whose snapshot has one GPU with every reading."""

    def snapshot(self) -> Snapshot:
        numbers = {
            f.name: 1
            for f in fields(GpuSnapshot)
            if f.name not in ("index", "name", "uuid", "pci_bus_id", "pcie_gaps")
            and f.type in ("float | None", "int | None")
        }
        gpu = GpuSnapshot(
            index=0,
            name="GPU",
            uuid="GPU-0",
            pci_bus_id="00000000:01:00.0",
            clock_event_reasons=("gpu_idle",),
            **numbers,
        )
        return Snapshot(
            available=True, driver_version="1", taken_monotonic=time.monotonic(), gpus=(gpu,)
        )


class _EveryNight:
    """A night that ended with every figure, a turn held and (as the night's textfile has
    it) one in progress (serve.metrics.NightFiles)."""

    def last(self) -> LastNight:
        ended = "2026-01-01T06:00:00.000+00:00"
        return LastNight(
            night_outcome="tuned",
            night_dir="/",
            night_began_at=ended,
            night_ended_at=ended,
            night_headline="",
            night_ratio=1.0,
        )

    def in_turn(self) -> bool:
        return True

    def deadline(self) -> float:
        return 1.0


def _state_with_everything() -> SupervisorState:
    state = SupervisorState(wedge_window_s=1.0)
    state.startup_seconds = 1.0
    state.load_percent = 100
    figures = {f.name: 1.0 for f in fields(BenchmarkLevel) if f.type == "float | None"}
    level = BenchmarkLevel(concurrency=1, completed=1, requested=1, **figures)
    state.benchmark = BenchmarkStatus(levels=(level,))
    return state


def unit_of(name: str) -> str:
    stem = name.removesuffix("_total")
    return next((unit for suffix, unit in UNITS if stem.endswith(suffix)), "")


def table() -> list[str]:
    """The catalog as a Markdown table."""
    rows = ["| family | type | labels | unit | meaning |", "|---|---|---|---|---|"]
    for family in families():
        labels = ", ".join(_label(label, family.values.get(label)) for label in family.labels)
        labels = labels or "—"
        unit = family.unit or ("count" if family.type == "counter" else "—")
        meaning = family.help.replace("|", "\\|")
        rows.append(f"| `{family.name}` | {family.type} | {labels} | {unit} | {meaning} |")
    return rows


def families() -> list[Family]:
    """Each family /metrics can serve, in the order it serves them."""
    registry = build_registry(_state_with_everything(), _EverySampler(), _EveryNight())
    found = []
    for metric in registry.collect():
        sample = metric.samples[0]
        labels = tuple(dict.fromkeys(key for s in metric.samples for key in s.labels))
        seen = {
            label: tuple(dict.fromkeys(s.labels[label] for s in metric.samples)) for label in labels
        }
        values = {
            label: found_values for label, found_values in seen.items() if len(found_values) > 1
        }
        unit = unit_of(sample.name)
        found.append(Family(sample.name, metric.type, labels, unit, metric.documentation, values))
    return found


def _label(label: str, values: tuple[str, ...] | None) -> str:
    if not values:
        return f"`{label}`"
    return f"`{label}` ({', '.join(f'`{value}`' for value in values)})"


def names() -> set[str]:
    return {family.name for family in families()}
