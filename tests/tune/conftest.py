"""A tune against the test engine: its configuration, space and a stand-in systemctl."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from testkit.bench_venv import build_bench_serving_venv, make_tokenizer
from testkit.engine import TEST_ENGINE, free_port

# A fake systemctl: is-active / stop / start / restart of one unit, state in a file, every
# call logged, so take-over and restore are checked without systemd as PID 1.
FAKE_SYSTEMCTL = """#!/bin/sh
state="$FAKE_SYSTEMCTL_DIR/state"; echo "$*" >> "$FAKE_SYSTEMCTL_DIR/calls"
case "$1" in
  is-active) [ "$(cat "$state" 2>/dev/null)" = active ] ;;
  stop) echo inactive > "$state" ;;
  start|restart) echo active > "$state" ;;
  *) exit 1 ;;
esac
"""


@pytest.fixture(scope="session")
def bench_python() -> str:
    return str(build_bench_serving_venv())


@pytest.fixture(scope="session")
def tokenizer_dir(bench_python, tmp_path_factory) -> Path:
    return make_tokenizer(bench_python, tmp_path_factory.mktemp("tokenizer"))


def write_tune_config(tmp_path: Path, bench_python: str, tokenizer: Path, mode: str) -> Path:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(
        json.dumps({"architectures": ["Qwen3MoeForCausalLM"], "num_experts": 8})
    )
    config = {
        "model": {"path": str(model), "tokenizer_path": str(tokenizer), "served_name": "glm-5"},
        "server": {
            "host": "127.0.0.1",
            "port": free_port(),
            # Long steps: the model's sleeps, not this machine's CPU, set the throughput.
            "command": [
                sys.executable,
                str(TEST_ENGINE),
                "--test-mode",
                mode,
                "--step-base-ms",
                "50",
                "--step-per-req-ms",
                "1",
            ],  # fmt: skip
        },
        "tuning": {
            "max_running_requests": 8,
            "moe_runner_backend": "triton",
            "mem_fraction_static": 0.85,
        },
        "service": {
            "listen_host": "127.0.0.1",
            "listen_port": free_port(),
            "run_preflight": False,
            "probe_interval_s": 0.3,
            "drain_timeout_s": 5,
            "results_dir": str(tmp_path / "results"),
        },
        "telemetry": {"enabled": False},
        # A tune measures windows under its own continuous load whatever benchmark.steady
        # says; the tests that run one shorten the windows and the warm-up themselves.
        "benchmark": {"python": bench_python, "post_start": {"enabled": False}, "steady": False},
    }
    path = tmp_path / "glm5.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def write_space(tmp_path: Path, knobs: list[dict]) -> Path:
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump({"knobs": knobs}))
    return path


@pytest.fixture
def fake_systemctl(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "fake-systemctl"
    folder.mkdir()
    script = folder / "systemctl"
    script.write_text(FAKE_SYSTEMCTL)
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:{Path(sys.executable).parent}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_SYSTEMCTL_DIR", str(folder))
    return folder
