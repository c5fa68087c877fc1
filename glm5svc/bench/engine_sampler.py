"""Reads of the engine's own counters while a run goes on, and the cache flush before it.

sglang 0.5.x exposes on /metrics (with --enable-metrics, which the launch plan sets):
`sglang:realtime_tokens_total{mode=prefill_compute|prefill_cache|decode}` (scheduler
side, advanced per batch), `sglang:num_requests_total` (finished requests), and the
gauges `sglang:num_running_reqs` and `sglang:num_queue_reqs`. Only the stats-logging rank
of each data-parallel group reports, so samples are summed across label sets.
`POST /flush_cache` empties the radix cache (sglang answers 400 while requests run).
"""

from __future__ import annotations

import threading
import time

from glm5svc.bench.steady import EngineSample
from glm5svc.http_fetch import FetchError, fetch_bytes, fetch_text
from glm5svc.metrics_text import MetricSamples, MetricsTextError, parse_metrics

SAMPLE_INTERVAL_S = 0.5
FLUSH_TIMEOUT_S = 30.0
FLUSH_RETRY_S = 0.5  # sglang refuses a flush while requests are still leaving


class EngineCountersMissing(RuntimeError):
    """The engine's /metrics has no token counters: the window cannot be read."""


def sample_from_metrics(samples: MetricSamples, t: float) -> EngineSample:
    def total(name: str, **labels: str) -> float:
        value = samples.total(name, **labels)
        return 0.0 if value is None else value

    if samples.total("sglang:realtime_tokens_total") is None:
        raise EngineCountersMissing(
            "the engine's /metrics has no sglang:realtime_tokens_total (sglang 0.5.x with "
            "--enable-metrics exposes it): start the server with --enable-metrics"
        )
    return EngineSample(
        t=t,
        running=total("sglang:num_running_reqs"),
        queued=total("sglang:num_queue_reqs"),
        completed=total("sglang:num_requests_total"),
        prefill_compute=total("sglang:realtime_tokens_total", mode="prefill_compute"),
        prefill_cache=total("sglang:realtime_tokens_total", mode="prefill_cache"),
        decode=total("sglang:realtime_tokens_total", mode="decode"),
    )


def read_sample(base_url: str, headers: dict[str, str], timeout_s: float = 5.0) -> EngineSample:
    text = fetch_text(base_url.rstrip("/") + "/metrics", timeout_s=timeout_s, headers=headers)
    return sample_from_metrics(parse_metrics(text), time.monotonic())


class EngineSampler:
    """Reads the engine's counters every SAMPLE_INTERVAL_S on a thread, between start()
    and stop(); the first read is taken before start() returns, the last on stop()."""

    def __init__(self, base_url: str, headers: dict[str, str]):
        self.base_url = base_url
        self.headers = headers
        self.samples: list[EngineSample] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="engine-counters", daemon=True)

    def start(self) -> None:
        self._read()
        self._thread.start()

    def _read(self) -> None:
        try:
            self.samples.append(read_sample(self.base_url, self.headers))
        except (FetchError, MetricsTextError, EngineCountersMissing) as exc:
            self.errors.append(str(exc))

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_INTERVAL_S):
            self._read()

    def stop(self) -> list[EngineSample]:
        self._stop.set()
        self._thread.join(10)
        self._read()
        return list(self.samples)


class FlushRefused(RuntimeError):
    pass


def flush_radix_cache(base_url: str, headers: dict[str, str]) -> float:
    """POST /flush_cache until sglang accepts it (it refuses while requests are in flight).
    Returns the seconds it took; raises FlushRefused with the fix when it cannot."""
    url = base_url.rstrip("/") + "/flush_cache"
    started = time.monotonic()
    last = ""
    while time.monotonic() - started < FLUSH_TIMEOUT_S:
        try:
            fetch_bytes(url, timeout_s=10.0, headers=headers, method="POST", data=b"")
            return time.monotonic() - started
        except FetchError as exc:
            if exc.status in (404, 405):
                raise FlushRefused(
                    f"{base_url} has no POST /flush_cache (HTTP {exc.status}), so each run's "
                    "prompts could be served from the radix cache: use an sglang server (0.4 "
                    "or newer), or declare the workload's sharing with "
                    "benchmark.prefix_sharing (a share of 0..1) to measure without a flush"
                ) from exc
            last = str(exc)
        time.sleep(FLUSH_RETRY_S)
    raise FlushRefused(
        f"the radix cache could not be flushed within {FLUSH_TIMEOUT_S:g} s ({last}): "
        "requests were still running; stop other traffic to the server before benchmarking"
    )
