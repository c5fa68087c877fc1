"""The systemd actions of a night, in one place: is a unit active, start, stop, restart.

Through `systemctl` on PATH, as `glm5svc tune --take-over` and `tune apply` do: one
interface for the three of them, which the tests stand in for with a service manager of
their own (testkit/systemctl_stand_in.py) rather than systemd as PID 1. `start` and
`restart` of glm5.service return once it is up (Type=notify: after READY=1) or failed.
"""

from __future__ import annotations

import shutil
import subprocess

from glm5svc.errors import Glm5Error

SERVICE_UNIT = "glm5.service"
NIGHT_UNIT = "glm5-tune.service"
# A start of glm5.service loads the weights (many minutes for GLM-5; the unit's
# TimeoutStartSec= is 20 min) and a stop drains (TimeoutStopSec= 180 s).
SYSTEMCTL_TIMEOUT_S = 1500.0


class UnitError(Glm5Error):
    """systemctl could not do what the night asked."""


def systemctl(*args: str, timeout_s: float = SYSTEMCTL_TIMEOUT_S) -> subprocess.CompletedProcess:
    if shutil.which("systemctl") is None:
        raise UnitError("systemctl is not on PATH: the night runs on the box, under systemd")
    try:
        return subprocess.run(
            ["systemctl", *args], capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        raise UnitError(f"systemctl {' '.join(args)}: no answer in {timeout_s:.0f} s") from None


def is_active(unit: str = SERVICE_UNIT) -> bool:
    return systemctl("is-active", "--quiet", unit, timeout_s=60).returncode == 0


def act(verb: str, unit: str = SERVICE_UNIT, *options: str) -> None:
    """systemctl VERB UNIT; UnitError with systemctl's last line when it fails."""
    done = systemctl(verb, *options, unit)
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["failed"]
        raise UnitError(f"systemctl {verb} {unit}: {detail[0]}")


def ensure_started(unit: str = SERVICE_UNIT) -> bool:
    """Start the unit unless it is active; True when this call started it."""
    if is_active(unit):
        return False
    systemctl("reset-failed", unit, timeout_s=60)  # a unit at its start limit starts again
    act("start", unit)
    return True
