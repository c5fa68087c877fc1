"""`scripts/try`, the GPU-free try-out, runs from start to clean stop (its short mode), and
a new user's first steps after it, while it keeps serve running: `glm5svc` from the PATH it
prints, `python -m glm5svc` from another folder, the regression gate against the shipped
baseline (and the gate its message names), `tune apply` on the try-out's configuration."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
from pathlib import Path

import pytest

from glm5svc.errors import EXIT_CONFIG
from testkit.bench_venv import build_bench_serving_venv

REPO = Path(__file__).resolve().parents[2]
KEPT = "serve keeps running"


@pytest.mark.timeout(300)
def test_the_try_out_serves_reports_benchmarks_and_stops_cleanly(tmp_path):
    build_bench_serving_venv()  # the try-out reuses the tests' bench_serving venv
    run = subprocess.Popen(
        [str(REPO / "scripts" / "try"), "--short", "--keep-running"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd="/",
    )  # fmt: skip
    lines = []
    while line := run.stdout.readline():  # the timeout mark ends a try-out that hangs
        lines.append(line)
        if KEPT in line:
            break
    config_path = re.search(r"try: configuration (\S+):\n", "".join(lines)).group(1)
    written = Path(config_path).read_text()  # before tune apply changes it
    try:
        assert KEPT in "".join(lines), "".join(lines)
        first_hour(tmp_path, "".join(lines))
    finally:
        run.send_signal(signal.SIGINT)  # ^C, as the try-out says
        out = "".join(lines) + run.communicate(timeout=60)[0]
    assert run.returncode == 0, out
    assert re.search(r"try: ready after [\d.]+ s; glm5svc status:\nglm5svc \S+: serving\n", out)
    assert "ready: yes" in out and "KV pool: " in out
    assert "concurrency 4: " in out
    assert "try: serve exited with 0; glm5svc status now exits 3" in out
    # What it says it runs is what it runs: the configuration whole, the bench command exactly.
    printed = out.split(f"try: configuration {config_path}:\n", 1)[1]
    assert printed.startswith(written)
    said = re.search(r"^try: (\S+ -m glm5svc --config \S+ bench .*)$", out, re.MULTILINE).group(1)
    assert shlex.split(said)[4:] == [
        config_path, "bench", "--ladder", "4", "--input-len", "64", "--output-len", "16",
        "--num-prompts", "32", "--warmup-requests", "2", "--baseline", "none",
    ]  # fmt: skip
    work = Path(re.search(r"everything is in (\S+)", out).group(1))
    [summary] = (work / "results" / "bench").glob("*/summary.json")
    levels = json.loads(summary.read_text())["levels"]
    # Steady windows: 32 prompts is the first run's size, later runs are sized to the window.
    assert [(lv["concurrency"], lv["error"]) for lv in levels] == [(4, None)]
    assert levels[0]["completed"] == levels[0]["requested"] >= 32
    assert len(levels[0]["steady"]["windows"]) == 2
    assert "drain" in (work / "serve.log").read_text()  # stopped by serve's own drain


def first_hour(tmp_path: Path, out: str) -> None:
    """What a new user does next, while serve keeps running, from another folder."""
    export = re.search(r"^try: glm5svc from any folder: export (.*)$", out, re.MULTILINE)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GLM5SVC_CONFIG")}
    for name, value in (part.split("=", 1) for part in shlex.split(export.group(1))):
        env[name] = value.replace("$PATH", env["PATH"])
    config = Path(env["GLM5SVC_CONFIG"])

    def glm5svc(*argv: str, program: tuple[str, ...] = ("glm5svc",)):
        return subprocess.run([*program, *argv], capture_output=True, text=True, cwd=tmp_path,
                              env=env, timeout=120)  # fmt: skip

    status = glm5svc("status")
    assert status.returncode == 0 and ": serving" in status.stdout, status.stderr
    python = re.search(r"^try: (\S+) -m glm5svc --config \S+ bench ", out, re.MULTILINE).group(1)
    assert glm5svc("status", program=(python, "-m", "glm5svc")).returncode == 0
    # The shipped reference recorded no input and output lengths: the gate says so before the
    # ladder runs, and names the gate that works, a run of the user's own as the baseline.
    gate = glm5svc("bench", "--fail-on-regression")
    assert gate.returncode == EXIT_CONFIG, gate.stderr
    assert "did not record its input and output lengths" in gate.stderr
    assert "glm5svc bench --fail-on-regression --baseline RUN_DIR" in gate.stderr
    said = shlex.split(re.search(r"^try: (\S+ -m glm5svc --config \S+ bench .*)$", out,
                                 re.MULTILINE).group(1))  # fmt: skip
    [own] = (config.parent / "results" / "bench").glob("*/summary.json")
    judged = glm5svc(*said[5:-2], "--baseline", str(own.parent), "--fail-on-regression",
                     "--json", "--results-dir", str(tmp_path / "results"))  # fmt: skip
    assert json.loads(judged.stdout)["verdicts"]["baseline"]["judged"] is True, judged.stderr
    # tune apply on the try-out's (JSON-style) configuration: block YAML it still reads.
    run_dir = tmp_path / "tune"
    run_dir.mkdir()
    (run_dir / "tuned.yaml").write_text("tuning: {max_running_requests: 64}\n")
    # Confirmed, measured nowhere known: --force.
    (run_dir / "summary.json").write_text('{"confirmed": true, "confirmation": "confirmed"}')
    applied = glm5svc("tune", "apply", str(run_dir), "--no-restart", "--force")
    assert applied.returncode == 0, applied.stderr
    lines = config.read_text().splitlines()
    assert lines[0].startswith("# Tuned by") and "  max_running_requests: 64" in lines
    assert max(len(line) for line in lines[1:]) < 100  # one key a line, not one flow line
    written = config.read_bytes()
    again = glm5svc("tune", "apply", str(run_dir), "--no-restart", "--force")
    assert again.returncode == 0 and "already applied" in again.stdout, again.stderr
    assert config.read_bytes() == written
    assert len(list(config.parent.glob(f"{config.name}.before-tune-*"))) == 1
    assert glm5svc("validate").returncode == 0
