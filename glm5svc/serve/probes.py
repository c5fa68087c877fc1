"""HTTP probes of the SGLang server: health, one real generation, its progress counters."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from dataclasses import dataclass

from glm5svc.config import connect_host

GENERATION_CHECK_PROMPT = "The capital of France is"
_SAMPLE = re.compile(r"^(sglang:[a-zA-Z_:]+)(\{[^}]*\})?\s+([-+0-9.eEinfaN]+)\s*$")
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
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base_url + path, data=data)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if self.api_key:
            request.add_header("Authorization", f"Bearer {self.api_key}")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def health_generate(self, timeout: float) -> ProbeResult:
        """/health_generate: sglang runs a one-token generation and waits a second before
        looking at the answer (0.5.11; its /health is the same handler)."""
        return self._status_probe("/health_generate", timeout)

    def _status_probe(self, path: str, timeout: float) -> ProbeResult:
        try:
            status, body = self._request(path, timeout)
        except (OSError, ValueError) as exc:
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
        except (OSError, ValueError) as exc:
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
            status, raw = self._request("/metrics", timeout)
        except (OSError, ValueError):
            return None
        if status != 200:
            return None
        return parse_progress_counters(raw.decode("utf-8", "replace"), names)


def parse_progress_counters(
    text: str, names: tuple[str, ...] = PROGRESS_COUNTERS
) -> dict[str, float]:
    """The named sglang: samples, summed over label sets (the fullest for a share)."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if not match or match.group(1) not in names:
            continue
        name = match.group(1)
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        if name in _TAKE_MAX:
            values[name] = max(values.get(name, value), value)
        else:
            values[name] = values.get(name, 0.0) + value
    return values


def _reason(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.URLError):
        exc = exc.reason if isinstance(exc.reason, BaseException) else exc
    if isinstance(exc, TimeoutError) or "timed out" in str(exc):
        return "timed out"
    return f"{type(exc).__name__}: {exc}"
