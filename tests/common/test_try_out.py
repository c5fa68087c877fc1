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
import socket
import subprocess
from pathlib import Path

import pytest

from glm5svc.errors import EXIT_CONFIG
from testkit import try_out
from testkit.bench_venv import build_bench_serving_venv

REPO = Path(__file__).resolve().parents[2]
KEPT = "serve keeps running"


@pytest.mark.timeout(600)
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
        env = first_hour(tmp_path, "".join(lines))
    finally:
        run.send_signal(signal.SIGINT)  # ^C, as the try-out says
        out = "".join(lines) + run.communicate(timeout=60)[0]
    assert run.returncode == 0, out
    tune_and_apply_twice(tmp_path, out, env)
    assert re.search(r"try: ready after [\d.]+ s; glm5svc status:\nglm5svc \S+: serving\n", out)
    # The venvs are counted apart, before serve starts: "ready after" is serve's start alone.
    assert re.search(r"try: venvs ready in [\d.]+ s\n(?:.*\n)*try: glm5svc serve \(", out)
    assert "ready: yes" in out and "KV pool: " in out
    # What it is: the CPU test engine, not a deployment's sglang on 8 GPUs.
    assert "engine: sglang_test_engine.py from server.command, not sglang.launch_server" in out
    assert "GPU(s)" not in out and "not installed" not in out
    assert "concurrency 4: " in out
    # Output piped: the bench's progress as lines on stderr, while it runs.
    assert "glm5svc bench: benchmarking concurrency 4 (1/1), warming up" in out
    assert "try: serve exited with 0; glm5svc status now exits 3" in out
    # What it says it runs is what it runs: the configuration whole, the bench command exactly.
    printed = out.split(f"try: configuration {config_path}:\n", 1)[1]
    assert printed.startswith(written)
    said = re.search(r"^try: (\S+ -m glm5svc --config \S+ bench .*)$", out, re.MULTILINE).group(1)
    # The configuration sizes the bench (ladder 4 16, 64 in, 16 out); --short runs its first level.
    assert shlex.split(said)[4:] == [config_path, "bench", "--ladder", "4"]
    assert json.loads(written)["benchmark"]["ladder"] == [4, 16]
    work = Path(re.search(r"everything is in (\S+)", out).group(1))
    [summary] = (work / "results" / "bench").glob("*/summary.json")
    levels = json.loads(summary.read_text())["levels"]
    assert [(lv["concurrency"], lv["error"]) for lv in levels] == [(4, None)]
    assert levels[0]["completed"] == levels[0]["requested"]
    assert len(levels[0]["steady"]["windows"]) == 3
    assert "drain" in (work / "serve.log").read_text()  # stopped by serve's own drain


