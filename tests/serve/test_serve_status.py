"""The health listener (/livez /readyz /status /metrics) and `glm5svc status` on a live service."""

from __future__ import annotations

import json
import subprocess
import sys

from glm5svc.commands.status import render
from glm5svc.records import DrainReport, StatusDocument
from tests.serve.conftest import REPO


def run_status(config_path, *args):
    return subprocess.run(
        [sys.executable, "-m", "glm5svc", "--config", str(config_path), "status", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=30,
    )


def test_listener_and_status_command(serve, tmp_path):
    process = serve("load=0.2")
    config_path = tmp_path / "glm5.yaml"
    process.wait_for(lambda: process.get("/livez")[0] == 200, 15, "/livez")
    process.wait_ready()
    assert process.get("/readyz") == (200, "ready: serving\n")

    status = process.status()
    assert status["phase"] == "serving" and status["engine_pid"] > 0
    assert status["launch_plan"]["argv"][1].endswith("sglang_test_engine.py")
    # No sglang at server.python here: the profile's pin, labelled as such.
    assert status["launch_plan"]["sglang_version"] == "0.5.10.post1 (profile, not installed)"
    assert status["diagnosis"] == [] and status["restarts_seen"] == 0
    assert status["probes"]["total"] >= 1
    # the launch plan's --mem-fraction-static 0.92 of the test engine's 1,200,000 tokens
    assert status["kv_pool_tokens"] == 1_104_000
    # Each phase is a message of its own (what `journalctl -u glm5` shows), in order.
    phases = [
        line.removeprefix("glm5svc: phase: ").split(" — ")[0]
        for line in process.output.splitlines()
        if line.startswith("glm5svc: phase: ")
    ]
    assert phases == ["loading weights", "autotune", "warm-up", "checking generation", "serving"]

    code, metrics = process.get("/metrics")
    assert code == 200
    assert "glm5svc_ready 1.0" in metrics
    assert 'glm5svc_phase{phase="serving"} 1.0' in metrics
    assert "glm5svc_startup_seconds" in metrics
    assert "glm5svc_probe_failures_total" in metrics

    result = run_status(config_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "serving" in result.stdout and "ready: yes" in result.stdout
    # server.command runs the test engine: the status names it, not a sglang it did not run.
    assert (
        "engine: sglang_test_engine.py from server.command, not sglang.launch_server"
        in result.stdout
    )
    assert "GPU(s)" not in result.stdout and "not installed" not in result.stdout
    assert "KV pool: 1104000 tokens" in result.stdout

    process.terminate()
    assert process.wait_exit(10) == 0
    last_run = json.loads((tmp_path / "results" / "serve-last-run.json").read_text())
    assert last_run["kv_pool_tokens"] == 1_104_000
    result = run_status(config_path)
    assert result.returncode == 3
    assert "not reachable" in result.stderr


def test_status_command_shows_the_previous_runs_diagnosis(serve, tmp_path):
    crashed = serve("load=0.2,crash=shared-experts")
    assert crashed.wait_exit(20) == 78
    process = serve("load=0.2,stall-at=50", load_stall_timeout_s=30)
    process.wait_for(lambda: process.status().get("load_percent") == 50, 15, "loading 50%")
    assert process.get("/readyz")[0] == 503
    result = run_status(tmp_path / "glm5.yaml")
    assert result.returncode == 1
    assert "loading weights: 50%" in result.stdout
    assert "KV pool" not in result.stdout  # not allocated yet
    assert "previous run: exit 78" in result.stdout
    assert "disable_shared_experts_fusion" in result.stdout


def test_status_names_the_phase_once_and_its_text_only_when_it_says_more():
    same = render(StatusDocument(True, "serving", version="1", status="serving"))
    assert same.splitlines()[0] == "glm5svc 1: serving"
    loading = render(StatusDocument(False, "loading", version="1", status="loading: weights 40%"))
    assert loading.splitlines()[0] == "glm5svc 1: loading — loading: weights 40%"


def test_status_shows_the_drain_as_the_real_h200_run_went():
    # sglang 0.5.11 on an H200: 64 running at the stop, 72 once 8 more reached the engine port.
    drain = DrainReport("SIGTERM", 7.5, 30.0, in_flight_at_start=64, most_in_flight=72, in_flight=8)
    text = render(StatusDocument(False, "draining", version="1", status="draining", drain=drain))
    assert "drain: 8 request(s) in flight (at the stop 64, most 72)" in text
