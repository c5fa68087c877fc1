"""Is glm5.service serving, ready for a measurement: its /status says ready and no
post-start benchmark is running (the night's own bench would share the engine with it)."""

from __future__ import annotations

import threading
import time

from glm5svc.config import Config, connect_host
from glm5svc.http_fetch import FetchError, fetch_json
from glm5svc.night import units
from glm5svc.records import RecordError, StatusDocument

# systemctl start returns at READY; after it, the post-start benchmark may still run
# (benchmark.post_start: a short ladder), and a unit that restarts after a failure takes
# RestartSec= plus a whole start.
SERVING_WAIT_S = 1800.0
POLL_S = 1.0


def status_url(config: Config) -> str:
    service = config.service
    return f"http://{connect_host(service.listen_host)}:{service.listen_port}/status"


def serving_now(config: Config) -> str | None:
    """None when it serves, ready for a measurement; else why not."""
    try:
        status = StatusDocument.from_dict(fetch_json(status_url(config), timeout_s=10))
    except (FetchError, RecordError) as exc:
        return f"{status_url(config)}: {exc}"
    if not status.ready:
        return f"not ready: {status.ready_reason or status.phase}"
    if status.benchmark_running:
        return "its post-start benchmark is running"
    return None


def running_sha256(config: Config) -> str | None:
    """The sha256 of the configuration file glm5.service started on (its /status), or None
    when it does not answer or does not say."""
    try:
        status = StatusDocument.from_dict(fetch_json(status_url(config), timeout_s=10))
    except (FetchError, RecordError):
        return None
    return status.launch_plan.config_sha256 if status.launch_plan else None


def wait_serving(
    config: Config, stop: threading.Event, wait_s: float = SERVING_WAIT_S
) -> str | None:
    """Wait until glm5.service serves (None) or give why not: not active, or not ready
    within `wait_s`, or the night was told to stop."""
    deadline = time.monotonic() + wait_s
    while True:
        if not units.is_active():
            return "glm5.service is not active (`systemctl status glm5`, `journalctl -u glm5`)"
        why = serving_now(config)
        if why is None or time.monotonic() > deadline or stop.is_set():
            return why
        time.sleep(POLL_S)
