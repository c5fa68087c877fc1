"""A tune one can plan, watch and trust, on the test engine: the plan before the run (a
stand-in engine planned as one, never with sglang's figures for GLM-5), the caches that make
a second start faster (broken down from the engine's log and kept), the progress lines of a
redirected tune, `tune show` while it runs, a resume that plans with what it measured, a
failure outside the candidate tried once more, no `ok` when nothing was measured, the budget
as a bound, and `tune apply` refusing a tune measured elsewhere."""

from __future__ import annotations

import json
import re
import sys
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from glm5svc.tune.confirmation import confirmation_for
from glm5svc.tune.decision import FUTILE_AFTER
from glm5svc.tune.estimate import CONFIRMATION_STARTS
from tests.tune.conftest import write_space, write_tune_config
from tests.tune.test_tune_end_to_end import glm5svc

pytestmark = pytest.mark.long  # minutes of engines under load: scheduled first

JIT_S = 3.0
# One continuous load per engine start: short windows, a short settle, two rounds a start.
WORKLOAD = [
    "--concurrency", "32", "--input-len", "16", "--output-len", "16", "--length-ratio", "0.5",
    "--min-repeats", "2", "--max-repeats", "2", "--window", "1", "--settle", "0.5",
]  # fmt: skip
SGLANG_FIGURES = ("graphs", "autotune", "weights", "process start")


def with_cache_dir(config: Path, cache: Path) -> None:
    data = yaml.safe_load(config.read_text())
    data["server"]["cache_dir"] = str(cache)
    config.write_text(yaml.safe_dump(data))


def clock_s(clock: str) -> int:
    found = re.fullmatch(r"(?:(\d+) h )?(?:(\d+) min)?(?: ?(\d+) s)?", clock.strip())
    assert found and any(found.groups()), clock
    hours, minutes, seconds = (int(g or 0) for g in found.groups())
    return hours * 3600 + minutes * 60 + seconds