def first_hour(tmp_path: Path, out: str) -> None:
    """What a new user does next, while serve keeps running, from another folder."""
    export = re.search(r"^try: glm5svc from any folder: export (.*)$", out, re.MULTILINE)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GLM5SVC_CONFIG")}
    for name, value in (part.split("=", 1) for part in shlex.split(export.group(1))):
        env[name] = value.replace("$PATH", env["PATH"])
    assert Path(env["GLM5SVC_CONFIG"]) == try_out.CONFIG  # the same path every run

    def glm5svc(*argv: str, program: tuple[str, ...] = ("glm5svc",)):
        return subprocess.run([*program, *argv], capture_output=True, text=True, cwd=tmp_path,
                              env=env, timeout=120)  # fmt: skip

    status = glm5svc("status")
    assert status.returncode == 0 and ": serving" in status.stdout, status.stderr
    python = re.search(r"^try: (\S+) -m glm5svc --config \S+ bench ", out, re.MULTILINE).group(1)
    assert glm5svc("status", program=(python, "-m", "glm5svc")).returncode == 0
    # The shipped reference recorded no input and output lengths: the gate says so before the
    # ladder runs, and names the gate that works, a run of the user's own as the baseline.
    gate = glm5svc("bench", "--fail-on-regression", "--baseline", "reference-8x-rtx-pro-6000")
    assert gate.returncode == EXIT_CONFIG, gate.stderr
    assert "did not record its input and output lengths" in gate.stderr
    assert "glm5svc bench --fail-on-regression --baseline RUN_DIR" in gate.stderr
    # The configuration names no baseline: a gate without one is refused before it runs.
    unanchored = glm5svc("bench", "--fail-on-regression")
    assert unanchored.returncode == EXIT_CONFIG and "with no baseline" in unanchored.stderr
    # Steady runs are sized to the window: a fixed prompt count is refused, not ignored.
    counted = glm5svc("bench", "--num-prompts", "32")
    assert counted.returncode == EXIT_CONFIG and "--window" in counted.stderr, counted.stderr
    said = shlex.split(re.search(r"^try: (\S+ -m glm5svc --config \S+ bench .*)$", out,
                                 re.MULTILINE).group(1))  # fmt: skip
    work = Path(re.search(r"its log: (\S+)/serve.log$", out, re.MULTILINE).group(1))
    [own] = (work / "results" / "bench").glob("*/summary.json")
    judged = glm5svc(*said[5:], "--baseline", str(own.parent), "--fail-on-regression",
                     "--json", "--results-dir", str(tmp_path / "results"))  # fmt: skip
    # One real pair of runs of the unchanged engine (the try-out's, then this): judged on
    # their steady windows, each figure judged or saying why not, the exit its verdict's
    # (tests/bench/test_regression_gate.py: at most 5 % of such pairs fail).
    # On a busy CI machine the windows can vary too much to judge: the gate then says so and
    # does not pass; it never calls noise a regression it could not see.
    verdict = json.loads(judged.stdout)["verdicts"]["baseline"]
    assert all(row["judged"] or row["why_not_judged"] for row in verdict["rows"])
    if verdict["judged"]:
        assert judged.returncode == (3 if verdict["regressed"] else 0), judged.stderr
    else:
        assert verdict["text"].startswith("cannot judge") and "windows vary" in verdict["text"]
        assert judged.returncode == 3 and not verdict["regressed"]
    return env


def tune_and_apply_twice(tmp_path: Path, out: str, env: dict[str, str]) -> None:
    """Once serve is stopped, the tune the try-out printed (sized to this machine), its
    overlay applied, and applied again: the second changes nothing."""
    said = re.search(r"^try: a tune sized to this machine, .*?: (glm5svc tune run .*)$", out,
                     re.MULTILINE).group(1)  # fmt: skip
    config = Path(env["GLM5SVC_CONFIG"])
    run_dir = tmp_path / "tune"

    def glm5svc(*argv: str):
        return subprocess.run(["glm5svc", *argv], capture_output=True, text=True, cwd=tmp_path,
                              env=env, timeout=280)  # fmt: skip

    tuned = glm5svc(*shlex.split(said)[1:], "--run-dir", str(run_dir), "--json")
    assert tuned.returncode == 0, tuned.stderr[-3000:]
    # The configuration's cap of 4 bounds 16 concurrent requests: 64 wins, confirmed.
    assert json.loads(tuned.stdout)["overlay"] == {"tuning": {"max_running_requests": 64}}
    applied = glm5svc("tune", "apply", str(run_dir), "--no-restart", "--json")
    assert applied.returncode == 0, applied.stderr
    lines = config.read_text().splitlines()
    assert lines[0].startswith("# Tuned by") and "  max_running_requests: 64" in lines
    assert max(len(line) for line in lines[1:]) < 100  # block YAML, one key a line
    backups = sorted(config.parent.glob(f"{config.name}.before-tune-*"))
    before = config.read_bytes()
    again = glm5svc("tune", "apply", str(run_dir), "--no-restart", "--json")
    assert again.returncode == 0, again.stderr
    answer = json.loads(again.stdout)
    assert answer["changed"] == {} and answer["already_applied"] is True
    assert any("already applied" in m for m in answer["messages"])
    assert config.read_bytes() == before
    assert sorted(config.parent.glob(f"{config.name}.before-tune-*")) == backups
    assert glm5svc("validate").returncode == 0


def test_the_try_out_keeps_its_ports_while_they_are_free(tmp_path, monkeypatch):
    """The export line of one run still finds the next: the same ports when free, new ones
    when something took them."""
    monkeypatch.setattr(try_out, "PORTS", tmp_path / "ports.json")
    first = try_out.stable_ports()
    assert try_out.stable_ports() == first
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", first["server"]))
        holder.listen()
        moved = try_out.stable_ports()
    assert moved["server"] != first["server"]
    assert json.loads((tmp_path / "ports.json").read_text()) == moved
