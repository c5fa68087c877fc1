"""HTTP requests to the engine, the listener, the gateway and the fleet: one way, one error.

Every failure (no connection, a timeout, an HTTP error status, a body that is not what was
asked for) raises `FetchError`, whose message names the URL and the cause and never a
header: the API key travels only in `headers` (`bearer(key)`). An HTTP error keeps its
status and body (`FetchError.status`, `.body`), since some answers (the gateway's 503 with a
JSON reason, /readyz's 503) are answers.
"""

from __future__ import annotations

import http.client
import json
import socket
import urllib.error
import urllib.request
from typing import Any

BODY_SHOWN = 200  # bytes of an unexpected body quoted in an error


class FetchError(Exception):
    """A request that did not give what was asked for; `str()` is "URL: cause"."""

    def __init__(self, url: str, cause: str, status: int | None = None, body: bytes = b""):
        super().__init__(f"{url}: {cause}")
        self.url = url
        self.cause = cause
        self.status = status  # the HTTP status, when the server answered with an error
        self.body = body


def bearer(api_key: str | None) -> dict[str, str]:
    """The Authorization header for `api_key`, or none without a key."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def fetch_bytes(
    url: str,
    *,
    timeout_s: float,
    headers: dict[str, str] | None = None,
    method: str = "GET",
    data: bytes | None = None,
) -> tuple[int, bytes]:
    """(status, body) of a 2xx answer; anything else raises FetchError."""
    request = urllib.request.Request(url, data=data, headers=dict(headers or {}), method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        body = _read_error_body(exc)
        raise FetchError(url, f"HTTP {exc.code}", status=exc.code, body=body) from None
    # http.client.HTTPException (a bad status line, a reply cut short) is no OSError.
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as exc:
        raise FetchError(url, _cause(exc)) from exc


def fetch_text(url: str, *, timeout_s: float, headers: dict[str, str] | None = None) -> str:
    """GET url; the body as text (UTF-8, undecodable bytes replaced)."""
    _, body = fetch_bytes(url, timeout_s=timeout_s, headers=headers)
    return body.decode("utf-8", "replace")


def fetch_json(
    url: str,
    *,
    timeout_s: float,
    headers: dict[str, str] | None = None,
    method: str = "GET",
    body: Any = None,
) -> Any:
    """The JSON document url answers; `body`, when given, is sent as JSON."""
    send = dict(headers or {})
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        send.setdefault("Content-Type", "application/json")
    _, raw = fetch_bytes(url, timeout_s=timeout_s, headers=send, method=method, data=data)
    return decode_json(url, raw)


def post_json(
    url: str, body: Any, *, timeout_s: float, headers: dict[str, str] | None = None
) -> Any:
    """POST `body` as JSON; the JSON document of the answer."""
    return fetch_json(url, timeout_s=timeout_s, headers=headers, method="POST", body=body)


def decode_json(url: str, raw: bytes) -> Any:
    """`raw` as JSON, or FetchError naming url and what came instead."""
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise FetchError(url, f"not JSON ({exc}): {raw[:BODY_SHOWN]!r}") from None


def _read_error_body(exc: urllib.error.HTTPError) -> bytes:
    try:
        return exc.read()
    except (OSError, ValueError):
        return b""


def _cause(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.URLError) and isinstance(exc.reason, BaseException):
        exc = exc.reason
    if isinstance(exc, (TimeoutError, socket.timeout)) or "timed out" in str(exc):
        return "timed out"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    return f"{type(exc).__name__}: {exc}"
