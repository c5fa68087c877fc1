"""Reads of the engine's own counters while a run goes on, and the cache flush before it.

sglang 0.5.x exposes on /metrics (with --enable-metrics, which the launch plan sets):
`sglang:realtime_tokens_total{mode=prefill_compute|prefill_cache|decode}` (scheduler
side, advanced per batch), `sglang:num_requests_total` (finished requests), and the
gauges `sglang:num_running_reqs` and `sglang:num_queue_reqs`. Only the stats-logging rank
of each data-parallel group reports, so samples are summed across label sets.
`POST /flush_cache` empties the radix cache (sglang answers 400 while requests run; with
--admin-api-key it takes only that key: sglang 0.5.9 srt/utils/auth.py, ADMIN_OPTIONAL).
sglang.bench_serving (0.5.9) reads `GET /get_server_info` after every run and fails on an
answer that is not a JSON object (its `decode` a list of objects, its `internal_states` a
list of objects): `server_info_problem` says so before a run is spent on it.
Each answer the measurement cannot use raises SteadyRefused (or its FlushRefused) naming
what the engine answered and the fix.
"""

from __future__ import annotations

import json
import math
import threading
import time
from dataclasses import dataclass
from typing import Any

from glm5svc.bench.steady import EngineSample
from glm5svc.config import ENGINE_READ_INTERVAL_S
from glm5svc.http_fetch import FetchError, fetch_bytes, fetch_text
from glm5svc.metrics_text import MetricSamples, MetricsTextError, parse_metrics

SAMPLE_INTERVAL_S = ENGINE_READ_INTERVAL_S  # benchmark.window_s is at least this
FLUSH_TIMEOUT_S = 30.0
FLUSH_RETRY_S = 0.5  # sglang refuses a flush while requests are still leaving


TOKENS = "sglang:realtime_tokens_total"
TOKEN_MODES = ("prefill_compute", "prefill_cache", "decode")
MEASURED_ON = "sglang 0.5.9 and 0.5.11"  # the versions whose /metrics this reads
SHOWN = 120  # characters of an answer quoted in a message
STEADY_OFF = (
    "set benchmark.steady: false to measure one wave per level with bench_serving's own "
    "figures (not comparable with steady ones)"
)


class SteadyRefused(RuntimeError):
    """An engine answer that rules the steady measurement out (benchmark.steady): what the
    engine answered, and the fix. No run can do better, so the measurement stops."""


class FlushRefused(SteadyRefused):
    """POST /flush_cache did not empty the radix cache."""


class EngineCountersMissing(SteadyRefused):
    """The engine's /metrics has no token counters: the window cannot be read."""


