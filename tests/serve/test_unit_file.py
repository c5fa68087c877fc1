"""The shipped glm5.service: required settings, and `systemd-analyze verify`."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parents[2] / "glm5svc" / "data" / "glm5.service"


def parse_unit(text: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str
    parser.read_string(text)
    return parser


def seconds(value: str) -> float:
    units = {"s": 1, "min": 60, "h": 3600}
    for suffix, factor in sorted(units.items(), key=lambda item: -len(item[0])):
        if value.endswith(suffix):
            return float(value[: -len(suffix)]) * factor
    return float(value)


def test_unit_settings():
    unit = parse_unit(UNIT.read_text())
    # The glm5_service role installs the README there.
    assert unit["Unit"]["Documentation"] == "file:/usr/share/doc/glm5svc/README.md"
    role_tasks = (UNIT.parents[2] / "roles" / "glm5_service" / "tasks" / "unit.yml").read_text()
    assert "dest: /usr/share/doc/glm5svc/README.md" in role_tasks
    service = unit["Service"]
    assert service["Type"] == "notify" and service["NotifyAccess"] == "main"
    assert service["ExecStart"] == "/opt/glm5/venv/bin/glm5svc --config /etc/glm5/glm5.yaml serve"
    assert service["KillMode"] == "mixed"
    assert service["Restart"] == "on-failure"
    assert service["RestartPreventExitStatus"] == "78"
    assert service["LimitMEMLOCK"] == "infinity"
    assert int(service["LimitNOFILE"]) >= 65536
    from glm5svc.config import ServiceSection

    drain = ServiceSection().drain_timeout_s
    assert seconds(service["TimeoutStopSec"]) > drain
    assert seconds(service["WatchdogSec"]) >= 2 * ServiceSection().probe_timeout_s
    assert "nvidia-persistenced.service" in unit["Unit"]["After"]
    # systemd counts every start, not only failed ones: routine restarts (several an hour)
    # must not lock the service out, while a start that fails within a minute, restarted
    # every RestartSec, is stopped within the interval.
    interval, burst = (
        seconds(unit["Unit"]["StartLimitIntervalSec"]),
        int(unit["Unit"]["StartLimitBurst"]),
    )
    assert burst >= 8
    assert burst * (seconds(service["RestartSec"]) + 60) <= interval <= 3600
    assert "systemctl reset-failed glm5" in UNIT.read_text()


def test_systemd_analyze_verify(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    # verify insists that ExecStart's program exists: point it at this venv's glm5svc.
    program = Path(sys.executable).parent / "glm5svc"
    text = UNIT.read_text().replace("/opt/glm5/venv/bin/glm5svc", str(program))
    unit = tmp_path / "glm5.service"
    unit.write_text(text)
    result = subprocess.run(
        [analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60
    )
    problems = [line for line in result.stderr.splitlines() if "glm5.service" in line]
    assert result.returncode == 0 and not problems, result.stderr
