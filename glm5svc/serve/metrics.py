"""The service's own Prometheus metrics, computed from the supervisor state at scrape time.

One prefix, `glm5svc_`, for every family /metrics serves: the service's, the last
benchmark's (`glm5svc_bench_*`), the GPUs' (`glm5svc_gpu_*`, `glm5svc_telemetry_*`) and the
last unattended night's (`glm5svc_night_*`, from its record in service.results_dir). A
family with no sample (a benchmark figure no level measured, a reading this GPU lacks) is
left out, as Prometheus' exposition guidelines ask. The text format by default, OpenMetrics
when the scraper's Accept header asks for it (`exposition`).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import choose_encoder, generate_latest
from prometheus_client.registry import Collector

from glm5svc.benchmark_gauges import bench_metrics_families
from glm5svc.records import (
    NIGHT_OUTCOMES,
    NIGHT_TURN_FILE,
    LastNight,
    RecordError,
)
from glm5svc.serve.phases import Phase
from glm5svc.serve.state import SupervisorState
from glm5svc.telemetry.prometheus import register_gpu_collector

# Served as 1 on the listener's port by `glm5svc tune` while it holds the GPUs (glm5.service
# stopped on purpose: glm5svc/serve/tune_signal.py); serve itself always serves 0.
TUNE_RUNNING = "glm5svc_tune_running"
TUNE_RUNNING_HELP = (
    "1 while glm5svc tune holds the GPUs (served on this port by the tune, the service "
    "stopped on purpose); 0 from the service"
)


class ServiceCollector(Collector):
    def __init__(self, state: SupervisorState):
        self.state = state

    def collect(self):
        snap = self.state.snapshot()
        yield _gauge("glm5svc_ready", "1 when the engine serves and passes checks", snap.ready)
        yield _gauge("glm5svc_draining", "1 while stopping", snap.draining)
        yield _gauge("glm5svc_wedged", "1 when probes fail with no engine progress", snap.wedged)
        phase = GaugeMetricFamily(
            "glm5svc_phase", "current phase (1 for the current one)", labels=["phase"]
        )
        for value in Phase:
            phase.add_metric([value.value], 1.0 if value.value == snap.phase else 0.0)
        yield phase
        if snap.startup_seconds is not None:
            yield _gauge("glm5svc_startup_seconds", "start to READY", snap.startup_seconds)
        if snap.load_percent is not None:
            yield _gauge(
                "glm5svc_load_progress_ratio",
                "weight loading progress (0-1)",
                snap.load_percent / 100.0,
            )
        yield _gauge("glm5svc_uptime_seconds", "time since glm5svc serve started", snap.uptime_s)
        probes = snap.probes
        yield _counter("glm5svc_probes", "health probes sent to the engine", probes.total)
        yield _counter("glm5svc_probe_failures", "failed health probes", probes.failures_total)
        yield _gauge(
            "glm5svc_probe_consecutive_failures",
            "failed probes in a row",
            probes.consecutive_failures,
        )
        yield _gauge(
            "glm5svc_engine_progress_age_seconds",
            "time since the engine last showed progress",
            probes.last_progress_age_s,
        )
        yield _counter(
            "glm5svc_engine_restarts", "engine restarts seen by this process", snap.restarts_seen
        )
        yield _gauge("glm5svc_degraded", "1 when below the benchmark baseline", snap.degraded)
        previous = snap.previous_run
        yield _gauge(
            "glm5svc_previous_run_failed",
            "1 when the previous glm5svc serve here ended with a failure (0 after a stop or "
            "a drain, or with no record)",
            bool(previous is not None and previous.exit_status != 0),
        )
        yield _gauge(TUNE_RUNNING, TUNE_RUNNING_HELP, 0)
        if snap.benchmark is not None and snap.benchmark.error is None:
            yield from bench_metrics_families(snap.benchmark)


def _gauge(name: str, doc: str, value) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=float(value))


def _counter(name: str, doc: str, value) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=float(value))


class NightFiles:
    """The last night's record and this replica's turn, read from service.results_dir at
    each scrape (`glm5svc night` writes them; the service only shows them)."""

    def __init__(self, results_dir: Path):
        self.results_dir = Path(results_dir)

    def last(self) -> LastNight | None:
        try:
            return LastNight.read(self.results_dir)
        except RecordError:
            return None  # a broken record is said by `glm5svc status`, not by a scrape

    def in_turn(self) -> bool:
        return (self.results_dir / NIGHT_TURN_FILE).exists()

    def deadline(self) -> float | None:
        """The deadline of a night in progress: only the night's textfile knows it."""
        return None


