"""glm5.service as `glm5svc unit` renders it: required settings, paths, `systemd-analyze verify`."""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from glm5svc.cli import main
from glm5svc.config import ServiceSection
from glm5svc.errors import ConfigError
from glm5svc.hostfacts.limits import NOFILE
from glm5svc.unit_file import render_unit

REPO = Path(__file__).resolve().parents[2]


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
    unit = parse_unit(render_unit())
    # The glm5_service role installs the README there.
    assert unit["Unit"]["Documentation"] == "file:/usr/share/doc/glm5svc/README.md"
    role_tasks = (REPO / "roles" / "glm5_service" / "tasks" / "unit.yml").read_text()
    assert "dest: /usr/share/doc/glm5svc/README.md" in role_tasks
    service = unit["Service"]
    assert service["Type"] == "notify" and service["NotifyAccess"] == "main"
    assert service["ExecStart"] == "/opt/glm5/venv/bin/glm5svc --config /etc/glm5/glm5.yaml serve"
    assert service["KillMode"] == "mixed"
    assert service["Restart"] == "on-failure"
    assert service["RestartPreventExitStatus"] == "78"
    assert service["LimitMEMLOCK"] == "infinity"
    assert int(service["LimitNOFILE"]) == NOFILE

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
    assert "systemctl reset-failed glm5" in render_unit()


def test_systemd_analyze_verify(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    # verify insists that ExecStart's program exists: point it at this venv's glm5svc.
    program = Path(sys.executable).parent / "glm5svc"
    text = render_unit(program.parent.parent)
    unit = tmp_path / "glm5.service"
    unit.write_text(text)
    result = subprocess.run(
        [analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60
    )
    problems = [line for line in result.stderr.splitlines() if "glm5.service" in line]
    assert result.returncode == 0 and not problems, result.stderr


def test_unit_for_another_venv_and_config(tmp_path, capsys):
    text = render_unit(Path("/srv/glm5/venv"), Path("/srv/glm5/glm5.yaml"))
    service = parse_unit(text)["Service"]
    assert service["ExecStart"] == "/srv/glm5/venv/bin/glm5svc --config /srv/glm5/glm5.yaml serve"
    assert re.search(r"@[A-Z0-9_]+@", text) is None  # every placeholder filled
    assert main(["--config", "/srv/glm5/glm5.yaml", "unit", "--venv", "/srv/glm5/venv"]) == 0
    assert capsys.readouterr().out == text


@pytest.mark.parametrize(
    ("venv", "config", "named"),
    [("venv", "/etc/glm5/glm5.yaml", "--venv"), ("/opt/my venv", "/etc/g.yaml", "--venv"),
     ("/opt/glm5/venv", "/etc/glm5/50%.yaml", "--config")],
)  # fmt: skip
def test_paths_systemd_would_misread_are_refused(venv, config, named, capsys):
    with pytest.raises(ConfigError, match=named):
        render_unit(Path(venv), Path(config))
    assert main(["--config", config, "unit", "--venv", venv]) == 78
    assert named in capsys.readouterr().err


README_EXPOSURE = re.compile(r"exposure of (\d+\.\d) \(`systemd-analyze security`")


def test_the_unit_runs_sandboxed_as_its_own_user_with_an_exposure_of_at_most_5(tmp_path):
    """`systemd-analyze security` on the unit the role installs; the README states the
    figure it prints, and every sandboxing directive left out is written down."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    text = render_unit()
    unit = tmp_path / "glm5.service"
    unit.write_text(text)
    done = subprocess.run(
        [analyze, "security", "--offline=yes", "--no-pager", str(unit)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    found = re.search(r"Overall exposure level for glm5\.service: (\d+\.\d)", done.stdout)
    assert found, done.stdout[-2000:] + done.stderr[-2000:]
    exposure = float(found.group(1))
    assert exposure <= 5.0
    stated = README_EXPOSURE.search((REPO / "README.md").read_text())
    assert stated and float(stated.group(1)) == exposure
    service = parse_unit(text)["Service"]
    assert service["User"] == "glm5" and service["NoNewPrivileges"] == "yes"
    assert service["ProtectSystem"] == "strict" and service["CapabilityBoundingSet"] == ""
    for left_out in ("PrivateDevices", "MemoryDenyWriteExecute", "ProcSubset", "PrivateUsers"):
        assert f"# - {left_out}=" in text, left_out
    role = (REPO / "roles" / "glm5_service" / "tasks" / "user.yml").read_text()
    assert "ansible.builtin.user" in role and f"name: {service['User']}" in role
