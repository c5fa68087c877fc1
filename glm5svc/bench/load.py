"""One continuous load per engine start: the target concurrency held from READY to the
start's last window, so that windows are read from the engine's counters while it runs.

A bench_serving process per window pays its imports, its prompt generation, a ramp up
and a ramp down every time (on the H200 testbed four 10 s windows took about 190 s of wall
time). Here `concurrency` workers each keep one request in the engine: a request ends, the
worker sends the next. Nothing is prepared ahead: each prompt is drawn when it is sent.

The prompts are independent random token ids (sglang's native `/generate` with
`input_ids`), so two prompts share a prefix of k tokens with probability vocab**-k: the
radix cache finds nothing to reuse however long the load runs. bench_serving's random-ids
prompts are consecutive ids from a random start, so two with the same start collide whole
(0.4-1.9 % of prompt tokens cached per window on the testbed). Lengths are drawn per
request, uniformly in [ratio x length, length] for input and output alike (`range_ratio`,
bench_serving's --random-range-ratio: with a fixed length, the requests of a start move
in waves), or in turn from a recorded workload's lengths (benchmark.request_file).
Every answer is awaited whole (`ignore_eos`, no streaming): the figures come from the
engine's counters, so the client parses one JSON object per request and nothing more.
But sglang sends a non-streamed request's output once, when it finishes, and its TTFT
histogram records that first output chunk: for such requests it is the whole request's
latency, not the first token's. So `latency_probes` of the workers stream instead, and
time what a streaming client sees: the first token (TTFT) and the gaps between the
following ones (inter-token latency). Latency limits are judged on those.
The load's own pacing is counted too (`pacing()`): requests in flight, and each send gap,
from a worker's answer to its next request on the wire (drawing the prompt, the client's
share of the interpreter): a load that lags shows there, not as the engine's noise.
"""

from __future__ import annotations

import http.client
import json
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

REQUEST_TIMEOUT_S = 600.0  # one request; a longer one is an engine that stopped answering
RETRY_PAUSE_S = 0.5  # after a failed request, before the worker's next
ERRORS_KEPT = 5


@dataclass(frozen=True)
class LoadShape:
    """What each request of the load looks like."""

    concurrency: int
    input_len: int
    output_len: int
    range_ratio: float = 0.5  # lengths uniform in [ratio x len, len]; 1.0: fixed
    vocab_size: int = 32_000
    lengths: Sequence[tuple[int, int]] = ()  # a recorded workload's (input, output), in turn
    prefix_share: float = 0.0  # benchmark.prefix_sharing: this share of each prompt is common
    latency_probes: int = 0  # workers that stream and time their first token and the rest

    def describe(self) -> str:
        if self.lengths:
            text = f"{len(self.lengths)} recorded request lengths, in turn"
        elif self.range_ratio >= 1.0:
            text = f"{self.input_len} in / {self.output_len} out, fixed"
        else:
            text = (
                f"input uniform in [{_low(self.input_len, self.range_ratio)}, "
                f"{self.input_len}], output in [{_low(self.output_len, self.range_ratio)}, "
                f"{self.output_len}] tokens"
            )
        if self.prefix_share:
            text += f"; {self.prefix_share:.0%} of each prompt shared"
        return text


def _low(length: int, ratio: float) -> int:
    return max(1, int(length * ratio))


@dataclass(frozen=True)
class StreamedLatency:
    """One streamed request as its client saw it."""

    ended_at: float  # time.monotonic() of its last chunk
    ttft_s: float  # from sending to the first chunk that carries output
    itl_s: float | None  # mean gap between the later output chunks (None: one chunk)


@dataclass
class LoadCounts:
    sent: int = 0
    completed: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    streamed: list[StreamedLatency] = field(default_factory=list)
    gaps: int = 0  # sends that followed the same worker's answer
    gap_total_s: float = 0.0  # their gaps, summed
    gap_max_s: float = 0.0  # the longest since the last pacing()

    def streamed_between(self, start: float, end: float) -> list[StreamedLatency]:
        return [s for s in list(self.streamed) if start < s.ended_at <= end]


@dataclass(frozen=True)
class LoadPacing:
    """The load's counters at one moment (cumulative, but `gap_max_s`: the longest send gap
    since the previous read)."""

    sent: int
    completed: int
    failed: int
    gaps: int
    gap_total_s: float
    gap_max_s: float

    @property
    def in_flight(self) -> int:
        return self.sent - self.completed - self.failed


