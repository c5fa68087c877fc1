"""HTTP probes of the SGLang server: health, one real generation, its progress counters."""

from __future__ import annotations

import json
from dataclasses import dataclass

from glm5svc.config import connect_host
from glm5svc.http_fetch import FetchError, bearer, fetch_bytes
from glm5svc.metrics_text import MetricsTextError, parse_metrics

GENERATION_CHECK_PROMPT = "The capital of France is"
PROGRESS_COUNTERS = (
    "sglang:generation_tokens_total",
    "sglang:prompt_tokens_total",
    "sglang:num_running_reqs",
    "sglang:num_queue_reqs",
)
# What the scheduler is doing now; token_usage is a share of the KV pool, so the ranks'
# values are not added up (the fullest rank counts).
SCHEDULER_GAUGES = ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage")
_TAKE_MAX = ("sglang:token_usage",)


@dataclass
class ProbeResult:
    ok: bool
    detail: str


class EngineClient:
    def __init__(self, host: str, port: int, api_key: str | None = None):
        self.base_url = f"http://{connect_host(host)}:{port}"
        self.api_key = api_key

    def _request(self, path: str, timeout: float, body: dict | None = None) -> tuple[int, bytes]:
        """(status, body) of a 2xx answer; FetchError otherwise (an HTTP error keeps both)."""
        headers = bearer(self.api_key)
        if body is None:
            return fetch_bytes(self.base_url + path, timeout_s=timeout, headers=headers)
        headers["Content-Type"] = "application/json"
        data = json.dumps(body).encode()
        return fetch_bytes(
            self.base_url + path, timeout_s=timeout, headers=headers, method="POST", data=data
        )

    def health_generate(self, timeout: float) -> ProbeResult:
        """/health_generate: sglang runs a one-token generation and waits a second before
        looking at the answer (0.5.11; its /health is the same handler)."""
        return self._status_probe("/health_generate", timeout)

    def _status_probe(self, path: str, timeout: float) -> ProbeResult:
        try:
            status, body = self._request(path, timeout)
        except FetchError as exc:
            return ProbeResult(False, f"{path}: {_reason(exc)}")
        if status == 200:
            return ProbeResult(True, f"{path}: 200")
        return ProbeResult(False, f"{path}: HTTP {status} {body[:200]!r}")

    def generation_check(self, timeout: float) -> ProbeResult:
        """One short real generation through /generate must return text."""
        body = {
            "text": GENERATION_CHECK_PROMPT,
            "sampling_params": {"max_new_tokens": 8, "temperature": 0.0},
        }
        try:
            status, raw = self._request("/generate", timeout, body)
        except FetchError as exc:
            return ProbeResult(False, f"generation check: {_reason(exc)}")
        if status != 200:
            return ProbeResult(False, f"generation check: HTTP {status} {raw[:200]!r}")
        try:
            reply = json.loads(raw)
        except ValueError:
            return ProbeResult(False, f"generation check: not JSON: {raw[:200]!r}")
        text = reply.get("text") if isinstance(reply, dict) else None
        if not isinstance(text, str) or not text.strip():
            return ProbeResult(False, f"generation check: no text in reply {raw[:200]!r}")
        return ProbeResult(True, f"generation check: {len(text)} characters")

    def progress_counters(self, timeout: float) -> dict[str, float] | None:
        """The sglang: progress metrics (summed over label sets), or None if unavailable."""
        return self._metrics(timeout, PROGRESS_COUNTERS)

    def scheduler_gauges(self, timeout: float) -> dict[str, float] | None:
        """Running and queued requests and KV-pool usage now, or None if unavailable."""
        return self._metrics(timeout, SCHEDULER_GAUGES)

    def _metrics(self, timeout: float, names: tuple[str, ...]) -> dict[str, float] | None:
        try:
            _, raw = self._request("/metrics", timeout)
            return parse_progress_counters(raw.decode("utf-8", "replace"), names)
        except (FetchError, MetricsTextError):
            return None


def parse_progress_counters(
    text: str, names: tuple[str, ...] = PROGRESS_COUNTERS
) -> dict[str, float]:
    """The named sglang: samples, summed over label sets (the fullest for a share).

    Raises MetricsTextError when `text` is not Prometheus text."""
    samples = parse_metrics(text)
    values: dict[str, float] = {}
    for name in names:
        value = samples.largest(name) if name in _TAKE_MAX else samples.total(name)
        if value is not None:
            values[name] = value
    return values


def _reason(exc: FetchError) -> str:
    """The cause, and an error status's first bytes of body (sglang says why there)."""
    if exc.status is not None:
        return f"HTTP {exc.status} {exc.body[:200]!r}"
    return exc.cause
