"""systemd's notify protocol (sd_notify) and watchdog settings, as seen by the wrapper."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable

try:  # systemd-python; the PyPI package `systemd` has another API and no daemon.notify
    from systemd import daemon as _sd_daemon
except ImportError:  # pragma: no cover - exercised only where systemd-python is absent
    _sd_daemon = None

# Only the wrapper speaks to systemd: the server must not inherit these.
NOTIFY_ENV_VARS = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")


class Notifier:
    """Sends notify messages; a no-op without NOTIFY_SOCKET.

    A notify failure is never fatal: a missing or refusing socket, or a name too long
    for AF_UNIX, makes systemd-python's `daemon.notify` raise. The first failure is
    reported through `on_error` (once); the engine keeps being supervised either way.
    """

    def __init__(
        self,
        environ: dict[str, str] | None = None,
        on_error: Callable[[str], None] | None = None,
    ):
        env = os.environ if environ is None else environ
        self.socket_path = env.get("NOTIFY_SOCKET") or None
        self.watchdog_usec = _watchdog_usec(env)
        self.on_error = on_error
        self.failures = 0
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
            try:
                if _sd_daemon is not None:
                    sent = bool(_sd_daemon.notify(message))
                    error = None if sent else "daemon.notify returned False"
                else:
                    _send_datagram(self.socket_path, message)
                    sent, error = True, None
            except Exception as exc:  # noqa: BLE001 - any failure here must not end serve
                sent, error = False, f"{type(exc).__name__}: {exc}"
            if not sent:
                self._report(error)
            return sent

    def _report(self, error: str) -> None:
        self.failures += 1
        if self.failures == 1 and self.on_error is not None:
            self.on_error(
                f"cannot notify systemd at NOTIFY_SOCKET={self.socket_path!r}: {error}; "
                "supervising without notifications (reported once; under systemd "
                "Type=notify the start will time out)"
            )

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


def _send_datagram(path: str, message: str) -> None:
    address = "\0" + path[1:] if path.startswith("@") else path
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.sendto(message.encode(), address)


def child_environment(base: dict[str, str], plan_env: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in base.items() if k not in NOTIFY_ENV_VARS}
    env.update(plan_env)
    for name in NOTIFY_ENV_VARS:
        env.pop(name, None)
    return env
