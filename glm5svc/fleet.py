"""The fleet as one table: each replica's glm5svc /status and the gateway's view of it.

The gateway is smg (Shepherd Model Gateway, the SGLang gateway; roles/glm5_gateway). What is
read from it (smg 1.13.0): GET /readiness -> {"status", "healthy_workers", "total_workers"}
(503 when none is healthy), without a key; GET /workers -> {"workers": [{"url", "is_healthy",
"status", "load", ...}]}, which needs `Authorization: Bearer <key>` when smg has --api-key.
A replica is matched to its worker by the host of its status URL and the --port of the launch
plan in its /status.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from glm5svc.http_fetch import FetchError, bearer, fetch_json
from glm5svc.records import RecordError, StatusDocument


@dataclass
class Fetched:
    url: str
    document: Any = None
    http_status: int | None = None
    error: str | None = None


def fetch_answer(url: str, timeout: float, api_key: str | None = None) -> Fetched:
    """GET url as JSON; an HTTP error with a JSON body still counts as an answer."""
    try:
        return Fetched(url, fetch_json(url, timeout_s=timeout, headers=bearer(api_key)), 200)
    except FetchError as exc:
        if exc.status is None:
            return Fetched(url, error=exc.cause)
        try:
            document = json.loads(exc.body)
        except ValueError:
            document = None
        return Fetched(url, document, exc.status, f"HTTP {exc.status}")


@dataclass
class ReplicaRow:
    status_url: str
    reachable: bool
    ready: bool = False
    phase: str | None = None
    reason: str | None = None
    engine_url: str | None = None
    in_gateway: str = "-"  # healthy | unhealthy | not registered | ? (no gateway answer)
    load: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class FleetView:
    replicas: list[ReplicaRow]
    gateway_url: str | None
    gateway: dict[str, Any] = field(default_factory=dict)
    unmatched_workers: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ready_count(self) -> int:
        return sum(row.ready for row in self.replicas)

    def to_dict(self) -> dict[str, Any]:
        return {
            "replicas": [row.to_dict() for row in self.replicas],
            "gateway_url": self.gateway_url,
            "gateway": self.gateway,
            "unmatched_workers": self.unmatched_workers,
            "ready_replicas": self.ready_count,
        }


def engine_port(status: StatusDocument) -> int | None:
    """The engine's --port from the launch plan in a replica's /status."""
    value = status.launch_plan.flag_value("--port") if status.launch_plan else None
    return int(value) if value is not None and value.isdigit() else None


def replica_row(status_url: str, fetched: Fetched) -> ReplicaRow:
    if fetched.document is None or fetched.http_status != 200:
        return ReplicaRow(status_url, reachable=False, reason=fetched.error or "no /status")
    try:
        status = StatusDocument.from_dict(fetched.document)
    except RecordError as exc:
        return ReplicaRow(status_url, reachable=False, reason=f"not a glm5svc /status: {exc}")
    host = urlsplit(status_url).hostname
    port = engine_port(status)
    return ReplicaRow(
        status_url,
        reachable=True,
        ready=status.ready,
        phase=status.phase,
        reason=status.ready_reason,
        engine_url=_url(host, port) if host and port else None,
    )


def gateway_summary(readiness: Fetched, workers: Fetched) -> dict[str, Any]:
    summary: dict[str, Any] = {"reachable": readiness.document is not None}
    if isinstance(readiness.document, dict):
        summary.update(
            status=readiness.document.get("status"),
            healthy_workers=readiness.document.get("healthy_workers"),
            total_workers=readiness.document.get("total_workers"),
            reason=readiness.document.get("reason"),
        )
    else:
        summary["error"] = readiness.error
    if isinstance(workers.document, dict) and "workers" in workers.document:
        summary["workers"] = [
            {k: w.get(k) for k in ("url", "is_healthy", "status", "load")}
            for w in workers.document["workers"]
        ]
    else:
        summary["workers_error"] = workers.error or "no worker list"
    return summary


def join(rows: list[ReplicaRow], gateway: dict[str, Any]) -> list[dict[str, Any]]:
    """Mark each replica with its worker's state at the gateway; return workers no replica has."""
    workers = gateway.get("workers")
    if workers is None:
        for row in rows:
            row.in_gateway = "?" if gateway else "-"
        return []
    by_url = {_normal(w["url"]): w for w in workers if w.get("url")}
    for row in rows:
        worker = by_url.pop(_normal(row.engine_url), None) if row.engine_url else None
        _mark(row, worker)
    # A replica whose /status did not answer has no engine port: its worker is the one
    # left on its host, when there is exactly one.
    for row in rows:
        if row.engine_url is None:
            host = urlsplit(row.status_url).hostname
            same_host = [key for key in by_url if key.rsplit(":", 1)[0] == host]
            if len(same_host) == 1:
                worker = by_url.pop(same_host[0])
                row.engine_url = worker["url"]
                _mark(row, worker)
    return list(by_url.values())


def _mark(row: ReplicaRow, worker: dict[str, Any] | None) -> None:
    if worker is None:
        row.in_gateway = "not registered"
    else:
        row.in_gateway = "healthy" if worker.get("is_healthy") else "unhealthy"
        row.load = worker.get("load")


def read_fleet(
    replicas: list[str], gateway_url: str | None, timeout: float, api_key: str | None
) -> FleetView:
    rows = [replica_row(url, fetch_answer(url + "/status", timeout)) for url in replicas]
    gateway: dict[str, Any] = {}
    if gateway_url:
        gateway = gateway_summary(
            fetch_answer(gateway_url + "/readiness", timeout),
            fetch_answer(gateway_url + "/workers", timeout, api_key),
        )
    unmatched = join(rows, gateway)
    return FleetView(rows, gateway_url, gateway, unmatched)


def render(view: FleetView) -> str:
    header = ("replica (/status)", "ready", "phase", "engine", "gateway", "load", "reason")
    table = [header]
    for row in view.replicas:
        table.append(
            (
                row.status_url,
                "yes" if row.ready else ("no" if row.reachable else "unreachable"),
                row.phase or "-",
                row.engine_url or "-",
                row.in_gateway,
                "-" if row.load is None else str(row.load),
                row.reason or "",
            )
        )
    widths = [max(len(r[i]) for r in table) for i in range(len(header) - 1)]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)) + "  " + r[-1]
        for r in table
    ]
    lines.append(f"{view.ready_count} of {len(view.replicas)} replicas ready")
    if view.gateway_url:
        g = view.gateway
        if g.get("reachable"):
            lines.append(
                f"gateway {view.gateway_url}: {g.get('status')}, {g.get('healthy_workers')} of "
                f"{g.get('total_workers')} workers healthy"
                + (f" ({g['reason']})" if g.get("reason") else "")
            )
        else:
            lines.append(f"gateway {view.gateway_url}: unreachable ({g.get('error')})")
        if g.get("workers_error"):
            lines.append(
                f"  worker list: {g['workers_error']} (GET /workers needs the API key: "
                "server.api_key_file)"
            )
        for worker in view.unmatched_workers:
            state = "healthy" if worker.get("is_healthy") else "unhealthy"
            lines.append(f"  worker {worker.get('url')} ({state}) matches no listed replica")
    return "\n".join(lines)


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _normal(url: str | None) -> str:
    parts = urlsplit(url or "")
    return f"{parts.hostname}:{parts.port}"
