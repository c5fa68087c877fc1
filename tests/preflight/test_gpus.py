"""GPU facts and GPU holders through glm5svc.nvml, on testkit's fake pynvml."""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path

import pynvml
import pytest

from glm5svc.config import Config
from glm5svc.gpus import detect_gpus, read_nvml_facts
from glm5svc.nvml import NvmlUnavailable, PynvmlSource
from glm5svc.preflight.gpu import (
    check_compute_capability,
    check_driver,
    check_gpu_count,
    check_gpu_processes,
    list_gpu_processes,
)
from glm5svc.preflight.rows import FAIL, OK, UNKNOWN, WARN
from glm5svc.preflight.run import run_preflight
from testkit import fake_pynvml


def test_facts_from_nvml():
    module = fake_pynvml.make_module(2)
    facts = read_nvml_facts(PynvmlSource(module))
    assert (facts.count, facts.compute_capability, facts.source) == (2, (12, 0), "nvml")
    assert facts.driver_version == "580.159.04" and facts.note == ""
    assert facts.names == ["NVIDIA RTX PRO 6000 Blackwell Server Edition"] * 2
    assert module.inits == module.shutdowns == 1


def test_mixed_capabilities_take_the_lowest_and_say_so():
    module = fake_pynvml.make_module(2)
    module.devices[1].capability = (9, 0)
    facts = read_nvml_facts(PynvmlSource(module))
    assert facts.compute_capability == (9, 0)
    assert "mixed compute capabilities" in facts.note


def test_no_driver_is_nvml_unavailable_and_the_plan_falls_back_to_config(monkeypatch):
    module = fake_pynvml.make_module(1, init_error=pynvml.NVMLError_DriverNotLoaded())
    with pytest.raises(NvmlUnavailable, match="no NVIDIA driver"):
        read_nvml_facts(PynvmlSource(module))
    monkeypatch.setitem(sys.modules, "pynvml", module)
    facts = detect_gpus(Config())
    assert facts.source == "config" and facts.count == 8
    assert "no NVIDIA driver" in facts.note


def test_an_unreadable_capability_is_nvml_unavailable_and_nvml_is_shut_down():
    module = fake_pynvml.make_module(1)
    module.devices[0].unsupported.add("capability")
    with pytest.raises(NvmlUnavailable, match="compute capability"):
        read_nvml_facts(PynvmlSource(module))
    assert module.inits == module.shutdowns == 1


def test_gpu_holders_are_listed_with_their_memory():
    module = fake_pynvml.make_module(2)
    module.devices[1].mem_used = 3 * 2**30
    assert list_gpu_processes(PynvmlSource(module)) == [(0, 4242, 10240), (1, 4242, 3072)]


def test_preflight_gpu_rows_on_the_fake(monkeypatch):
    module = fake_pynvml.make_module(8)
    monkeypatch.setitem(sys.modules, "pynvml", module)
    report = run_preflight(
        Config(),
        checks=[check_driver, check_gpu_count, check_compute_capability, check_gpu_processes],
    )
    rows = {row.name: row for row in report.rows}
    assert rows["nvidia driver"].status == OK and "580.159.04" in rows["nvidia driver"].detail
    assert rows["gpu count"].status == OK and "8 visible" in rows["gpu count"].detail
    assert rows["compute capability"].status == OK
    assert rows["gpu processes"].status == WARN and "pid 4242" in rows["gpu processes"].detail
    assert not report.has_failures
    assert module.inits == module.shutdowns


def test_gpu_holders_warn_with_the_memory_per_gpu_their_commands_and_the_consequence(
    monkeypatch,
):
    module = fake_pynvml.make_module(2)
    module.devices[1].mem_used = 3 * 2**30
    me, unseen = os.getpid(), 99_999_999  # above any pid_max: no /proc entry
    module.nvmlDeviceGetComputeRunningProcesses = lambda d: [
        types.SimpleNamespace(pid=me, usedGpuMemory=d.mem_used),
        types.SimpleNamespace(pid=unseen, usedGpuMemory=2**30 if d.index == 0 else None),
    ]
    monkeypatch.setitem(sys.modules, "pynvml", module)
    report = run_preflight(Config(), checks=[check_driver, check_gpu_processes])
    row = {row.name: row for row in report.rows}["gpu processes"]
    assert row.status == WARN and not report.has_failures
    assert "GPU 0 11264 MiB, GPU 1 3072 MiB" in row.detail
    # This process's own command line (pytest, or an xdist worker's `python -c ...`).
    own_command = Path(f"/proc/{me}/cmdline").read_bytes().split(b"\0")[0].decode()
    assert f"pid {me} `" in row.detail and Path(own_command).name in row.detail
    assert f"pid {unseen} (command not visible here) on GPU 0, 1" in row.detail
    assert "a second engine sizes its KV cache from the memory left: fewer KV tokens" in row.detail
    assert "kill the listed PIDs" in row.fix


def test_preflight_without_a_driver_reports_why(monkeypatch):
    module = fake_pynvml.make_module(1, init_error=pynvml.NVMLError_LibraryNotFound())
    monkeypatch.setitem(sys.modules, "pynvml", module)
    report = run_preflight(Config(), checks=[check_driver, check_gpu_processes])
    rows = {row.name: row for row in report.rows}
    assert rows["nvidia driver"].status == FAIL
    assert "libnvidia-ml.so.1" in rows["nvidia driver"].detail
    assert rows["gpu processes"].status == UNKNOWN
