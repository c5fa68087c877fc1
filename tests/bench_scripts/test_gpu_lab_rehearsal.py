"""scripts/gpu-lab's scenarios rehearsed on the CPU against the test engine, so that a GPU
run is never the first to find a broken runner (docs/gpu-lab.md)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from glm5svc.bench.seconds import FIELDS, read_seconds
from glm5svc.tune.noise import report, rows_from_folder
from lab.gpu import record
from lab.gpu.noise_figures import markdown
from lab.gpu.precision_figures import figures
from testkit.bench_venv import build_bench_serving_venv
from testkit.engine import TEST_ENGINE
from testkit.script_run import run_script

REPO = Path(__file__).resolve().parents[2]
FAST_ENGINE = f"{sys.executable} {TEST_ENGINE} --step-base-ms 1 --step-per-req-ms 0.01"


def rehearsal_env(tmp_path: Path, engine: str = FAST_ENGINE, **variables: str) -> dict[str, str]:
    """A scenario's environment on the CPU: the test engine for sglang (fast steps unless
    said), the bench_serving venv (built once per machine; it makes the tokenizers), $OUT."""
    return dict(
        os.environ,
        OUT=str(tmp_path / "out"),
        GPU_LAB_ENGINE=engine,
        GPU_LAB_BENCH_PYTHON=str(build_bench_serving_venv()),
        **variables,
    )


@pytest.mark.slow  # the bench_serving venv (built once per machine) makes the tokenizers
def test_drain_scenario_rehearsed_on_the_test_engine(tmp_path):
    env = rehearsal_env(
        tmp_path,
        engine=f"{sys.executable} {TEST_ENGINE}",
        GPU_LAB_DRAIN_TOKENS="60",
    )
    done = run_script(
        [sys.executable, "-m", "lab.gpu.remote", "drain", "--budget", "120"],
        cwd=REPO, env=env, timeout=200,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    drain = json.loads((tmp_path / "out" / "results.json").read_text())["drain"]
    assert "error" not in drain, drain
    assert drain["running_at_stop"] >= 60
    assert drain["in_flight"]["completed_in_full"] == drain["in_flight"]["sent"] == 64
    assert drain["readyz_0_3s_after_stop"] == 503
    assert drain["serve_exit"] == 0 and drain["processes_left"] == []
    assert (tmp_path / "out" / "recorded.tar.gz").exists()


@pytest.mark.slow  # the bench_serving venv, as above
def test_ratio_scenario_rehearsed_on_the_test_engine(tmp_path):
    env = rehearsal_env(
        tmp_path,
        GPU_LAB_RATIO_LEVELS="8,16",
        GPU_LAB_RATIO_RUN_S="0.2",
        GPU_LAB_RATIO_INPUT_LEN="32",
        GPU_LAB_RATIO_OUTPUT_LEN="8",
        GPU_LAB_RATIO_MAX_PAIRS="2",
    )
    done = run_script(
        [sys.executable, "-m", "lab.gpu.remote", "ratio", "--budget", "200"],
        cwd=REPO, env=env, timeout=200,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    ratio = json.loads((tmp_path / "out" / "results.json").read_text())["ratio"]
    assert "error" not in ratio, {k: ratio[k] for k in ratio if k != "config"}
    # Both pools pinned alike, read from each server's own log.
    assert ratio["same_kv_pool"] and ratio["kv_pool_tokens"]["bare"] > 0
    assert "--max-total-tokens" in ratio["bare_argv"]
    assert set(ratio["warmup"]) == {"bare", "serve"}
    assert [(p["level"], p["first"]) for p in ratio["pairs"]] == [(8, "bare"), (16, "bare")]
    assert len(ratio["runs"]) == 4
    assert 0.2 < ratio["ratio"]["mean"] < 5 and ratio["ratio"]["n"] == 2
    assert ratio["serve_stop"]["exit"] == 0 and ratio["bare_stop"]["left"] == 0
    with tarfile.open(tmp_path / "out" / "recorded.tar.gz") as tar:
        names = {Path(n).name for n in tar.getnames()}
    assert {"bare.log", "serve.log", "bench-bare.log", "bench_serving-serve.jsonl"} <= names


@pytest.mark.slow  # the bench_serving venv, as above
@pytest.mark.skipif(
    importlib.util.find_spec("glm5svc.tune") is None, reason="glm5svc tune is not there yet"
)
def test_tune_scenario_rehearsed_on_the_test_engine(tmp_path):
    env = rehearsal_env(
        tmp_path,
        GPU_LAB_TUNE_SETTLE_S="0.5",
        GPU_LAB_TUNE_OUTPUT_LEN="16",
        GPU_LAB_TUNE_MIN_REPEATS="2",
        GPU_LAB_TUNE_MAX_REPEATS="2",
        # Windows sized for the test engine: the H200's 5 s windows, 2 s settle and 30 s of
        # warm-up would not fit the rehearsal's budget on a loaded CI machine.
        GPU_LAB_TUNE_WINDOW_S="2",
        GPU_LAB_TUNE_WARMUP_MAX_S="8",
        GPU_LAB_TUNE_WARMUP_TOLERANCE_PCT="20",
    )
    done = run_script(
        [sys.executable, "-m", "lab.gpu.remote", "tune", "--start", "before", "--budget", "150"],
        cwd=REPO, env=env, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    tune = json.loads((tmp_path / "out" / "results.json").read_text())["tune"]
    assert "error" not in tune, tune
    assert tune["start"] == "before" and tune["exit"] == 0, tune
    summary = tune["summary"]
    assert summary is not None, tune.get("stderr_tail")
    assert tune["left_after"] == []
    # What lab/gpu/comparison.py reads from a device run: the timeline, the confirmation,
    # the plan, the windows (one continuous load per start, no bench_serving baseline).
    assert {"decided_s", "wall_s", "budget_s"} <= set(summary["timeline"])
    assert "confirmed" in summary and summary["plan"]["total_s"] > 0
    with tarfile.open(tmp_path / "out" / "recorded.tar.gz") as tar:
        names = set(tar.getnames())
    assert "recorded/tune-run/summary.json" in names
    assert "recorded/h200-tune.yaml" in names
    assert any(n.startswith("recorded/tune-run/starts/000/runs/r01-") for n in names), names
    assert not any(n.startswith("recorded/tune-run/baseline") for n in names)


def sglang_with_auto_benchmark(bench_python: str) -> str | None:
    """Why the bench venv cannot run sglang.auto_benchmark (sglang 0.5.10 added it), or
    None when it can."""
    probe = (
        "import importlib.metadata as m, importlib.util as u\n"
        "version = m.version('sglang')\n"
        "print(version, bool(u.find_spec('sglang.auto_benchmark')))"
    )
    done = subprocess.run([bench_python, "-c", probe], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    if done.returncode != 0:
        return f"the bench venv has no sglang ({done.stderr.strip().splitlines()[-1:]})"
    version, found = done.stdout.split()
    numbers = tuple(int(part) for part in version.split(".")[:3] if part.isdigit())
    if numbers < (0, 5, 10) or found != "True":
        return (
            f"the peer scenario runs sglang.auto_benchmark, which sglang>=0.5.10 has; the "
            f"bench venv (testkit/bench_venv.py) has sglang {version}"
        )
    return None


@pytest.mark.slow  # the bench_serving venv, as above
def test_peer_scenario_rehearsed_on_the_test_engine(tmp_path):
    """sglang.auto_benchmark over the tune's space (two caps x graphs on/off, one start
    each) against the test engine: every candidate measured, a pick, the recorded files."""
    bench_python = build_bench_serving_venv()
    missing = sglang_with_auto_benchmark(str(bench_python))
    if missing is not None:
        pytest.skip(missing)
    env = rehearsal_env(tmp_path, GPU_LAB_TUNE_OUTPUT_LEN="16")
    done = run_script(
        [sys.executable, "-m", "lab.gpu.remote", "peer", "--start", "before", "--budget", "300"],
        cwd=REPO, env=env, timeout=360,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    peer = json.loads((tmp_path / "out" / "results.json").read_text())["peer"]
    assert "error" not in peer, peer
    assert peer["start"] == "before" and peer["exit"] == 0, peer
    assert len(peer["candidates"]) == 4, peer["candidates"]
    assert all(c["error"] is None and c["total_throughput"] for c in peer["candidates"])
    assert set(peer["pick"]) == {"max_running_requests", "cuda_graph"}
    with tarfile.open(tmp_path / "out" / "recorded.tar.gz") as tar:
        names = set(tar.getnames())
    assert "recorded/peer/auto-benchmark.yaml" in names
    assert any(n.endswith("live_results.jsonl") for n in names), names


@pytest.mark.slow  # the bench_serving venv, as above (it makes the tokenizer)
def test_precision_scenario_rehearsed_on_the_test_engine(tmp_path):
    """Starts follow one another until the budget; each records every counter read with its
    phase and cap, the live cap moves through the schedule, and the streaming probes time
    their requests: what lab/gpu/precision_figures.py and the recorded-noise engine read."""
    env = rehearsal_env(
        tmp_path,
        GPU_LAB_TUNE_OUTPUT_LEN="16",
        GPU_LAB_PRECISION_FIRST="1024:2,1024:3,64:2,192:2",
        GPU_LAB_PRECISION_LATER="1024:2,1024:2,192:2",
        GPU_LAB_PRECISION_MAX_STARTS="2",
    )
    # A budget a loaded machine cannot run out of: the two starts end the scenario.
    done = run_script(
        [sys.executable, "-m", "lab.gpu.remote", "precision", "--budget", "200"],
        cwd=REPO, env=env, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    precision = json.loads((tmp_path / "out" / "results.json").read_text())["precision"]
    assert "error" not in precision, precision
    starts = precision["starts"]
    assert len(starts) == 2 and all(s["load"]["failed"] == 0 for s in starts), starts
    assert [p["cap"] for p in starts[0]["phases"]] == [1024, 1024, 64, 192]
    with tarfile.open(tmp_path / "out" / "recorded.tar.gz") as tar:
        tar.extractall(tmp_path / "recorded", filter="data")
    folder = tmp_path / "recorded" / "recorded" / "precision"
    reads = json.loads((folder / "start1-reads.json").read_text())
    assert {r["cap"] for r in reads["reads"]} == {64, 192, 1024}
    assert reads["streamed"] and all(s[1] > 0 for s in reads["streamed"])
    found = figures(folder)
    assert found["starts"] == len(starts)
    assert found["start_spread"]["output"][1024]["means"]


@pytest.mark.slow  # the bench_serving venv (it makes the tokenizer)
def test_noise_scenario_rehearsed_on_the_test_engine(tmp_path, monkeypatch):
    """Two starts of fixed-cap windows with every second recorded beside them, the flush
    variant after the second's; recorded as a fixture and attributed by noise_figures."""
    env = rehearsal_env(
        tmp_path,
        GPU_LAB_TUNE_OUTPUT_LEN="16",
        GPU_LAB_NOISE_WINDOW_S="1",
        GPU_LAB_NOISE_WINDOWS="4",
        GPU_LAB_NOISE_LATER_WINDOWS="3",
        GPU_LAB_NOISE_SETTLE_S="0.2",
        GPU_LAB_NOISE_VARIANT_WINDOWS="2",
        GPU_LAB_NOISE_MAX_STARTS="2",
    )
    done = run_script(
        [sys.executable, "-m", "lab.gpu.remote", "noise", "--budget", "200"],
        cwd=REPO, env=env, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    noise = results["noise"]
    assert "error" not in noise, noise
    starts = noise["starts"]
    assert [s["number"] for s in starts] == [1, 2], starts
    kinds = [[w["kind"] for w in s["windows"]] for s in starts]
    assert kinds == [["warmup"] * 2 + ["time"] * 4, ["warmup"] * 2 + ["time"] * 3 + ["flush"] * 2]
    assert all(w["throughput"] > 0 for s in starts for w in s["windows"])
    assert len(starts[1]["loads"]) == 3  # the first load, then a fresh one after each flush
    monkeypatch.setattr(record, "FIXTURES", tmp_path / "fixtures")
    dest = record.record(tmp_path / "out", record.default_name(results))
    folder = dest / "noise"
    header, lines = read_seconds(folder / "start1" / "seconds.jsonl")
    assert header["nvml_absent"] and lines and all(set(FIELDS) <= set(x) for x in lines)
    assert all(x["running"] is not None and x["in_flight"] is not None for x in lines)
    assert any(x["passes"] for x in lines)
    rows = rows_from_folder(folder)
    assert len(rows) == sum(len(k) for k in kinds)
    found = report(rows)
    assert found["spread"]["starts"] == 2 and found["windows"]["n"] == 7
    assert "flush windows" in found["removable"]
    assert "Within starts" in markdown(found)
