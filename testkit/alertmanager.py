"""A real Alertmanager (Debian's `prometheus-alertmanager`) on loopback, and the webhook it
notifies: what tests/monitoring points a real Prometheus at, to see an alert reach someone.

Its own config, data directory and loopback port (never the packaged daemon's 9093 or
/var/lib/prometheus), no cluster port, and short group waits so a notification follows a
firing alert within a second or two. Every alert goes to the one webhook, the Watchdog too.
"""

from __future__ import annotations

import json
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml

from testkit.engine import free_port, stop_process
from testkit.prometheus import binary, start_ready


class WebhookReceiver:
    """An HTTP server that keeps every notification Alertmanager posts (its JSON body)."""

    def __init__(self):
        self.notifications: list[dict] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format, *args):  # noqa: A002 - stdlib signature
                pass

            def do_POST(self):  # noqa: N802 - stdlib name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver.lock:
                    receiver.notifications.append(json.loads(body))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/alerts"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def alerts(self, name: str, status: str = "firing") -> list[dict]:
        """Every alert named `name` with `status` the notifications carried so far."""
        with self.lock:
            found = list(self.notifications)
        return [
            alert
            for notification in found
            for alert in notification["alerts"]
            if alert["labels"]["alertname"] == name and alert["status"] == status
        ]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Alertmanager:
    """`prometheus-alertmanager` sending every alert to `webhook_url` at once."""

    def __init__(self, workdir: Path, webhook_url: str):
        self.workdir = workdir
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.config = workdir / "alertmanager.yml"
        self.config.write_text(
            yaml.safe_dump(
                {
                    "route": {
                        "receiver": "webhook",
                        "group_by": ["alertname", "instance"],
                        "group_wait": "1s",
                        "group_interval": "1s",
                        "repeat_interval": "1h",
                    },
                    "receivers": [{"name": "webhook", "webhook_configs": [{"url": webhook_url}]}],
                },
                sort_keys=False,
            )
        )
        self.proc: subprocess.Popen | None = None

    def start(self) -> Alertmanager:
        check = subprocess.run(
            [binary("amtool"), "check-config", str(self.config)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        if check.returncode != 0:
            raise RuntimeError(f"amtool check-config: {check.stdout}{check.stderr}")
        self.proc = start_ready(
            [
                binary("prometheus-alertmanager"),
                f"--config.file={self.config}",
                f"--storage.path={self.workdir / 'alertmanager-data'}",
                f"--web.listen-address={self.address}",
                "--cluster.listen-address=",
                "--log.level=warn",
            ],
            self.workdir / "alertmanager.log",
            f"http://{self.address}",
        )
        return self

    def stop(self) -> None:
        stop_process(self.proc, 10)
