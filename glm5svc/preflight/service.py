"""Preflight rows about the service itself: ports free, engine not open, its last run.

A port already taken makes the engine die with "address already in use" after minutes
of loading (or, worse, another server's answers look like ours); an engine reachable
beyond loopback without an API key serves anyone. `glm5svc serve` records each run
(glm5svc.records LastRun, in results_dir); the KV pool that run got is shown here, as a
reference for the next start.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from glm5svc.config import exposure_problem, exposure_warning
from glm5svc.port_owners import holders, port_listened
from glm5svc.preflight.rows import FAIL, OK, WARN, CheckRow, PreflightContext
from glm5svc.records import LAST_RUN_FILE, LastRun, RecordError


def check_ports(ctx: PreflightContext) -> list[CheckRow]:
    config = ctx.config
    wanted = (
        ("engine port", config.server.port, "server.port"),
        ("health listener port", config.service.listen_port, "service.listen_port"),
    )
    return [_port_row(name, port, key) for name, port, key in wanted]


def _port_row(name: str, port: int, key: str) -> CheckRow:
    if not port_listened(port):
        return CheckRow(name, OK, f"port {port} is free")
    found = holders(port)
    who = (
        ", ".join(f"pid {h.pid} ({h.command})" for h in found[:3])
        if found
        else "a process this user cannot see (another user's; run as root to name it)"
    )
    return CheckRow(
        name,
        FAIL,
        f"port {port} is already in use by {who}",
        "stop it (a stale engine: `systemctl stop glm5`, then `kill` the pid; see "
        f"`ss -ltnp 'sport = :{port}'`), or choose another {key}",
    )


def check_exposure(ctx: PreflightContext) -> list[CheckRow]:
    problem = exposure_problem(ctx.config)
    if problem:
        return [CheckRow("engine exposure", FAIL, problem, "set server.api_key_file")]
    if ctx.facts.key_error is not None:
        return [
            CheckRow(
                "engine exposure",
                FAIL,
                ctx.facts.key_error,
                "a readable file with the key, not readable by others (chmod 600)",
            )
        ]
    warning = exposure_warning(ctx.config)
    if warning:
        return [CheckRow("engine exposure", WARN, warning, "set server.api_key_file")]
    host = ctx.config.server.host
    how = "an API key is required" if ctx.config.server.api_key_file else "loopback only"
    return [CheckRow("engine exposure", OK, f"listens on {host}: {how}")]


def check_last_run(ctx: PreflightContext) -> list[CheckRow]:
    """One row when the last run recorded its KV pool, a warning when its record is not
    one; none otherwise."""
    try:
        record = LastRun.read(ctx.config.service.results_dir)
    except RecordError as exc:
        return [CheckRow("last run's record", WARN, str(exc))]
    if record is None or record.kv_pool_tokens is None:
        return []
    ended = _moment(record.ended_at)
    when = ended.strftime(" ended %Y-%m-%d %H:%M UTC") if ended else ""
    return [
        CheckRow(
            "last run's KV pool",
            OK,
            f"{record.kv_pool_tokens} tokens (exit status {record.exit_status}{when}; "
            f"{Path(ctx.config.service.results_dir) / LAST_RUN_FILE})",
        )
    ]


def _moment(value) -> datetime | None:
    """A recorded time: ISO 8601 (glm5svc.json_output), or unix seconds (older records)."""
    try:
        if isinstance(value, str):
            return datetime.fromisoformat(value).astimezone(UTC)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return datetime.fromtimestamp(value, UTC)
    except (ValueError, OverflowError, OSError):
        pass
    return None
