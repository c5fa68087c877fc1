"""Preflight on this GPU-less machine, and each check on made-up inputs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from glm5svc.checks import FAIL, OK, UNKNOWN, WARN, PreflightContext
from glm5svc.config import Config, config_from_mapping
from glm5svc.gpus import GpuFacts
from glm5svc.preflight import (
    check_compute_capability,
    check_gpu_count,
    check_uvm_device,
    check_uvm_hmm,
    run_preflight,
)

SM120_X8 = GpuFacts(8, (12, 0), "580.95.05", ["NVIDIA RTX PRO 6000 Blackwell"] * 8, "nvml")


def context(gpus=SM120_X8, mapping=None):
    config = config_from_mapping(mapping) if mapping else Config()
    return PreflightContext(config, gpus, None if gpus else "no NVIDIA driver: not found")


def test_preflight_without_gpu_is_clear_and_fails(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "glm5svc", "--config", "/dev/null", "preflight"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert any(line.startswith("FAIL") and "nvidia driver" in line for line in lines)
    assert "fix:" in result.stdout
    assert lines[-1].startswith("preflight FAILED")


def test_preflight_json_lists_every_check():
    result = subprocess.run(
        [sys.executable, "-m", "glm5svc", "--config", "/dev/null", "preflight", "--json"],
        capture_output=True,
        text=True,
    )
    report = json.loads(result.stdout)
    names = {check["name"] for check in report["checks"]}
    assert {"nvidia driver", "gpu count", "uvm_disable_hmm", "cuda toolkit"} <= names
    assert report["ok"] is False


def test_a_broken_check_does_not_hide_the_others():
    def explode(ctx):
        raise RuntimeError("boom")

    report = run_preflight(Config(), checks=[explode, check_uvm_device])
    assert [row.status for row in report.rows][0] == UNKNOWN
    assert len(report.rows) == 2


@pytest.mark.parametrize(("value", "status"), [("Y\n", OK), ("N\n", FAIL), ("1", OK), ("0", FAIL)])
def test_uvm_hmm_parameter(tmp_path, value, status):
    param = tmp_path / "uvm_disable_hmm"
    param.write_text(value)
    assert check_uvm_hmm(context(), param)[0].status == status


def test_uvm_module_not_loaded(tmp_path):
    row = check_uvm_hmm(context(), tmp_path / "absent")[0]
    assert row.status == FAIL and "not loaded" in row.detail and "modprobe.d" in row.fix


def test_h200_is_not_the_sm120_target():
    h200 = GpuFacts(1, (9, 0), "580.159.04", ["NVIDIA H200"], "nvml")
    row = check_compute_capability(context(h200))[0]
    assert row.status == FAIL
    assert "SM90" in row.detail and "SM120" in row.detail


@pytest.mark.parametrize(
    ("seen", "mapping", "status"),
    [
        (8, None, OK),
        (4, None, FAIL),
        (8, {"gpus": {"expected_count": 4}}, WARN),
        (4, {"gpus": {"expected_count": 2, "visible_devices": [3, 4]}}, FAIL),
    ],
)
def test_gpu_count(seen, mapping, status):
    gpus = GpuFacts(seen, (12, 0), "580", [], "nvml")
    assert check_gpu_count(context(gpus, mapping))[0].status == status