def head_adds_up(text: str) -> None:
    """The plan's head line: the first start + (n - 1) x each other = the total, in the
    clock values it prints (a start under an hour, printed to the second)."""
    head = next(line for line in text.splitlines() if "engine start(s) for" in line)
    found = re.search(r"the first (.+?)(?: \+ (\d+) x (.+?))? = (.+?); the budget", head)
    assert found, head
    first, others, other, total = found.groups()
    added = clock_s(first) + int(others or 0) * (clock_s(other) if other else 0)
    assert clock_s(total) == (added if added < 3600 else added // 60 * 60), head


def test_plan_fits_or_trims_the_budget(tmp_path, bench_python, tokenizer_dir):
    config = write_tune_config(tmp_path, bench_python, tokenizer_dir, "load=0.1")
    space = write_space(tmp_path, [
        {"key": "tuning.max_running_requests", "values": [8, 64]},
        {"key": "tuning.cuda_graph", "values": [False, True]},
        {"key": "tuning.chunked_prefill_size", "values": [None, 4096]},
    ])  # fmt: skip
    roomy = glm5svc(config, "tune", "run", "--plan", "--space", str(space), "--budget", "10h",
                    "--json", timeout=120)  # fmt: skip
    assert roomy.returncode == 0, roomy.stderr
    plan = json.loads(roomy.stdout)
    assert plan["fits"] and not plan["dropped"]
    # Three knobs of two values, each a restart: the start and one more of it, two starts
    # of each change (what one a side leaves undecided at the prior's spread), then the
    # confirmation's two.
    starts = 2 + 3 * FUTILE_AFTER + CONFIRMATION_STARTS
    assert (plan["starts"], plan["settings"]) == (starts, 4)
    assert plan["total_s"] == plan["first_start_s"] + (starts - 1) * plan["other_start_s"]
    assert plan["other_start_s"] == round(sum(plan["parts"].values()))  # a start's parts
    assert plan["first_start_s"] > plan["other_start_s"]  # the first start's deciding rounds
    # 10 s windows, a 5 min budget: the last knobs go until the screen fits; the
    # confirming start may not (said, not a reason to drop one more).
    tight = glm5svc(config, "tune", "run", "--plan", "--space", str(space), "--budget", "5m",
                    "--window", "10s", timeout=120)  # fmt: skip
    assert tight.returncode == 0, tight.stderr
    assert "dropped, the least influential first" in tight.stdout
    assert "tuning.chunked_prefill_size" in tight.stdout
    assert "tuning.max_running_requests" not in tight.stdout.split("dropped")[1]
    head_adds_up(tight.stdout)
    trimmed = json.loads(glm5svc(config, "tune", "run", "--plan", "--space", str(space),
                                 "--budget", "5m", "--window", "10s", "--json",
                                 timeout=120).stdout)  # fmt: skip
    assert trimmed["kept"][0] == "tuning.max_running_requests" and trimmed["dropped"]
    # The screen and its confirmation fit, or one knob is left and the plan says what not.
    assert trimmed["total_s"] <= 300 or trimmed["kept"] == ["tuning.max_running_requests"]
    if not trimmed["fits"]:
        assert "no change is written without one" in tight.stdout or "even one knob" in tight.stdout
    assert not list(tmp_path.glob("results/tune/*")), "--plan ran nothing"


def test_a_stand_in_engine_is_never_planned_with_the_targets_figures(
    tmp_path, bench_python, tokenizer_dir
):
    # Everything that would make sglang's start long for GLM-5: 430 GB of weights and
    # FlashInfer's MoE autotune. The engine is the test engine (server.command).
    config = write_tune_config(tmp_path, bench_python, tokenizer_dir, "load=0.1")
    index = {"metadata": {"total_size": 430 * 10**9}, "weight_map": {}}
    (tmp_path / "model" / "model.safetensors.index.json").write_text(json.dumps(index))
    data = yaml.safe_load(config.read_text())
    data["tuning"]["moe_runner_backend"] = "flashinfer_cutlass"
    config.write_text(yaml.safe_dump(data))
    space = write_space(tmp_path, [{"flag": "--page-size", "values": [None, 2]}])
    planned = glm5svc(config, "tune", "run", "--plan", "--space", str(space), "--json",
                      timeout=120)  # fmt: skip
    assert planned.returncode == 0, planned.stderr
    plan = json.loads(planned.stdout)
    assert plan["start_s"] == plan["parts"]["to READY"] == 5
    for figure in SGLANG_FIGURES:
        assert figure not in plan["start_basis"].lower(), plan["start_basis"]
    assert "stand-in engine" in plan["start_basis"]
    assert "sglang_test_engine.py" in plan["start_basis"]
    # The same configuration with sglang's launcher is planned with the target's parts.
    data["server"]["command"] = [sys.executable, "-m", "sglang.launch_server"]
    config.write_text(yaml.safe_dump(data))
    target = json.loads(glm5svc(config, "tune", "run", "--plan", "--space", str(space),
                                "--json", timeout=120).stdout)  # fmt: skip
    assert "graphs" in target["start_basis"] and "autotune" in target["start_basis"]
    assert target["start_s"] > plan["start_s"]


def test_caches_make_the_second_start_faster_and_a_redirected_tune_says_so(
    tmp_path, bench_python, tokenizer_dir
):
    config = write_tune_config(tmp_path, bench_python, tokenizer_dir, f"load=0.1,jit={JIT_S}")
    cache = tmp_path / "cache"
    with_cache_dir(config, cache)
    space = write_space(tmp_path, [{"flag": "--page-size", "values": [None, 2]}])
    run_dir = tmp_path / "tune"
    done = glm5svc(config, "tune", "run", *WORKLOAD, "--space", str(space), "--max-trials", "2",
                   "--run-dir", str(run_dir), "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    first, second = summary["starts"]
    # The engine compiles its kernels once (inside the piecewise graph capture it logs);
    # the second start finds them in server.cache_dir and does not.
    assert first["graphs_s"] >= JIT_S > second["graphs_s"]
    assert list((cache / "sglang").rglob("*")), "the compile cache is in server.cache_dir"
    assert (run_dir / "starts" / "001" / "start.json").is_file()
    # Each start's windows, one file a window under its start's folder; nothing of the old
    # benchmark's levels (no baseline/, no level.json).
    for trial in summary["trials"]:
        runs = run_dir / "starts" / f"{trial['start']:03d}" / "runs"
        outcome = json.loads((run_dir / "trials" / f"{trial['trial']:03d}.json").read_text())
        names = [r["name"] for r in outcome["outcome"]["runs"]]
        assert names and set(names) <= {p.stem for p in runs.glob("*.json")}
    assert not (run_dir / "baseline").exists()
    assert not list(run_dir.rglob("level.json")) and not list(run_dir.rglob("window.json"))
    # stderr is not a terminal here: plain progress lines, the same in the run's log. The
    # plan: the screen's starts (the start twice, the change twice) and the confirmation's.
    plan_head = f"plan: {2 + FUTILE_AFTER + CONFIRMATION_STARTS} engine start(s) for 2 setting(s)"
    assert plan_head in done.stderr
    head_adds_up(done.stderr)
    assert "trial 0 (" in done.stderr and "trial 1 ended: measured" in done.stderr
    # The run directory before the first start, and the phase of the window measured.
    said = f"run directory: {run_dir} (while it runs: glm5svc tune show {run_dir})"
    assert said in done.stderr and done.stderr.index(said) < done.stderr.index(plan_head)
    assert re.search(r"trial 0 \(.*\): window 2 \(", done.stderr), done.stderr[-3000:]
    log = (run_dir / "tune.log").read_text()
    assert plan_head in log and "trial 1 ended: measured" in log

    shown = glm5svc(config, "tune", "show", str(run_dir))
    assert shown.returncode == 0 and "engine start 1 (trial(s) 1): " in shown.stdout
    assert "stopped: --max-trials 2 reached" in shown.stdout  # the run's own head lines
    (run_dir / "summary.json").unlink()  # as while it runs: the trials so far
    running = glm5svc(config, "tune", "show", str(run_dir), "--json")
    assert running.returncode == 0, running.stderr
    so_far = json.loads(running.stdout)
    assert so_far["running"] is True and len(so_far["trials"]) == 2

    # A resume searches what its run directory saved (the space, the workload, the settings):
    # no --space needed, the trials from before counted; a contradicting flag is refused.
    again = glm5svc(config, "tune", "run", "--resume", str(run_dir), "--max-trials", "2")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "begin: 2 trial(s) from before" in again.stderr
    # Its plan: the starts it measured replace the placeholder, and are not planned again.
    measured = [line for line in again.stderr.splitlines() if "plan: its start is" in line]
    assert measured and "as measured" in measured[0], measured
    assert "until one is measured" not in again.stderr
    left = 2 + FUTILE_AFTER + CONFIRMATION_STARTS - 2  # the planned starts less the two made
    assert f"plan: {left} engine start(s) for 0 setting(s)" in again.stderr
    changed = glm5svc(config, "tune", "run", "--resume", str(run_dir), "--space", str(space),
                      "--concurrency", "64")  # fmt: skip
    assert changed.returncode == 78
    assert f"--concurrency 64: this run saved 32 ({run_dir / 'tune.json'})" in changed.stderr
    assert "--space" not in changed.stderr.split("invalid options", 1)[1]  # the same space
    data = yaml.safe_load(config.read_text())
    data["server"]["extra_args"] = ["--page-size", "2"]  # a searched setting, changed
    config.write_text(yaml.safe_dump(data))
    moved = glm5svc(config, "tune", "run", "--resume", str(run_dir))
    assert moved.returncode == 78
    assert "--page-size: this study started from None" in moved.stderr
    assert "the configuration has 2" in moved.stderr


def test_a_timeout_is_tried_again_and_nothing_measured_is_not_ok(
    tmp_path, bench_python, tokenizer_dir
):
    config = write_tune_config(tmp_path, bench_python, tokenizer_dir, "load=8")
    run_dir = tmp_path / "tune"
    # --window 0.5: the rounds' windows must fit in the 2 s a trial may take.
    done = glm5svc(config, "tune", "run", *WORKLOAD, "--max-trials", "1", "--trial-timeout",
                   "2", "--window", "0.5", "--run-dir", str(run_dir), "--json")  # fmt: skip
    assert done.returncode == 1, done.stderr[-3000:]
    answer = json.loads(done.stdout)
    assert answer["ok"] is False
    assert answer["error"].startswith("no trial measured anything (trial 0: not ready")
    (trial,) = answer["trials"]
    assert trial["diagnosis"].startswith("tried again: the first attempt failed outside the "
                                         "candidate (a timeout")  # fmt: skip
    assert (run_dir / "starts" / "000" / "first-attempt" / "serve.log").is_file()
    assert (run_dir / "starts" / "000" / "serve.log").is_file()


def test_the_budget_is_a_bound(tmp_path, bench_python, tokenizer_dir):
    config = write_tune_config(tmp_path, bench_python, tokenizer_dir, "load=0.1")
    space = write_space(tmp_path, [{"key": "tuning.max_running_requests", "values": [8, 16, 64]}])
    budget = 40
    done = glm5svc(config, "tune", "run", *WORKLOAD, "--space", str(space), "--budget",
                   str(budget), "--run-dir", str(tmp_path / "tune"), "--json")  # fmt: skip
    summary = json.loads(done.stdout)
    took = datetime.fromisoformat(summary["finished_at"]) - datetime.fromisoformat(
        summary["started_at"]
    )
    assert took.total_seconds() <= budget, summary["stopped_by"]
    assert "budget" in summary["stopped_by"]


def test_apply_refuses_a_tune_measured_elsewhere_unless_forced(tmp_path):
    config = tmp_path / "glm5.yaml"
    config.write_text(yaml.safe_dump({"model": {"path": str(tmp_path / "model")}}))
    before = config.read_bytes()
    run_dir = tmp_path / "tune"
    run_dir.mkdir()
    (run_dir / "tuned.yaml").write_text(yaml.safe_dump({"tuning": {"max_running_requests": 64}}))
    elsewhere = {"gpu_count": 1, "gpu_name": "cpu test engine", "model_path": "/m",
                 "model_architecture": "Qwen3Moe", "sglang_version": "0.5.11"}  # fmt: skip
    (run_dir / "summary.json").write_text(json.dumps(
        {"facts": {"identity": elsewhere}, "confirmed": True, "confirmation": "confirmed",
         "confirmation_for": confirmation_for({"tuning": {"max_running_requests": 64}})}
    ))  # fmt: skip
    refused = glm5svc(config, "tune", "apply", str(run_dir), "--no-restart", "--json")
    assert refused.returncode == 78, refused.stderr
    error = json.loads(refused.stdout)
    assert "--force" in error["error"] and "GPUs: measured with 1" in error["error"]
    assert config.read_bytes() == before
    forced = glm5svc(config, "tune", "apply", str(run_dir), "--no-restart", "--force", "--json")
    assert forced.returncode == 0, forced.stderr
    assert yaml.safe_load(config.read_text())["tuning"]["max_running_requests"] == 64
    assert any("--force" in m for m in json.loads(forced.stdout)["messages"])
