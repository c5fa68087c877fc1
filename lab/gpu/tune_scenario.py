"""`glm5svc tune run` on one H200: the qwen3-moe testbed from a starting point, for real.

The H200 configuration (common.write_h200_config) on the testbed (lab/gpu/models.py),
with the settings the search starts from:
- before: the reference deployment's starting settings (max_running_requests 64, CUDA
  graphs on), the point its own hand search left from;
- defaults: glm5svc's defaults (max_running_requests 1024, CUDA graphs off).
The search space is lab/gpu/tune-space-h200.yaml; the workload the reference
deployment's (concurrency 256) with 512-token prompts and 128-token answers. The tune
run's directory (study, trials, tuned.yaml, summary, plot, each trial's logs) is copied
into recorded/tune-run/ with the big files cut, and the command's JSON summary goes to
results.json. Every server the tune run started and left is killed at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

import yaml

from glm5svc.child_group import spawn
from lab.gpu.common import (
    BENCH_PYTHON,
    LAB,
    REPO,
    STARTED_GROUPS,
    Deadline,
    glm5svc_argv,
    log,
    proc_text,
    write_h200_config,
)

# The space searched: the big effects by default; GPU_LAB_TUNE_SPACE names another file of
# this folder (tune-space-h200-small.yaml: a small effect and a null knob).
SPACE = Path(__file__).resolve().parent / os.environ.get(
    "GPU_LAB_TUNE_SPACE", "tune-space-h200.yaml"
)
STARTS = {
    "before": {"max_running_requests": 64, "cuda_graph": True},
    "defaults": {"max_running_requests": 1024, "cuda_graph": False},
    # the big-effect search's pick: where the small-effect space starts
    "tuned": {"max_running_requests": 1024, "cuda_graph": True},
}
CONCURRENCY = 256
INPUT_LEN = 512
OUTPUT_LEN = int(os.environ.get("GPU_LAB_TUNE_OUTPUT_LEN", "128"))  # shorter in a rehearsal
LENGTH_RATIO = 0.5  # lengths uniform in [half, full]: requests do not move in waves
MIN_REPEATS = int(os.environ.get("GPU_LAB_TUNE_MIN_REPEATS", "2"))
MAX_REPEATS = int(os.environ.get("GPU_LAB_TUNE_MAX_REPEATS", "8"))
# Windows under the start's one load: this long each, a settle period after each live
# change, a warm-up until two agree within the tolerance or the bound. 40 s: windows within
# a start spread 4 % there against 10.8 % at 10 s (the precision scenario), and the search
# on the recorded noise writes a +10 % cap in 90 % of tunes there against 74 % at 10 s
# (bench/tune_recorded.py, docs/performance-tune.md). A device call that must fit its
# 10 minutes sets GPU_LAB_TUNE_WINDOW_S=10 and says so.
WINDOW_S = float(os.environ.get("GPU_LAB_TUNE_WINDOW_S", "40"))
SETTLE_S = float(os.environ.get("GPU_LAB_TUNE_SETTLE_S", "4"))
WARMUP_MAX_S = float(os.environ.get("GPU_LAB_TUNE_WARMUP_MAX_S", "80"))  # two windows
WARMUP_TOLERANCE_PCT = float(os.environ.get("GPU_LAB_TUNE_WARMUP_TOLERANCE_PCT", "5"))
# The grid: every combination of the space's restart knobs, in this order (one engine
# start each, measuring every live value), so the same combination is started more than
# once and the spread from start to start is measured, not assumed.
GRID_ORDER = os.environ.get("GPU_LAB_GRID_ORDER", "true,false,true").split(",")
# A trial stuck (a server that never comes up) gives the rest of the budget back.
TRIAL_TIMEOUT_S = int(os.environ.get("GPU_LAB_TUNE_TRIAL_TIMEOUT_S", "300"))
# One server at a time: the example's own share (common.write_h200_config halves it for
# two servers side by side).
MEM_FRACTION = 0.5
# Held back from the tune run's own budget: its last server's stop, then the copy.
RESERVE_S = 40.0
KEEP_BYTES = 2 * 1024 * 1024  # a copied file over this keeps its start and end
SKIP_BYTES = 32 * 1024 * 1024  # a binary file over this is left out


def write_tune_config(dest: Path, model_dir: Path, results_dir: Path, start: str) -> Path:
    write_h200_config(dest, model_dir, results_dir)
    config = yaml.safe_load(dest.read_text())
    config["model"]["served_name"] = model_dir.name
    config["gpus"].update(target="sm90", expected_count=1, compute_capability="9.0")
    tuning = config["tuning"]
    tuning.update(STARTS[start], mem_fraction_static=MEM_FRACTION, attention_backend="triton")
    server = config["server"]
    # The piecewise CUDA graph capture costs 49 s of each fresh start (sglang 0.5.11's
    # --disable-piecewise-cuda-graph; on by default); every trial is a start.
    server["extra_args"] = [
        "--sampling-backend", "pytorch", "--grammar-backend", "none",
        "--disable-piecewise-cuda-graph",
    ]  # fmt: skip
    config["service"]["run_preflight"] = False
    benchmark = config.setdefault("benchmark", {})
    benchmark["post_start"] = {"enabled": False}
    benchmark["python"] = BENCH_PYTHON
    benchmark.update(
        steady=True, window_s=WINDOW_S, warmup_max_s=WARMUP_MAX_S,
        warmup_tolerance_pct=WARMUP_TOLERANCE_PCT,
    )  # fmt: skip
    dest.write_text(yaml.safe_dump(config, sort_keys=False))
    return dest


def marked_pids(mark: str) -> list[int]:
    """Processes whose environment holds this run's mark: the tune run and whatever it
    started (servers, engines, bench_serving), inherited through their environments,
    also once orphaned."""
    needle = f"GPU_LAB_TUNE_RUN={mark}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return sorted(found)


def kill_left(mark: str) -> list[str]:
    """What the tune run started and left, killed by process group (never this one's);
    what it was is returned for the record."""
    seen, own = [], os.getpgid(0)
    for pid in marked_pids(mark):
        seen.append(f"{pid} {proc_text(Path('/proc', str(pid), 'cmdline'))[:120]}")
        try:
            group = os.getpgid(pid)
            os.killpg(group, signal.SIGKILL) if group != own else os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return seen


def copy_run_dir(run_dir: Path, dest: Path) -> list[str]:
    """The run directory into dest, logs over KEEP_BYTES cut to their ends, big binaries
    left out; returns what was cut or left out."""
    notes = []
    for path in sorted(run_dir.rglob("*")):
        if not path.is_file():
            continue
        target = dest / path.relative_to(run_dir)
        target.parent.mkdir(parents=True, exist_ok=True)
        size = path.stat().st_size
        if size <= KEEP_BYTES or path.suffix in (".db", ".png"):
            if size > SKIP_BYTES:
                notes.append(f"{path.relative_to(run_dir)}: {size} bytes, left out")
                continue
            shutil.copy2(path, target)
            continue
        data = path.read_bytes()
        half = KEEP_BYTES // 2
        cut = b"\n[... cut by the gpu lab ...]\n"
        target.write_bytes(data[:half] + cut + data[-half:])
        notes.append(f"{path.relative_to(run_dir)}: {size} bytes, cut to its ends")
    return notes


def last_json_object(text: str) -> dict | None:
    """The JSON object the command prints at its end (indented or on one line)."""
    lines = text.splitlines()
    for at in range(len(lines) - 1, -1, -1):
        if lines[at].startswith("{"):
            try:
                value = json.loads("\n".join(lines[at:]))
            except json.JSONDecodeError:
                continue
            return value if isinstance(value, dict) else None
    return None


def run(
    out: Path,
    env: dict[str, str],
    deadline: Deadline,
    results: dict,
    model_dir: Path,
    start: str,
    space: Path = SPACE,
    tag: str | None = None,
    max_trials: int | None = None,
    budget_s: float | None = None,
    tuning: dict | None = None,
) -> None:
    """One `glm5svc tune run` from `start` over `space`; `tag` names its work and recorded
    folders (several runs in one call), `budget_s` caps its budget."""
    # A lone tune records at the top (lab/gpu/record.py reads it there); the grid's starts
    # each in their own folder.
    recorded = out / "recorded" / tag if tag else out / "recorded"
    tag = tag or f"tune-{start}"
    recorded.mkdir(parents=True, exist_ok=True)
    work = LAB / "work" / tag
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    config = write_tune_config(work / "h200-tune.yaml", model_dir, work / "results", start)
    if tuning:  # the grid's combination: the start a space of one combination begins from
        mapping = yaml.safe_load(config.read_text())
        mapping["tuning"].update(tuning)
        config.write_text(yaml.safe_dump(mapping, sort_keys=False))
    (recorded / "h200-tune.yaml").write_text(config.read_text())
    shutil.copy2(space, recorded / space.name)
    run_dir = work / "run"
    # A tune stopped on an earlier machine continues here (its run directory carried).
    resume = os.environ.get("GPU_LAB_TUNE_RESUME")
    if resume:
        shutil.copytree(REPO / resume, run_dir)
    budget = int(min(deadline.left() - RESERVE_S, budget_s or float("inf")))
    argv = glm5svc_argv(
        config, "tune", "run",
        "--concurrency", str(CONCURRENCY), "--input-len", str(INPUT_LEN),
        "--output-len", str(OUTPUT_LEN), "--length-ratio", str(LENGTH_RATIO),
        "--settle", str(SETTLE_S),
        "--space", str(space), "--budget", str(budget),
        "--min-repeats", str(MIN_REPEATS), "--max-repeats", str(MAX_REPEATS),
        "--trial-timeout", str(TRIAL_TIMEOUT_S),
        *(["--max-trials", str(max_trials)] if max_trials else []),
        "--resume" if resume else "--run-dir", str(run_dir), "--json",
    )  # fmt: skip
    results.update(start=start, starting_settings=STARTS[start], argv=argv[3:], budget_s=budget)
    log(f"{tag}: budget {budget} s")
    mark = f"{os.getpid()}-{time.time_ns()}"
    t0 = time.monotonic()
    with (
        (recorded / "tune-stdout.txt").open("w") as stdout,
        (recorded / "tune-stderr.log").open("w") as stderr,
    ):
        tune = spawn(
            argv, die_with_parent=False, env=dict(env, GPU_LAB_TUNE_RUN=mark), cwd=REPO,
            stdout=stdout, stderr=stderr,
        )  # fmt: skip
        STARTED_GROUPS.add(tune.pid)
        code = tune.wait(max(5, min(deadline.left() - RESERVE_S + 25, budget + 25)))
        if code is None:
            # Past its own budget: stopped as a user would (SIGTERM to its group), then killed.
            grace = max(3, min(20, deadline.left() - 15))
            stopped = tune.stop(grace, first_signal_to="group")
            results["stop"] = stopped.describe()
            code = "past its budget: " + ("SIGKILL" if stopped.needed_kill else "SIGTERM")
        results["exit"] = code
    results["wall_s"] = round(time.monotonic() - t0, 1)
    results["left_after"] = kill_left(mark)
    text = (recorded / "tune-stdout.txt").read_text(errors="replace")
    summary = last_json_object(text)
    results["summary"] = summary
    if summary is None:
        results["stdout_tail"] = text[-3000:]
        stderr_text = (recorded / "tune-stderr.log").read_text(errors="replace")
        results["stderr_tail"] = stderr_text[-3000:]
    if run_dir.exists():
        results["copy_notes"] = copy_run_dir(run_dir, recorded / "tune-run")
        results["run_files"] = sorted(
            str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_file()
        )[:200]
    log(f"{tag}: exit {results['exit']} in {results['wall_s']} s")


def grid_space(dest: Path) -> Path:
    """The H200 space's live knob alone: with the combination in the configuration (the
    start), a tune of one start measures every live value of it."""
    space = yaml.safe_load(SPACE.read_text())
    space["knobs"] = [k for k in space["knobs"] if k.get("restart", True) is False]
    dest.write_text(yaml.safe_dump(space, sort_keys=False))
    return dest


def run_grid(out: Path, env: dict[str, str], deadline: Deadline, results: dict,
             model_dir: Path) -> None:  # fmt: skip
    """Every combination of the restart knobs (here CUDA graphs on and off), one engine start
    each in GRID_ORDER, each measuring every live cap with the tune's own method: a tune run
    of one start over a one-combination space, from the `before` settings."""
    results["order"] = GRID_ORDER
    results["starts"] = []
    for index, graphs in enumerate(GRID_ORDER):
        if deadline.left() < RESERVE_S + 90:
            results["cut"] = f"{len(GRID_ORDER) - index} start(s) left out: device time"
            break
        combination = {"cuda_graph": graphs == "true"}
        tag = f"grid-{index}-graphs-{'on' if combination['cuda_graph'] else 'off'}"
        work = LAB / "work"
        work.mkdir(parents=True, exist_ok=True)
        space = grid_space(work / f"{tag}-space.yaml")
        entry: dict = {"index": index, "combination": combination}
        results["starts"].append(entry)
        try:
            run(out, env, deadline, entry, model_dir, "before", space=space, tag=tag,
                max_trials=1, tuning=combination)  # fmt: skip
        except Exception as err:  # noqa: BLE001 - the grid goes on with what it has
            entry["error"] = f"{type(err).__name__}: {err}"
        summary = entry.get("summary") or {}
        entry["settings"] = [
            {key: row.get(key) for key in ("setting", "status", "runs", "throughput_mean",
                                           "throughput_low", "throughput_high", "verdict")}
            for row in summary.get("trials") or []
        ]  # fmt: skip
        log(f"{tag}: {json.dumps(entry['settings'])}")