class ContinuousLoad:
    """`shape.concurrency` workers against `base_url`'s /generate, from start() to stop()."""

    def __init__(self, base_url: str, headers: dict[str, str], shape: LoadShape, seed: int):
        parts = urlsplit(base_url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.headers = {"Content-Type": "application/json", **headers}
        self.shape = shape
        self.seed = seed
        self.counts = LoadCounts()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._next_length = 0
        # The workload's declared sharing: every prompt begins with the same tokens (as a
        # system prompt would), this share of its own length; the rest is its own.
        shared = random.Random(f"{seed}/shared")
        longest = max([shape.input_len, *(i for i, _ in shape.lengths)])
        self._shared = [shared.randrange(shape.vocab_size) for _ in range(longest)]
        self._workers = [
            threading.Thread(target=self._work, args=(i,), name=f"load-{i}", daemon=True)
            for i in range(shape.concurrency)
        ]
        self.started_at: float | None = None

    def start(self) -> None:
        self.started_at = time.monotonic()
        for worker in self._workers:
            worker.start()

    def stop(self, timeout_s: float = 5.0) -> LoadCounts:
        """No new requests; those in flight are left to the engine's drain (a worker
        blocked on its answer ends with the process: the threads are daemons)."""
        self._stop.set()
        deadline = time.monotonic() + timeout_s
        for worker in self._workers:
            if worker.is_alive():
                worker.join(max(0.0, deadline - time.monotonic()))
        return self.counts

    def pacing(self) -> LoadPacing:
        """The pacing counters now; the longest gap starts again from here."""
        with self._lock:
            c = self.counts
            now = LoadPacing(c.sent, c.completed, c.failed, c.gaps, c.gap_total_s, c.gap_max_s)
            c.gap_max_s = 0.0
        return now

    @property
    def running(self) -> bool:
        return self.started_at is not None and not self._stop.is_set()

    def _lengths(self, rng: random.Random) -> tuple[int, int]:
        shape = self.shape
        if shape.lengths:
            with self._lock:
                index = self._next_length
                self._next_length += 1
            return shape.lengths[index % len(shape.lengths)]
        if shape.range_ratio >= 1.0:
            return shape.input_len, shape.output_len
        return (
            rng.randint(_low(shape.input_len, shape.range_ratio), shape.input_len),
            rng.randint(_low(shape.output_len, shape.range_ratio), shape.output_len),
        )

    def _body(self, rng: random.Random, stream: bool) -> bytes:
        input_len, output_len = self._lengths(rng)
        common = min(input_len - 1, int(self.shape.prefix_share * input_len))
        ids = self._shared[:common]
        ids += [rng.randrange(self.shape.vocab_size) for _ in range(input_len - common)]
        return json.dumps(
            {
                "input_ids": ids,
                "sampling_params": {
                    "max_new_tokens": output_len,
                    "ignore_eos": True,
                    "temperature": 0.0,
                },
                "stream": stream,
            }
        ).encode()

    def _work(self, index: int) -> None:
        rng = random.Random(f"{self.seed}/{index}")
        stream = index < self.shape.latency_probes
        connection: http.client.HTTPConnection | None = None
        answered_at: float | None = None  # this worker's last answer, None after a failure
        while not self._stop.is_set():
            body = self._body(rng, stream)
            with self._lock:
                self.counts.sent += 1
            try:
                if connection is None:
                    connection = http.client.HTTPConnection(
                        self.host, self.port, timeout=REQUEST_TIMEOUT_S
                    )
                sent_at = time.monotonic()
                if answered_at is not None:
                    self._gap(sent_at - answered_at)
                connection.request("POST", "/generate", body=body, headers=self.headers)
                response = connection.getresponse()
                if response.status != 200:
                    raise OSError(f"HTTP {response.status}: {response.read()[:120]!r}")
                timed = read_stream(response, sent_at) if stream else response.read()
                answered_at = time.monotonic()
                with self._lock:
                    self.counts.completed += 1
                    if isinstance(timed, StreamedLatency):
                        self.counts.streamed.append(timed)
            except (OSError, http.client.HTTPException) as exc:
                if connection is not None:
                    connection.close()
                connection = None
                answered_at = None  # the retry pause is not the client's pacing
                with self._lock:
                    self.counts.failed += 1
                    if len(self.counts.errors) < ERRORS_KEPT:
                        self.counts.errors.append(str(exc) or type(exc).__name__)
                self._stop.wait(RETRY_PAUSE_S)
        if connection is not None:
            connection.close()

    def _gap(self, seconds: float) -> None:
        with self._lock:
            c = self.counts
            c.gaps += 1
            c.gap_total_s += seconds
            c.gap_max_s = max(c.gap_max_s, seconds)


def read_stream(response: http.client.HTTPResponse, sent_at: float) -> StreamedLatency:
    """An SSE answer (`data: {...}` lines, then `data: [DONE]`) read to its end, the arrival
    of each chunk that carries output timed. sglang's chunks carry the text so far, so
    a chunk with output is one whose `meta_info.completion_tokens` grew."""
    arrivals: list[tuple[float, int]] = []  # (time, tokens so far)
    seen = 0
    for raw in response:
        line = raw.strip()
        if not line.startswith(b"data:") or line == b"data: [DONE]":
            continue
        try:
            tokens = json.loads(line[5:])["meta_info"]["completion_tokens"]
        except (ValueError, KeyError, TypeError):
            continue
        if isinstance(tokens, int) and tokens > seen:
            arrivals.append((time.monotonic(), tokens))
            seen = tokens
    if not arrivals:
        raise OSError("a streamed answer carried no output tokens")
    (first_at, first_tokens), (last_at, last_tokens) = arrivals[0], arrivals[-1]
    later = last_tokens - first_tokens
    itl = (last_at - first_at) / later if later > 0 else None
    return StreamedLatency(last_at, first_at - sent_at, itl)