def sample_from_metrics(samples: MetricSamples, t: float) -> EngineSample:
    def total(name: str, **labels: str) -> float:
        value = samples.total(name, **labels)
        return 0.0 if value is None else value

    tokens = samples.matching(TOKENS)
    if not tokens:
        if not any(name.startswith("sglang:") for name in samples.names()):
            found = f"{len(samples.samples)} samples, none named sglang:*"
            why = (
                "the engine runs without --enable-metrics (the launch plan sets it: a server "
                "started otherwise, or behind a proxy, needs it)"
            )
        else:
            found = "other sglang:* metrics, not this one"
            why = f"this sglang does not count tokens so ({MEASURED_ON} do)"
        raise EngineCountersMissing(
            f"the engine's /metrics has no {TOKENS} ({found}): {why}. The steady "
            "measurement reads the engine's token counters: run an sglang that has them, "
            f"or {STEADY_OFF}"
        )
    modes = {dict(s.labels).get("mode") for s in tokens}
    if not modes & set(TOKEN_MODES):
        shown = ", ".join(sorted("{" + ",".join(f"{k}={v}" for k, v in s.labels) + "}"
                                 for s in tokens)[:3])  # fmt: skip
        raise EngineCountersMissing(
            f"the engine's {TOKENS} has label sets {shown}, none with mode="
            f"{'|'.join(TOKEN_MODES)} as {MEASURED_ON} count them: its counters cannot "
            f"be read as prompt and output tokens; {STEADY_OFF}"
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


TTFT = "sglang:time_to_first_token_seconds"
ITL = "sglang:inter_token_latency_seconds"
Buckets = tuple[tuple[float, float], ...]  # (upper bound, cumulative count), by bound


@dataclass(frozen=True)
class CounterRead:
    """One read of the engine's /metrics: its counters and latency histograms."""

    sample: EngineSample
    ttft: Buckets
    itl: Buckets


def buckets(samples: MetricSamples, family: str) -> Buckets:
    """A histogram's cumulative buckets, summed over its label sets (ranks)."""
    by_bound: dict[float, float] = {}
    for sample in samples.matching(family + "_bucket"):
        bound = dict(sample.labels).get("le")
        try:
            upper = math.inf if bound in ("+Inf", "inf") else float(bound or "nan")
        except ValueError:
            continue
        if math.isnan(upper):
            continue
        by_bound[upper] = by_bound.get(upper, 0.0) + sample.value
    return tuple(sorted(by_bound.items()))


def read_counters(base_url: str, headers: dict[str, str], timeout_s: float = 5.0) -> CounterRead:
    """Raises FetchError, MetricsTextError, or EngineCountersMissing (no token counters)."""
    text = fetch_text(base_url.rstrip("/") + "/metrics", timeout_s=timeout_s, headers=headers)
    samples = parse_metrics(text)
    return CounterRead(
        sample_from_metrics(samples, time.monotonic()),
        buckets(samples, TTFT),
        buckets(samples, ITL),
    )


class EngineSampler:
    """Reads the engine's counters every `interval_s` on a thread, between start()
    and stop(); the first read is taken before start() returns, the last on stop()."""

    def __init__(
        self, base_url: str, headers: dict[str, str], interval_s: float = SAMPLE_INTERVAL_S
    ):
        self.base_url = base_url
        self.headers = headers
        self.interval_s = interval_s
        self.reads: list[CounterRead] = []  # the counters and latency histograms
        self.errors: list[str] = []
        self.missing: EngineCountersMissing | None = None  # the counters were not there
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="engine-counters", daemon=True)

    def start(self) -> None:
        self._read()
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._read()

    @property
    def samples(self) -> list[EngineSample]:
        return [read.sample for read in self.reads]

    def stop(self) -> list[EngineSample]:
        self._stop.set()
        self._thread.join(10)
        self._read()
        return self.samples

    def _read(self) -> None:
        try:
            self.reads.append(read_counters(self.base_url, self.headers))
        except EngineCountersMissing as exc:
            self.errors.append(str(exc))
            self.missing = exc
        except FetchError as exc:
            if exc.status == 404:  # sglang serves /metrics only with --enable-metrics
                self.missing = EngineCountersMissing(
                    f"{self.base_url.rstrip('/')}/metrics answered HTTP 404: the engine runs "
                    "without --enable-metrics (server.enable_metrics: true sets it; a server "
                    "started otherwise needs it). The steady measurement reads the engine's "
                    f"token counters: start it with --enable-metrics, or {STEADY_OFF}"
                )
            self.errors.append(f"the engine's /metrics could not be read: {exc}")
        except MetricsTextError as exc:
            self.errors.append(f"the engine's /metrics could not be read: {exc}")


def _answered(exc: FetchError) -> str:
    """What the engine answered: `HTTP 500 ('body...')`, or why there was no answer."""
    if exc.status is None:
        return f"no answer ({exc.cause})"
    body = exc.body.decode("utf-8", "replace").strip()
    return f"HTTP {exc.status}" + (f" ({body[:SHOWN]!r})" if body else "")


