"""systemd's notify protocol (sd_notify) and watchdog settings, as seen by the wrapper."""

from __future__ import annotations

import os
import socket
import threading

try:  # systemd-python; the PyPI package `systemd` has another API and no daemon.notify
    from systemd import daemon as _sd_daemon
except ImportError:  # pragma: no cover - exercised only where systemd-python is absent
    _sd_daemon = None

# Only the wrapper speaks to systemd: the server must not inherit these.
NOTIFY_ENV_VARS = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")


class Notifier:
    """Sends notify messages; a no-op without NOTIFY_SOCKET."""

    def __init__(self, environ: dict[str, str] | None = None):
        env = os.environ if environ is None else environ
        self.socket_path = env.get("NOTIFY_SOCKET") or None
        self.watchdog_usec = _watchdog_usec(env)
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.socket_path is not None

    @property
    def watchdog_interval_s(self) -> float | None:
        """Ping at half of WATCHDOG_USEC, as sd_watchdog_enabled(3) advises."""
        return self.watchdog_usec / 2e6 if self.watchdog_usec else None

    def send(self, *assignments: str) -> bool:
        if not self.enabled:
            return False
        message = "\n".join(assignments)
        with self._lock:
            if _sd_daemon is not None:
                return bool(_sd_daemon.notify(message))
            return _send_datagram(self.socket_path, message)

    def status(self, text: str) -> bool:
        return self.send(f"STATUS={_one_line(text)}")

    def ready(self, text: str) -> bool:
        return self.send("READY=1", f"STATUS={_one_line(text)}")

    def extend_timeout(self, seconds: float, text: str | None = None) -> bool:
        parts = [f"EXTEND_TIMEOUT_USEC={int(seconds * 1e6)}"]
        if text:
            parts.append(f"STATUS={_one_line(text)}")
        return self.send(*parts)

    def watchdog(self) -> bool:
        return self.send("WATCHDOG=1")

    def stopping(self, text: str) -> bool:
        return self.send("STOPPING=1", f"STATUS={_one_line(text)}")


def _watchdog_usec(env) -> int | None:
    value = env.get("WATCHDOG_USEC")
    pid = env.get("WATCHDOG_PID")
    if not value or (pid and pid != str(os.getpid())):
        return None
    try:
        usec = int(value)
    except ValueError:
        return None
    return usec if usec > 0 else None


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _send_datagram(path: str, message: str) -> bool:
    address = "\0" + path[1:] if path.startswith("@") else path
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        try:
            sock.sendto(message.encode(), address)
        except OSError:
            return False
    return True


def child_environment(base: dict[str, str], plan_env: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in base.items() if k not in NOTIFY_ENV_VARS}
    env.update(plan_env)
    for name in NOTIFY_ENV_VARS:
        env.pop(name, None)
    return env
