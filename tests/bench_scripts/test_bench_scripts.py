"""Every script under bench/ runs in its short mode and prints its figures, so none rots.

The GPU scripts run on testkit's fake pynvml (testkit.with_fake_nvml): their own code paths,
with figures that mean nothing. bench/overhead.py runs the real bench_serving (testkit's
bench venv) against the test engine, one small round.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from bench import tune_recorded
from bench.phases import run_phases
from testkit.script_run import run_script

pytestmark = pytest.mark.long  # minutes of engines and bench_serving: scheduled first

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"
LIBRARIES = {"__init__.py", "phases.py"}  # imported by the scripts, not run
FAKE_NVML = [sys.executable, "-m", "testkit.with_fake_nvml", "2"]
SHORT_RUN_TESTS = {
    "gateway.py": "test_gateway_short",
    "lab_cycles.py": "test_lab_cycles_short",
    "multi_gpu.py": "test_multi_gpu_short",
    "multi_gpu_device.sh": "test_multi_gpu_device_short",
    "night_verdict.py": "test_night_verdict_short",
    "overhead.py": "test_overhead_short",
    "reliability.py": "test_reliability_short",
    "telemetry.py": "test_telemetry_short",
    "tune_fleet.py": "test_tune_fleet_short",
    "tune_plan.py": "test_tune_plan_short",
    "tune_power.py": "test_tune_power_short",
    "tune_recorded.py": "test_tune_recorded_short",
    "tune_search.py": "test_tune_search_short",
}


def run(argv: list[str], timeout: float, **env: str) -> subprocess.CompletedProcess:
    return run_script(
        argv, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO), **env}, timeout=timeout
    )


def test_every_bench_script_has_a_short_run():
    scripts = {p.name for p in BENCH.iterdir() if p.suffix in (".py", ".sh")} - LIBRARIES
    assert scripts == set(SHORT_RUN_TESTS), "a new bench/ script needs its short run here"
    assert all(name in globals() for name in SHORT_RUN_TESTS.values())


def test_telemetry_short(tmp_path):
    out = tmp_path / "telemetry.json"
    done = run([*FAKE_NVML, "bench/telemetry.py", "--short", "--out", str(out)], 120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "GPU 1 whole_sample   median" in done.stdout
    assert "running sampler, idle GPUs, 32-bit counters (period 1.0 s)" in done.stdout
    figures = json.loads(out.read_text())
    cpu_phases = ("sampler_cpu", "sampler_cpu_counters", "sampler_cpu_slow_loop_only")
    assert {"per_call_cost_gpu0", "sampler_cost", "pcie_read_schedule", *cpu_phases} <= set(figures)
    assert not any("error" in figures[name] for name in ("sampler_cost", *cpu_phases))
    # The fake GPUs are idle: the counters are read at the quiet period (54.5 ms at PCIe 5
    # x16), once a second with the counter reads pushed to 30 s.
    quiet = figures["pcie_read_schedule"]["quiet_period_s"]
    assert figures["sampler_cpu_counters"]["counter_reads"][0]["longest_period_s"] == quiet
    assert figures["sampler_cpu_slow_loop_only"]["counter_reads"][0]["shortest_period_s"] == 30


def test_multi_gpu_short(tmp_path):
    out = tmp_path / "multi-gpu.json"
    done = run([*FAKE_NVML, "bench/multi_gpu.py", "--short", "--out", str(out)], 120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "whole sample, 2 GPU(s): median" in done.stdout
    assert "GPU 1 NVLink: 0 active links" in done.stdout
    figures = json.loads(out.read_text())
    assert figures["sample_cost"]["gpu_count"] == 2
    assert "allreduce_p2p" not in figures


def test_multi_gpu_device_short(tmp_path):
    """The device script end to end: a fake nvidia-smi, Python on the fake NVML."""
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "nvidia-smi").write_text('#!/bin/sh\necho "fake nvidia-smi $*"\n')
    (tools / "python").write_text(f'#!/bin/sh\nexec {" ".join(FAKE_NVML)} "$@"\n')
    for tool in tools.iterdir():
        tool.chmod(0o755)
    out = tmp_path / "out"
    done = run(
        ["bash", "bench/multi_gpu_device.sh", str(out)],
        300,
        SHORT="1",
        PYTHON=str(tools / "python"),
        PATH=f"{tools}{os.pathsep}{os.environ['PATH']}",
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "done:" in done.stdout
    with tarfile.open(out / "raw.tgz") as archive:
        rcs = archive.extractfile("raw/rc.txt").read().decode()
        preflight = archive.extractfile("raw/preflight-2gpu.txt").read().decode()
    status = dict(line.split() for line in rcs.splitlines())
    assert len(status) == 14
    assert status["telemetry-bench"] == status["multi-gpu"] == status["topo-m"] == "0"
    assert "nvidia driver" in preflight and "driver 580.159.04" in preflight
    assert json.loads((out / "multi-gpu.json").read_text())["sample_cost"]["gpu_count"] == 2


def test_lab_cycles_short(tmp_path):
    """Its no-root mode: the phase table of a recorded `scripts/lab up` log."""
    log = tmp_path / "lab-up.log"
    steps = [("set-up", 0), ("root filesystems", 12), ("boot", 40), ("site.yml", 100),
             ("check run", 300), ("bench", 350), ("done", 400)]  # fmt: skip
    log.write_text("".join(f"== [{phase}] step ({at}s)\nother output\n" for phase, at in steps))
    done = run([sys.executable, "bench/lab_cycles.py", "--parse", str(log)], 60)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    header, row = done.stdout.splitlines()[:2]
    assert "root filesystems" in header and "site.yml" in header
    assert row.split()[:4] == ["lab-up.log", "ok", "12s", "28s"] and "6m40s" in row


def test_tune_plan_short():
    """The plan `tune run --plan` prints, for GLM-5 on the target and the H200 testbed."""
    done = run([sys.executable, "bench/tune_plan.py", "--short"], 60)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    glm5, h200 = done.stdout.split("== the H200 testbed")
    assert glm5.startswith("== GLM-5-NVFP4, 8x RTX PRO 6000, one night")
    for section in (glm5, h200):
        assert "plan: a start is to READY" in section and "searched: " in section
    # The small-effect space on a cold H200 in 500 s: the restart knob's starts and the
    # confirmation do not fit beside the cap (what the device run found: one start).
    assert "searched: tuning.max_running_requests;" in h200
    assert "tuning.mem_fraction_static" in h200.split("dropped")[1]


def test_tune_search_short(tmp_path):
    out = tmp_path / "search.json"
    done = run([sys.executable, "bench/tune_search.py", "--short", "--out", str(out)], 300)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert figures["optimum"]["tuning.cuda_graph"] is True
    rows = figures["rows"]
    assert [r["start_sigma"] for r in rows] == [0.01, 0.01, 0.03, 0.03, 0.067, 0.067]
    assert [r["max_starts"] for r in rows[:2]] == [None, 12]
    assert rows[1]["mean_starts"] <= 12
    # Graphs double the throughput: no noise level leaves the search below its start.
    assert all(r["worse_than_start"] == 0 and r["mean_starts"] >= 3 for r in rows)
    assert "the search ends on the optimum" in done.stdout


def test_tune_power_short(tmp_path):
    """bench/tune_power.py --short at quiet held-out spreads (3 % windows, starts 5.8 %, the
    H100's measured start spread as the prior): the rates it prints and writes."""
    out = tmp_path / "power.json"
    done = run([sys.executable, "bench/tune_power.py", "--short", "--window-spread", "0.03",
                "--start-spread", "0.058", "--start-spread-prior", "0.06", "--out", str(out)],
               300)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    figures = json.loads(out.read_text())
    null, higher, lower = figures["rows"]
    assert null["measure"] == "false promotion" and null["share"]["hits"] == 0
    assert higher["share"]["rate"] >= 0.75 and lower["share"]["rate"] >= 0.75
    assert figures["night_starts"] >= 2 and [r["effect"] for r in figures["restart"]] == [0.5]
    assert "the smallest restart effect a night finds half the time" in done.stdout


@pytest.fixture(scope="module")
def recorded_tunes(tmp_path_factory) -> tuple[dict, str]:
    """bench/tune_recorded.py --short: its figures and what it printed."""
    out = tmp_path_factory.mktemp("recorded") / "recorded.json"
    done = run([sys.executable, "bench/tune_recorded.py", "--short", "--out", str(out)], 300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(out.read_text()), done.stdout


def test_tune_recorded_short(recorded_tunes):
    """The real Search on the H200's recorded windows, at the tune's window (or the longest
    the recording represents, where that is shorter): with no effect anywhere it writes a
    change in at most 5 % of tunes. The seeds are few, so the rate fails only where it is
    above the target beyond what they can tell (the exact binomial bound at 99 %,
    one-sided)."""
    figures, printed = recorded_tunes
    default = tune_recorded.tune_window()[0]
    assert figures["default_window_s"] == default
    assert figures["window_s"] == min(default, figures["longest_represented_s"])
    assert f"window {figures['window_s']:g} s" in printed
    null, effect = figures["rows"]
    for row in (null, effect):
        assert len(row["tunes"]) == figures["seeds"] == tune_recorded.SHORT_SEEDS
        assert row["mean_starts"] >= 2  # the start and the null knob's
    promoted = null["false_promotion"]
    low, _ = tune_recorded.clopper_pearson(promoted["hits"], promoted["n"], 0.98)
    assert low <= tune_recorded.FALSE_PROMOTION_TARGET, (promoted, printed)


def test_tune_recorded_power(recorded_tunes):
    """A +10 % live cap is written in at least 80 % of tunes (failing only where the rate is
    below the target beyond what the seeds can tell, as above)."""
    figures, printed = recorded_tunes
    power = figures["rows"][1]["power"]
    _, high = tune_recorded.clopper_pearson(power["hits"], power["n"], 0.98)
    assert high >= tune_recorded.POWER_TARGET, (power, printed)


def test_night_verdict_short(tmp_path):
    """The real compare_mornings on simulated nights: at every spread it keeps a 10 %
    regression in at most 20 % of nights (the safe side); where its interval holds both
    rates, it rolls back an unchanged engine in at most 5 % and keeps a +10 % gain in at
    least 90 %; at the recordings' spread one start a side cannot, and it says so. Each
    rate fails only beyond what the nights can tell (its 95 % interval)."""
    out = tmp_path / "night-verdict.json"
    done = run([sys.executable, "bench/night_verdict.py", "--short", "--out", str(out)], 120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert 0.10 < figures["recorded_spread"] < 0.11  # the H200 recording's cap 1024
    rows = figures["rows"]
    assert {r["spread"] for r in rows} == {0.02, figures["recorded_spread"]}
    for row in rows:
        assert row["regression"]["low"] <= 0.20, row
        if row["holds_share"] == 1:
            assert row["unchanged"]["low"] <= 0.05 and row["gain"]["high"] >= 0.90, row
    known = {(r["spread"], r["starts"]): r for r in rows if r["mode"] == "known"}
    assert known[0.02, 1]["holds_share"] == 1 and known[0.02, 1]["targets_met"]
    recorded = known[figures["recorded_spread"], 1]
    assert recorded["holds_share"] == 0 and not recorded["targets_met"]
    assert recorded["unchanged"]["rate"] > 0.05  # what it cannot do, printed
    assert "H200 recording 10.7 %: 20" in done.stdout


def test_overhead_short():
    done = run([sys.executable, "bench/overhead.py", "--short"], 480)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "bare bench_serving wall s:" in done.stdout
    assert "glm5svc bench      wall s:" in done.stdout
    assert "overhead:" in done.stdout and "% (goal <= 3 %)" in done.stdout


def test_gateway_short(tmp_path):
    """The pinned smg (downloaded into .cache/venvs once) routes the bench to two replicas."""
    out = tmp_path / "gateway.json"
    done = run([sys.executable, "bench/gateway.py", "--short", "--out", str(out)], 480)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    figures = json.loads(out.read_text())
    two = figures["gateway_2_replicas"]
    assert two["double_concurrency"]["completed"] == two["double_concurrency"]["prompts"]
    assert min(two["requests_per_replica"]) > 0, two["requests_per_replica"]


def test_tune_fleet_short(tmp_path):
    """A tune on one replica of two behind smg, traffic through the gateway all along: no
    request fails, the replica's unit is stopped and started again, and it is back in
    rotation."""
    out = tmp_path / "tune-fleet.json"
    done = run([sys.executable, "bench/tune_fleet.py", "--short", "--out", str(out)], 600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert figures["requests_sent"] > 0 and figures["requests_failed"] == 0
    assert figures["streams_cut_short"] == 0
    assert figures["systemctl_calls"][-2:] == ["stop glm5.service", "start glm5.service"]
    assert len(figures["trials"]) == 2 and figures["replica_a_status_after"]["ready"]


def test_a_failed_phase_keeps_the_others_figures(tmp_path):
    def broken() -> dict:
        raise ValueError("no GPU")

    out = tmp_path / "result.json"
    result: dict = {}
    failed = run_phases([("first", lambda: {"x": 1}), ("broken", broken)], result, out)
    assert failed
    written = json.loads(out.read_text())
    assert written["first"] == {"x": 1} and "ValueError: no GPU" in written["broken"]["error"]


def test_reliability_short(tmp_path):
    out = tmp_path / "reliability.json"
    done = run([sys.executable, "bench/reliability.py", "--short", "--out", str(out)], 240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert figures["drain"]["completed"] == figures["drain"]["in_flight"] > 0
    for phase in ("drain", "readyz_after_engine_death", "readyz_after_freeze", "serve_sigkilled"):
        assert figures[phase]["processes_left"] == 0, figures[phase]
    assert figures["relay_long_line"]["lines"] == 2
