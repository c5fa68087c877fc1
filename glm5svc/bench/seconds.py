"""Once a second while a start is measured: what moved beside the engine's counters.

Each line of `seconds.jsonl` (in the start's folder) is one second: the GPUs' SM and
memory clocks, power, temperature, clock-event (throttle) reasons and utilisation (NVML,
through glm5svc.nvml; no NVML: those fields are null, the rest is recorded), the engine's
own gauges and counters from its /metrics (running and queued requests, KV token usage,
`sglang:realtime_tokens_total` by mode: prefill computed, prefill from the cache, decode;
finished requests; forward passes by `sglang:cuda_graph_passes_total` mode where the
engine has it, which tells decode steps run in a CUDA graph from those run without), and
the load's own pacing (glm5svc/bench/load.py: requests in flight on the client's side,
sends, the mean and longest send gap in the second). Counters stay cumulative, so a
second that could not be read loses nothing: the next line's advance covers both.

The first line is the header (`schema`, the GPUs, why NVML is absent). Lines are held at
most FLUSH_EVERY at a time, then appended and fsynced: memory stays bounded over a night,
and a start cut short keeps all but its last few seconds. glm5svc/tune/noise.py reads the
file and attributes the windows' spread to these sources.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from glm5svc.bench.engine_sampler import sample_from_metrics
from glm5svc.bench.load import LoadPacing
from glm5svc.http_fetch import FetchError, fetch_text
from glm5svc.metrics_text import MetricSamples, MetricsTextError, parse_metrics
from glm5svc.nvml import NvmlSource, NvmlUnavailable, PynvmlSource

SECONDS_FILE = "seconds.jsonl"
SCHEMA = "glm5svc.seconds/1"
INTERVAL_S = 1.0
FLUSH_EVERY = 30  # lines held in memory before they are appended
ERRORS_KEPT = 3  # per line
PASSES = "sglang:cuda_graph_passes_total"
# What every line has (null where it could not be read): tests/tune and noise.py rely on it.
GPU_FIELDS = ("sm_clock_mhz", "memory_clock_mhz", "power_w", "temperature_c",
              "throttle_reasons", "utilization_pct")  # fmt: skip
ENGINE_FIELDS = ("running", "queued", "token_usage", "completed", "prefill_compute",
                 "prefill_cache", "decode", "passes")  # fmt: skip
LOAD_FIELDS = ("in_flight", "sent", "load_completed", "load_failed", "gaps", "gap_total_s",
               "gap_max_ms")  # fmt: skip
FIELDS = ("t", "unix", *GPU_FIELDS, "gpus", *ENGINE_FIELDS, *LOAD_FIELDS)


def engine_fields(samples: MetricSamples) -> dict[str, Any]:
    """The engine's part of a line from one /metrics read (raises EngineCountersMissing
    when it has no token counters, as a window's read does)."""
    sample = sample_from_metrics(samples, 0.0)
    passes: dict[str, float] = {}
    for item in samples.matching(PASSES):
        mode = dict(item.labels).get("mode", "")
        passes[mode] = passes.get(mode, 0.0) + item.value
    return {
        "running": sample.running,
        "queued": sample.queued,
        "token_usage": samples.total("sglang:token_usage"),
        "completed": sample.completed,
        "prefill_compute": sample.prefill_compute,
        "prefill_cache": sample.prefill_cache,
        "decode": sample.decode,
        "passes": passes or None,
    }


def load_fields(pacing: LoadPacing | None) -> dict[str, Any]:
    if pacing is None:
        return dict.fromkeys(LOAD_FIELDS)
    return {
        "in_flight": pacing.in_flight,
        "sent": pacing.sent,
        "load_completed": pacing.completed,
        "load_failed": pacing.failed,
        "gaps": pacing.gaps,
        "gap_total_s": round(pacing.gap_total_s, 6),
        "gap_max_ms": round(pacing.gap_max_s * 1000, 3),
    }


