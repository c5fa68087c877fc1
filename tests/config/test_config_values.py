"""Values YAML 1.1 reads as something else: read as meant, or refused by validate (exit 78).

Whatever `validate` accepts must not crash `serve`: numbers are finite and bounded,
strings carry no NUL, environment names are names.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from glm5svc.cli import main
from glm5svc.config import parse_config
from glm5svc.errors import EXIT_CONFIG, ConfigError


@pytest.mark.parametrize(
    ("text", "check"),
    [
        ("tuning: {radix_cache: off}", lambda c: c.tuning.radix_cache == "off"),
        ("tuning: {radix_cache: on}", lambda c: c.tuning.radix_cache == "on"),
        ("tuning: {cuda_graph: yes}", lambda c: c.tuning.cuda_graph is True),
        ("tuning: {cuda_graph: off}", lambda c: c.tuning.cuda_graph is False),
        ("server: {env: {NCCL_IB_DISABLE: on}}", lambda c: c.server.env["NCCL_IB_DISABLE"] == "on"),
        ("server: {port: 30000}", lambda c: c.server.port == 30000),
        ("server: {port: 0x7530}", lambda c: c.server.port == 30000),
        ("service: {probe_interval_s: 1e1}", lambda c: c.service.probe_interval_s == 10.0),
    ],
)
def test_values_are_read_as_meant(text, check):
    assert check(parse_config(text))


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("server: {port: 030000}", "leading zero"),
        ("service: {probe_interval_s: 1e400}", "finite"),
        ("service: {wedge_window_s: .inf}", "finite"),
        ("service: {drain_timeout_s: .nan}", "finite"),
        ("service: {probe_timeout_s: 1e300}", "less than or equal"),
        ("benchmark: {input_len: 99999999999999999999}", "less than or equal"),
        ('model: {path: "/models/a\\0b"}', "NUL"),
        ('server: {command: ["python", "a\\0"]}', "NUL"),
        ("server: {env: {1ABC: x}}", "not a valid environment variable name"),
        ("server: {env: {A-B: x}}", "not a valid environment variable name"),
        ("server: {env: {A: x}, secret_env: [B]}", "server.env does not set"),
        ("service: {listen_port: 1:30}", "whole number"),
    ],
)
def test_values_that_mean_something_else_are_refused(text, said):
    with pytest.raises(ConfigError) as caught:
        parse_config(text)
    assert said in str(caught.value) + " ".join(caught.value.problems)


@pytest.mark.parametrize(
    "text",
    ["server: {port: 030000}", "service: {probe_interval_s: .inf}", 'model: {path: "/a\\0"}'],
)
def test_validate_refuses_them_with_exit_78(tmp_path, capsys, text):
    path = tmp_path / "glm5.yaml"
    path.write_text(text + "\n")
    assert main(["validate", str(path)]) == EXIT_CONFIG  # no traceback escapes
    assert str(path) in capsys.readouterr().err


def test_validate_warns_when_the_engine_is_open_without_a_key(tmp_path, capsys):
    path = tmp_path / "glm5.yaml"
    path.write_text("server: {host: 0.0.0.0}\n")
    assert main(["validate", str(path)]) == 0
    assert "WARNING: the engine listens on 0.0.0.0:30000 with no API key" in capsys.readouterr().err
    path.write_text("server: {host: 127.0.0.1}\n")
    assert main(["validate", str(path)]) == 0
    assert "WARNING" not in capsys.readouterr().err


@pytest.mark.parametrize("key", ["-starts-with-dash", "ünï", "tab\there"])
def test_validate_refuses_an_api_key_that_cannot_reach_sglang(tmp_path, capsys, key):
    key_file = tmp_path / "key"
    key_file.write_text(key)
    path = tmp_path / "glm5.yaml"
    path.write_text(f"server: {{api_key_file: {key_file}}}\n")
    assert main(["validate", str(path)]) == EXIT_CONFIG
    assert "server.api_key_file" in capsys.readouterr().err


def test_command_explain_warns_when_the_engine_is_open_without_a_key(tmp_path):
    path = tmp_path / "glm5.yaml"
    path.write_text("server: {host: 0.0.0.0}\n")
    run = subprocess.run(
        [sys.executable, "-m", "glm5svc", "--config", str(path), "command", "--explain"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "# WARNING: the engine listens on 0.0.0.0:30000 with no API key" in run.stdout
