"""Settings a running engine changes without a restart, and how to change them.

sglang 0.5.11 can lower its running-request cap while it serves: POST /set_internal_state
with {"server_args": {"pp_max_micro_batch_size": N}} (the scheduler admits N - running new
requests; N may be 1 up to the cap it started with). Its answer says `updated` per DP rank
even when the scheduler refused the value, so the value is read back from /server_info's
`internal_states` before anything is measured. The start-up cap still sizes the CUDA graphs
and the request-to-token table: a live cap measures the scheduler's admission limit on the
engine as started with the highest cap of the start (docs/tuning.md says what that means).

Everything else (graphs, backends, chunked prefill, memory fraction, radix cache) needs a
restart; the space's `restart: false` is accepted only for the knobs named here.
"""

from __future__ import annotations

from glm5svc.http_fetch import FetchError, fetch_json

# knob -> the server arg /set_internal_state changes for it
LIVE_SERVER_ARGS = {"tuning.max_running_requests": "pp_max_micro_batch_size"}
SET_TIMEOUT_S = 30.0
SHOWN = 120  # characters of an answer quoted in a message


class LiveSetError(Exception):
    """The engine did not take the value; the message names what it answered and the fix."""


def is_live_capable(knob: str) -> bool:
    return knob in LIVE_SERVER_ARGS


def set_live(base_url: str, headers: dict[str, str], knob: str, value: int) -> int:
    """Set `knob` to `value` on the running engine and return the value read back."""
    arg = LIVE_SERVER_ARGS[knob]
    root = base_url.rstrip("/")
    try:
        fetch_json(
            root + "/set_internal_state", timeout_s=SET_TIMEOUT_S, headers=headers,
            method="POST", body={"server_args": {arg: value}},
        )  # fmt: skip
        info = fetch_json(root + "/server_info", timeout_s=SET_TIMEOUT_S, headers=headers)
    except FetchError as exc:
        if exc.status in (404, 405):
            raise LiveSetError(
                f"{exc.url}: HTTP {exc.status}: this sglang cannot change {arg} while it "
                f"serves; use sglang 0.5.11 or newer, or mark {knob} `restart: true` in the "
                "space file (each value then costs an engine start)"
            ) from None
        body = exc.body.decode("utf-8", "replace").strip()[:SHOWN]
        answered = f" ({body!r}; the engine's log says why)" if body else ""
        raise LiveSetError(f"setting {knob} to {value} live failed: {exc}{answered}") from None
    read = read_back(info, arg)
    if read is None:
        raise LiveSetError(
            f"{root}/server_info {_unread(info, arg)}, so the live {knob} cannot be checked; "
            f"use sglang 0.5.11 or newer, or mark {knob} `restart: true`"
        )
    if read != value:
        raise LiveSetError(
            f"the engine kept {arg}={read} when asked for {value} (sglang accepts 1 up to the "
            f"cap it started with; its log says why): the trial's start cap must be at least "
            f"every live value"
        )
    return read


def read_back(info: object, arg: str) -> int | None:
    """The value every DP rank reports, or None when the ranks disagree or do not say."""
    states = info.get("internal_states") if isinstance(info, dict) else None
    if not isinstance(states, list) or not states:
        return None
    values = {s.get(arg) for s in states if isinstance(s, dict)}
    if len(values) != 1:
        return None
    (value,) = values
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _unread(info: object, arg: str) -> str:
    """What /server_info held instead of one whole number for `arg` (read_back's None)."""
    if not isinstance(info, dict):
        return f"answered JSON that is {type(info).__name__}, not an object"
    states = info.get("internal_states")
    if not isinstance(states, list) or not states:
        return "has no internal_states list"
    values = [s.get(arg) if isinstance(s, dict) else None for s in states]
    if all(v is None for v in values):
        return f"has no internal_states[].{arg}"
    if len({repr(v) for v in values}) > 1:
        shown = ", ".join(repr(v) for v in values[:8])
        return f"reports {arg} {shown} across its {len(values)} ranks (they disagree)"
    return f"reports {arg} {values[0]!r}, not a whole number"