def gpu_fields(readings: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The GPUs' means (clocks, power, temperature, utilisation) and their throttle reasons
    OR-ed: one figure per second whatever the GPU count; each GPU's own under `gpus`."""
    line: dict[str, Any] = {}
    for name in GPU_FIELDS:
        values = [r[name] for r in readings if r.get(name) is not None]
        if not values:
            line[name] = None
        elif name == "throttle_reasons":
            found = 0
            for value in values:
                found |= int(value)
            line[name] = found
        else:
            line[name] = round(sum(values) / len(values), 2)
    line["gpus"] = list(readings) if readings else None
    return line


class SecondsRecorder:
    """From start() to stop(): one line a second into `path` (FIELDS), on a thread."""

    def __init__(
        self,
        engine_url: str,
        headers: dict[str, str],
        path: Path,
        pacing: Callable[[], LoadPacing] | None = None,
        nvml: NvmlSource | None = None,
        gpu_indices: Sequence[int] | None = None,
        interval_s: float = INTERVAL_S,
    ):
        self.url = engine_url.rstrip("/") + "/metrics"
        self.headers = headers
        self.path = path
        self.pacing = pacing
        self.nvml = nvml if nvml is not None else PynvmlSource()
        self.gpu_indices = gpu_indices
        self.interval_s = interval_s
        self.lines = 0
        self.nvml_absent: str | None = None
        self._gpus: list[int] = []
        self._held: list[str] = []
        self._began = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="seconds", daemon=True)

    def start(self) -> SecondsRecorder:
        try:
            identities = self.nvml.open()
            wanted = self.gpu_indices
            self._gpus = [g.index for g in identities if wanted is None or g.index in wanted]
            names = [f"{g.index}: {g.name}" for g in identities if g.index in self._gpus]
        except NvmlUnavailable as exc:
            self.nvml_absent, names = str(exc), []
        except Exception as exc:  # noqa: BLE001 - a binding that fails otherwise: no GPU fields
            self.nvml_absent, names = f"NVML failed: {type(exc).__name__}: {exc}", []
        self.path.parent.mkdir(parents=True, exist_ok=True)
        header = {"schema": SCHEMA, "interval_s": self.interval_s, "gpus": names,
                  "nvml_absent": self.nvml_absent, "fields": list(FIELDS)}  # fmt: skip
        self.path.write_text(json.dumps(header) + "\n", encoding="utf-8")
        self._began = time.monotonic()
        self._thread.start()
        return self

    def stop(self) -> int:
        """The last line, everything held appended and fsynced, NVML closed: lines written."""
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join(10)
            self.record()
            self._flush()
            if self.nvml_absent is None:
                self.nvml.close()
        return self.lines

    def _run(self) -> None:
        next_at = time.monotonic()
        while True:
            next_at += self.interval_s
            if self._stop.wait(max(0.0, next_at - time.monotonic())):
                return
            self.record()

    def record(self) -> None:
        """One line now (the thread's every second; stop()'s last)."""
        errors: list[str] = []
        now = time.monotonic()
        line: dict[str, Any] = {"t": round(now - self._began, 3), "unix": round(time.time(), 3)}
        line.update(gpu_fields(self._read_gpus(errors)))
        try:
            line.update(
                engine_fields(
                    parse_metrics(fetch_text(self.url, timeout_s=2.0, headers=self.headers))
                )
            )
        except (FetchError, MetricsTextError, RuntimeError) as exc:  # SteadyRefused too
            line.update(dict.fromkeys(ENGINE_FIELDS))
            errors.append(f"engine: {exc}")
        line.update(load_fields(self.pacing() if self.pacing else None))
        if errors:
            line["errors"] = errors[:ERRORS_KEPT]
        self._held.append(json.dumps(line))
        self.lines += 1
        if len(self._held) >= FLUSH_EVERY:
            self._flush()

    def _read_gpus(self, errors: list[str]) -> list[dict[str, Any]]:
        readings = []
        for index in self._gpus:
            try:
                raw = self.nvml.read_sample(index)
            except Exception as exc:  # noqa: BLE001 - a reading lost is a null, never a crash
                errors.append(f"GPU {index}: {exc}")
                continue
            readings.append({
                "index": index,
                "sm_clock_mhz": raw.sm_clock_mhz,
                "memory_clock_mhz": raw.memory_clock_mhz,
                "power_w": raw.power_w,
                "temperature_c": raw.temperature_c,
                "throttle_reasons": raw.clock_event_reasons,
                "utilization_pct": raw.gpu_utilization_pct,
            })  # fmt: skip
        return readings

    def _flush(self) -> None:
        if not self._held:
            return
        held, self._held = self._held, []
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write("\n".join(held) + "\n")
            handle.flush()
            os.fsync(handle.fileno())


def read_seconds(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(the header, the lines) of a seconds.jsonl; a last line cut mid-write is left out."""
    header: dict[str, Any] = {}
    lines: list[dict[str, Any]] = []
    for text in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(text)
        except ValueError:
            continue
        if "schema" in record:
            header = record
        else:
            lines.append(record)
    return header, lines
