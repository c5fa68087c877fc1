"""Preflight rows about the service's own network surface: ports free, engine not open.

A port already taken makes the engine die with "address already in use" after minutes
of loading (or, worse, another server's answers look like ours); an engine reachable
beyond loopback without an API key serves anyone.
"""

from __future__ import annotations

from glm5svc.checks import FAIL, OK, WARN, CheckRow, PreflightContext
from glm5svc.config import exposure_warning
from glm5svc.port_owners import holders, port_listened


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
    warning = exposure_warning(ctx.config)
    if warning:
        return [CheckRow("engine exposure", WARN, warning, "set server.api_key_file")]
    host = ctx.config.server.host
    how = "an API key is required" if ctx.config.server.api_key_file else "loopback only"
    return [CheckRow("engine exposure", OK, f"listens on {host}: {how}")]
