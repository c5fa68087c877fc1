"""Preflight on this GPU-less machine, and each check on made-up inputs."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from resource import RLIM_INFINITY

import pytest
import yaml

import glm5svc.preflight.limits as rlimits
import glm5svc.preflight.topology as topology
from glm5svc.config import Config, config_from_mapping, example_config_path
from glm5svc.facts import HostFacts
from glm5svc.gpus import GpuFacts
from glm5svc.preflight.gpu import (
    check_compute_capability,
    check_gpu_count,
    check_uvm_device,
    check_uvm_hmm,
)
from glm5svc.preflight.limits import check_rlimits, rlimit_rows, unit_limits
from glm5svc.preflight.rows import FAIL, OK, UNKNOWN, WARN, CheckRow, PreflightContext
from glm5svc.preflight.run import default_checks, run_preflight
from glm5svc.preflight.stack import check_cuda_toolkit
from tests.preflight.test_topology import PCIE8_P2P_NS, PCIE8_TOPO

SM120_X8 = GpuFacts(8, (12, 0), "580.95.05", ["NVIDIA RTX PRO 6000 Blackwell"] * 8, "nvml")


def context(gpus=SM120_X8, mapping=None):
    config = config_from_mapping(mapping) if mapping else Config()
    return given(config, gpus)


def given(config, gpus) -> PreflightContext:
    facts = HostFacts.given(config, gpus, nvml_error="no NVIDIA driver: not found")
    return PreflightContext(config, facts)


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
    # The fails a machine without a GPU always has are marked and counted as such.
    driver = next(line for line in lines if "nvidia driver" in line)
    assert driver.endswith("[no GPU here]")
    assert "nvidia driver" in lines[-2] and "are what a machine without an NVIDIA GPU" in lines[-2]


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


H200_X1 = GpuFacts(1, (9, 0), "580.159.04", ["NVIDIA H200"], "nvml")


def test_uvm_hmm_is_a_failure_only_for_targets_that_need_it(tmp_path):
    param = tmp_path / "uvm_disable_hmm"
    param.write_text("N\n")
    sm120 = check_uvm_hmm(context(), param)[0]
    assert (sm120.status, sm120.scope) == (FAIL, "target sm120")
    sm90 = check_uvm_hmm(context(H200_X1, {"gpus": {"target": "sm90"}}), param)[0]
    assert sm90.status == WARN and "only target sm120 requires it" in sm90.detail
    assert (
        check_uvm_hmm(context(H200_X1, {"gpus": {"target": "sm90"}}), tmp_path / "no")[0].status
        == WARN
    )


def test_h200_with_an_h200_target_passes_compute_capability():
    row = check_compute_capability(context(H200_X1, {"gpus": {"target": "sm90"}}))[0]
    assert row.status == OK and "target sm90" in row.detail


def test_wrong_target_names_the_fitting_one():
    row = check_compute_capability(context(H200_X1))[0]
    assert row.status == FAIL and "gpus.target: sm90" in row.fix


def fake_cuda_home(tmp_path, release):
    home = tmp_path / f"cuda-{release}"
    (home / "bin").mkdir(parents=True)
    nvcc = home / "bin" / "nvcc"
    nvcc.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {release}, V{release}.1'\n")
    nvcc.chmod(0o755)
    return home


def test_cuda_toolkit_row_is_the_profiles(tmp_path):
    home = fake_cuda_home(tmp_path, "13.0")
    cu130 = {"server": {"profile": "cu130", "cuda_home": str(home)}}
    row = check_cuda_toolkit(context(mapping=cu130))[0]
    assert (row.status, row.scope) == (OK, "profile cu130")
    row = check_cuda_toolkit(context(mapping={"server": {"cuda_home": str(home)}}))[0]
    assert row.status == FAIL and "profile cu128 needs 12.8" in row.detail


def h200_machine(tmp_path):
    """The shipped H200 example on a made-up H200 machine: a tiny Llama directory, the CUDA
    13.0 toolkit at server.cuda_home, sglang 0.5.11 at PYTHONPATH (metadata only)."""
    model = tmp_path / "llama-tiny"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    site = tmp_path / "site"
    (site / "sglang").mkdir(parents=True)
    (site / "sglang-0.5.11.dist-info").mkdir()
    (site / "sglang-0.5.11.dist-info" / "METADATA").write_text("Name: sglang\nVersion: 0.5.11\n")
    data = yaml.safe_load(
        (example_config_path().parent / "examples/h200-llama-tiny.yaml").read_text()
    )
    data["model"]["path"] = str(model)
    data["server"].update(python=sys.executable, cuda_home=str(fake_cuda_home(tmp_path, "13.0")))
    data["server"]["env"]["PYTHONPATH"] = str(site)
    data["service"]["results_dir"] = str(tmp_path / "results")
    return config_from_mapping(data)


def read_on(config, gpus) -> PreflightContext:
    """The host's facts as serve reads them (the sglang at PYTHONPATH, config.json), on the
    made-up GPUs NVML would have shown."""
    facts = replace(HostFacts.read(config), gpus=gpus, nvml_error=None)
    return PreflightContext(config, facts)


def all_rows(ctx):
    rows = []
    for check in default_checks():
        try:
            rows += check(ctx)
        except Exception as exc:  # as run_preflight does: the check could not run here
            rows.append(CheckRow(check.__name__, UNKNOWN, repr(exc)))
    return {row.name: row for row in rows}


def test_preflight_on_an_h200_fails_only_on_what_is_wrong_there(tmp_path):
    config = h200_machine(tmp_path)
    rows = all_rows(read_on(config, H200_X1))
    failures = {name for name, row in rows.items() if row.status == FAIL}
    # This dev machine has no /dev/nvidia-uvm: a real failure wherever it is missing.
    assert failures <= {"/dev/nvidia-uvm"}, {n: rows[n].detail for n in failures}
    assert rows["compute capability"].status == OK
    assert rows["gpu count"].status == OK
    assert rows["cuda toolkit"].status == OK
    assert rows["sglang"].status == OK and "0.5.11" in rows["sglang"].detail
    assert rows["model quantization"].status == OK
    assert rows["model shards"].status == OK and "dummy" in rows["model shards"].detail
    autotune = rows["patch flashinfer-cutlass-autotune"]
    assert autotune.status == OK and "not needed here" in autotune.detail
    assert "no DSA attention" in rows["patch nsa-fp8-mha-prefix"].detail
    assert rows["uvm_disable_hmm"].status in (OK, WARN)
    # The same machine with the default (sm120) config fails on the sm120 rules.
    default = config_from_mapping({"model": {"path": str(config.model.path)}})
    strict = all_rows(read_on(default, H200_X1))
    assert strict["compute capability"].status == FAIL
    assert strict["model quantization"].status == FAIL
    assert strict["model shards"].status == FAIL


def test_rlimit_rows_say_whose_limits_they_are(monkeypatch):
    monkeypatch.delenv("INVOCATION_ID", raising=False)
    unit = (1048576, RLIM_INFINITY, "the running glm5.service, /proc/7/limits")
    monkeypatch.setattr(rlimits, "read_unit_limits", lambda: unit)
    nofile, memlock = check_rlimits(context())
    assert nofile.status == OK and "(the running glm5.service, /proc/7/limits)" in nofile.detail
    assert memlock.status == OK and memlock.detail.startswith("hard limit unlimited (the running")

    monkeypatch.setattr(rlimits, "read_unit_limits", lambda: None)
    nofile, _ = check_rlimits(context())
    assert "this shell's: glm5.service is not installed here" in nofile.detail

    monkeypatch.setenv("INVOCATION_ID", "0123")
    nofile, _ = check_rlimits(context())
    assert "(this process, run by systemd)" in nofile.detail


def test_unit_limits_are_what_the_running_unit_got(tmp_path):
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "limits").write_text(
        "Limit                     Soft Limit           Hard Limit           Units\n"
        "Max open files            20000                20000                files\n"
        "Max locked memory         8388608              8388608              bytes\n"
    )
    show = "LoadState=loaded\nMainPID={}\nLimitNOFILE=1048576\nLimitMEMLOCK=infinity\n"
    got = unit_limits(show.format(42), tmp_path)
    assert got == (20000, 8388608, "the running glm5.service, /proc/42/limits")
    rows = rlimit_rows(*got)
    assert [row.status for row in rows] == [WARN, WARN]
    assert "LimitNOFILE=1048576 in glm5.service" in rows[0].fix
    assert "lxc.prlimit.nofile" in rows[0].fix
    settings = unit_limits(show.format(0), tmp_path)
    assert settings == (
        1048576,
        RLIM_INFINITY,
        "glm5.service's settings (it is not running), from systemctl show",
    )
    assert unit_limits("LoadState=not-found\nMainPID=0\n", tmp_path) is None


def test_topology_row_covers_the_gpus_the_config_uses(monkeypatch):
    monkeypatch.setattr(topology, "read_topology", lambda: (PCIE8_TOPO, PCIE8_P2P_NS))
    row = topology.check_gpu_topology(context(mapping={"gpus": {"expected_count": 2}}))[0]
    assert row.detail.startswith("2 of 8 GPUs (those the service uses), 1 pairs")
