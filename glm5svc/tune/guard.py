"""Safety on a serving machine: tune never takes a serving engine down unless told to,
drains it when told, and gives the machine back as it found it.

`--take-over` stops glm5.service with systemctl (its stop is serve's drain: in-flight
requests finish, and a gateway's health checks take the replica out of rotation),
and starts it again when the tune ends, however it ends: done, failed, Ctrl-C or
SIGTERM. The operator's configuration file is never written by a tune (trials have their
own files); `glm5svc tune apply` is the one step that changes it. While the tune runs, the
listener's port serves `glm5svc_tune_running 1` (glm5svc/serve/tune_signal.py), so the
alerts take the stop for the planned one it is.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field

from glm5svc.config import Config
from glm5svc.errors import Glm5Error
from glm5svc.port_owners import holders
from glm5svc.serve.tune_signal import TuneSignal

UNIT = "glm5.service"
SYSTEMCTL_TIMEOUT_S = 900.0  # a stop waits for the drain (service.drain_timeout_s)


class EngineBusy(Glm5Error):
    """The GPUs are serving: tune would take them."""

    exit_status = 75  # EX_TEMPFAIL: try again when told to take over


def unit_active(unit: str = UNIT) -> bool:
    if shutil.which("systemctl") is None:
        return False
    done = subprocess.run(
        ["systemctl", "is-active", "--quiet", unit], capture_output=True, check=False
    )
    return done.returncode == 0


def who_serves(config: Config, unit: str = UNIT) -> str | None:
    """What holds the engine's or the listener's port, or the unit if it is active."""
    if unit_active(unit):
        return f"{unit} is active"
    for label, port in (
        ("the engine port", config.server.port),
        ("the listener port", config.service.listen_port),
    ):
        found = holders(port)
        if found:
            who = ", ".join(f"pid {h.pid} ({h.command})" for h in found[:3])
            return f"{label} {port} is held by {who}"
    return None


@dataclass
class TakeOver:
    """Stops the unit for the tune (only if it was active) and starts it again after."""

    take_over: bool
    unit: str = UNIT
    stopped_unit: bool = False
    log: list[str] = field(default_factory=list)
    signal: TuneSignal | None = None

    def begin(self, config: Config) -> None:
        self._take(config)
        self.signal = TuneSignal.start(config.service.listen_host, config.service.listen_port)

    def _take(self, config: Config) -> None:
        serving = who_serves(config, self.unit)
        if serving is None:
            return
        # --take-over stops the unit only: hinting it for another process would send the
        # operator to an option that then refuses.
        if not unit_active(self.unit):
            raise EngineBusy(
                f"{serving}, and not by {self.unit}: tune cannot stop it and start it again "
                f"(--take-over stops {self.unit} only); stop that process first"
            )
        if not self.take_over:
            raise EngineBusy(
                f"the engine is serving ({serving}); tune needs its GPUs. Pass --take-over to "
                f"drain and stop {self.unit} for the tune (it is started again at the end), "
                "or stop it yourself"
            )
        self._systemctl("stop")
        self.stopped_unit = True
        self.log.append(f"stopped {self.unit} (drained) for the tune")

    def restore(self) -> None:
        """Start the unit again if this tune stopped it; never raises."""
        if self.signal is not None:
            self.signal.stop()  # the service's port again
            self.signal = None
        if not self.stopped_unit:
            return
        try:
            self._systemctl("start")
            self.log.append(f"started {self.unit} again with the original configuration")
        except Glm5Error as exc:
            self.log.append(f"could not start {self.unit} again: {exc}; run systemctl start")
        self.stopped_unit = False

    def _systemctl(self, verb: str) -> None:
        try:
            done = subprocess.run(
                ["systemctl", verb, self.unit],
                capture_output=True,
                text=True,
                timeout=SYSTEMCTL_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise Glm5Error(f"systemctl {verb} {self.unit}: {exc}") from None
        if done.returncode != 0:
            detail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["failed"]
            raise Glm5Error(f"systemctl {verb} {self.unit}: {detail[0]}")