class NightCollector(Collector):
    def __init__(self, night: NightFiles, turn: bool = True):
        self.night = night
        self.turn = turn

    def collect(self):
        if self.turn:
            yield _gauge(
                "glm5svc_night_turn",
                "1 while this replica's unattended night holds its turn behind the gateway",
                self.night.in_turn(),
            )
        deadline = self.night.deadline()
        if deadline is not None or not self.turn:
            yield _gauge(
                "glm5svc_night_in_progress",
                "1 while an unattended night is in progress (the night's textfile)",
                deadline is not None,
            )
        if deadline is not None:
            yield _gauge(
                "glm5svc_night_deadline_timestamp_seconds",
                "when the night in progress should have ended, at the latest (unix time; "
                "the night's textfile)",
                deadline,
            )
        last = self.night.last()
        if last is None:
            return
        outcome = GaugeMetricFamily(
            "glm5svc_night_outcome",
            "the last unattended night's outcome (glm5svc night; 1 for it)",
            labels=["outcome"],
        )
        for value in NIGHT_OUTCOMES:
            outcome.add_metric([value], 1.0 if value == last.night_outcome else 0.0)
        yield outcome
        ended = datetime.fromisoformat(last.night_ended_at).timestamp()
        yield _gauge(
            "glm5svc_night_ended_timestamp_seconds", "when the last night ended (unix time)", ended
        )
        if last.night_ratio is not None:
            yield _gauge(
                "glm5svc_night_morning_ratio",
                "the last night's morning throughput over the evening's",
                last.night_ratio,
            )


class _WrittenNight:
    """What the night writes, in NightFiles' shape."""

    def __init__(self, last: LastNight | None, deadline: float | None):
        self._last, self._deadline = last, deadline

    def last(self) -> LastNight | None:
        return self._last

    def deadline(self) -> float | None:
        return self._deadline


def night_textfile(last: LastNight | None, deadline: float | None) -> str:
    """The night's families as node_exporter's textfile collector reads them: the last
    night's (as /metrics serves them) and, while a night is in progress, its deadline."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NightCollector(_WrittenNight(last, deadline), turn=False))
    return generate_latest(registry).decode("utf-8")


class NonEmpty(Collector):
    """Another registry's families, less those without a sample."""

    def __init__(self, inner: CollectorRegistry):
        self.inner = inner

    def collect(self):
        return (family for family in self.inner.collect() if family.samples)


def build_registry(
    state: SupervisorState, telemetry_sampler=None, night: NightFiles | None = None
) -> CollectorRegistry:
    families = CollectorRegistry(auto_describe=False)
    families.register(ServiceCollector(state))
    if night is not None:
        families.register(NightCollector(night))
    register_gpu_telemetry(families, telemetry_sampler)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NonEmpty(families))
    return registry


def exposition(registry: CollectorRegistry, accept: str | None) -> tuple[bytes, str]:
    """The scrape's body and content type: OpenMetrics when Accept asks for it."""
    encoder, content_type = choose_encoder(accept or "")
    return encoder(registry), content_type


def register_gpu_telemetry(registry: CollectorRegistry, sampler) -> bool:
    """Add the GPU families (glm5svc_gpu_*) when the service runs a telemetry sampler."""
    if sampler is None:
        return False
    register_gpu_collector(registry, sampler)
    return True