def flush_radix_cache(base_url: str, headers: dict[str, str]) -> float:
    """POST /flush_cache until sglang accepts it (it refuses while requests are in flight).
    Returns the seconds it took; raises FlushRefused with the fix when it cannot."""
    url = base_url.rstrip("/") + "/flush_cache"
    started = time.monotonic()
    last: FetchError | None = None
    without_flush = (
        "or declare the workload's sharing with benchmark.prefix_sharing (a share of 0..1) "
        "to measure without a flush"
    )
    while time.monotonic() - started < FLUSH_TIMEOUT_S:
        try:
            fetch_bytes(url, timeout_s=10.0, headers=headers, method="POST", data=b"")
            return time.monotonic() - started
        except FetchError as exc:
            if exc.status in (404, 405, 501):
                raise FlushRefused(
                    f"{base_url} has no POST /flush_cache ({_answered(exc)}), so each run's "
                    "prompts could be served from the radix cache: use an sglang server (0.4 "
                    f"or newer), {without_flush}"
                ) from exc
            if exc.status in (401, 403):
                raise FlushRefused(
                    f"POST {url} refused the API key glm5svc sent ({_answered(exc)}): sglang "
                    "takes only its --admin-api-key there when it has one (else its --api-key, "
                    "server.api_key_file); remove --admin-api-key from server.extra_args, "
                    f"{without_flush}"
                ) from exc
            if exc.status is not None and exc.status >= 500:
                raise FlushRefused(
                    f"POST {url} failed on the engine's side ({_answered(exc)}): its log says "
                    f"why; fix the engine, {without_flush}"
                ) from exc
            last = exc
        time.sleep(FLUSH_RETRY_S)
    if last is not None and last.status is None:
        raise FlushRefused(
            f"POST {url} got {_answered(last)} for {FLUSH_TIMEOUT_S:g} s: is the engine "
            "still up? (glm5svc status; its log)"
        )
    answer = _answered(last) if last is not None else "no answer in time"
    raise FlushRefused(
        f"the radix cache could not be flushed within {FLUSH_TIMEOUT_S:g} s (POST {url} "
        f"answered {answer}): sglang refuses while requests run or wait; stop other traffic "
        "to the server before benchmarking"
    )


def server_info_problem(base_url: str, headers: dict[str, str]) -> str | None:
    """Why sglang.bench_serving would fail on this engine's GET /get_server_info (it reads
    it after every run), or None. An error status is fine: bench_serving skips it then."""
    url = base_url.rstrip("/") + "/get_server_info"
    try:
        _, body = fetch_bytes(url, timeout_s=10.0, headers=headers)
    except FetchError:
        return None  # not an answer bench_serving reads; /health decides reachability
    text = body.decode("utf-8", "replace").strip()
    try:
        info = json.loads(text)
    except ValueError:
        return _info_problem(url, f"text that is not JSON ({text[:SHOWN]!r})")
    if not isinstance(info, dict):
        return _info_problem(url, f"JSON that is {_kind(info)}, not an object")
    decode = info.get("decode", [{}])
    if "decode" in info and not (isinstance(decode, list) and decode and _objects(decode)):
        return _info_problem(url, f"an object whose decode is {_kind(decode)}")
    first = decode[0] if "decode" in info else info
    states = first.get("internal_states")
    if states and not (isinstance(states, list) and _objects(states)):
        return _info_problem(url, f"an object whose internal_states is {_kind(states)}")
    return None


def _objects(items: list[Any]) -> bool:
    return all(isinstance(item, dict) for item in items)


def _kind(value: Any) -> str:
    if isinstance(value, list):
        return "an empty list" if not value else "a list of " + type(value[0]).__name__
    kinds = {dict: "an object", str: "a string", bool: "a boolean", type(None): "null"}
    return kinds.get(type(value), "a number" if isinstance(value, int | float) else "a value")


def _info_problem(url: str, answered: str) -> str:
    return (
        f"GET {url} answered {answered}: sglang.bench_serving (0.5.9) reads it after every "
        "run as sglang's server info (an object; `decode` and `internal_states` lists of "
        "objects) and would fail on it; benchmark an sglang server directly (0.5.x), not a "
        "proxy or another server"
    )
