"""validate finds what only serve would otherwise find, lists every stage's problems in one
run, prints the warnings `command` prints, and never blocks on a special file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from glm5svc.cli import main
from glm5svc.errors import EXIT_CONFIG

LLAMA = {"architectures": ["LlamaForCausalLM"], "hidden_size": 512}


def run_cli(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """The command in its own process: a FIFO that blocked it would hit the timeout."""
    return subprocess.run(
        [sys.executable, "-m", "glm5svc", *argv], capture_output=True, text=True, timeout=timeout
    )


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def dense_model(tmp_path: Path) -> Path:
    folder = tmp_path / "llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA))
    return folder


def test_a_fifo_as_the_configuration_is_refused_at_once(tmp_path):
    fifo = tmp_path / "glm5.yaml"
    os.mkfifo(fifo)
    for argv in (["validate", str(fifo)], ["--config", str(fifo), "command"]):
        done = run_cli(*argv, timeout=30)
        assert done.returncode == EXIT_CONFIG, done.stderr
        assert "FIFO" in done.stderr and str(fifo) in done.stderr
        assert "Traceback" not in done.stderr


def test_a_fifo_as_the_key_file_is_refused_at_once(tmp_path):
    fifo = tmp_path / "key"
    os.mkfifo(fifo, 0o600)
    config = write(tmp_path / "glm5.yaml", f"server: {{api_key_file: {fifo}}}\n")
    done = run_cli("validate", str(config), timeout=30)
    assert done.returncode == EXIT_CONFIG and "server.api_key_file" in done.stderr
    assert "FIFO" in done.stderr


def test_a_folder_as_the_configuration_is_refused(tmp_path, capsys):
    assert main(["validate", str(tmp_path)]) == EXIT_CONFIG
    assert ": Is a directory; give the configuration file" in capsys.readouterr().err


def test_an_empty_config_path_is_a_usage_error(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("GLM5SVC_CONFIG", str(write(tmp_path / "ok.yaml", "{}\n")))
    assert main(["--config", "", "validate"]) == 2
    assert "the path is empty" in capsys.readouterr().err
    assert main(["validate", ""]) == 2
    assert main(["--config", "", "command", "--json"]) == 2
    document = json.loads(capsys.readouterr().out)
    assert document["ok"] is False and document["exit_status"] == 2


def test_a_relative_key_file_is_refused_naming_the_working_directory(tmp_path, capsys):
    config = write(tmp_path / "glm5.yaml", "server: {api_key_file: keys/api-key}\n")
    assert main(["validate", str(config)]) == EXIT_CONFIG
    said = capsys.readouterr().err
    assert "server.api_key_file" in said and "/var/lib/glm5" in said and "absolute" in said


@pytest.mark.parametrize("kind", ["file", "loop", "dangling", "no-config-json"])
def test_a_model_path_that_cannot_be_a_checkpoint_is_refused(tmp_path, capsys, kind):
    model = tmp_path / "model"
    if kind == "file":
        model.write_text("weights?")
    elif kind == "loop":
        model.symlink_to(tmp_path / "other")
        (tmp_path / "other").symlink_to(model)
    elif kind == "dangling":
        model.symlink_to(tmp_path / "nowhere")
    else:
        model.mkdir()
    config = write(tmp_path / "glm5.yaml", f"model: {{path: {model}}}\n")
    assert main(["validate", str(config)]) == EXIT_CONFIG
    said = capsys.readouterr().err
    expected = {
        "file": "Not a directory (it is a regular file); give the checkpoint's folder",
        "loop": "Too many levels of symbolic links",
        "dangling": "No such file or directory (a symbolic link to",
        "no-config-json": "has no config.json",
    }[kind]
    assert "model.path" in said and expected in said
    assert main(["--config", str(config), "command"]) == EXIT_CONFIG
    assert expected in capsys.readouterr().err


def test_moe_only_settings_on_a_dense_model_are_a_warning_in_validate_and_command(tmp_path, capsys):
    model = dense_model(tmp_path)
    config = write(
        tmp_path / "glm5.yaml",
        f"model: {{path: {model}}}\ngpus: {{target: sm90, expected_count: 1}}\n"
        "tuning: {quantization: none, moe_runner_backend: triton, nsa_decode_backend: fa3}\n",
    )
    assert main(["validate", str(config)]) == 0
    said = capsys.readouterr().err
    assert "WARNING: tuning.moe_runner_backend is set but LlamaForCausalLM" in said
    assert "WARNING: tuning.nsa_decode_backend is set" in said
    assert main(["--config", str(config), "command"]) == 0
    printed = capsys.readouterr().out
    for line in said.splitlines():
        assert f"# {line}" in printed  # the same warnings, as `command` prints them


def test_validate_lists_the_problems_of_every_stage_in_one_run(tmp_path, capsys):
    model = tmp_path / "model"
    model.write_text("not a folder")
    key = tmp_path / "key"
    key.write_text("sk-1\n")
    key.chmod(0o644)
    config = write(
        tmp_path / "glm5.yaml",
        f"model: {{path: {model}}}\nserver: {{api_key_file: {key}}}\n"
        "benchmark: {baseline: no-such-baseline}\n",
    )
    assert main(["validate", str(config)]) == EXIT_CONFIG
    said = capsys.readouterr().err
    assert "3 problems" in said
    assert "Not a directory" in said and "mode 0644" in said and "no-such-baseline" in said


@pytest.mark.parametrize("host", ["0.0.0.0 ", "my host", "[::1]", "10.0.0.1:30000", "999.1.1.1"])
def test_a_listen_host_that_is_no_address_is_refused(tmp_path, capsys, host):
    config = write(tmp_path / "glm5.yaml", f"service: {{listen_host: '{host}'}}\n")
    assert main(["validate", str(config)]) == EXIT_CONFIG
    assert "service.listen_host" in capsys.readouterr().err
    done = run_cli("--config", str(config), "status")
    assert done.returncode == EXIT_CONFIG and "Traceback" not in done.stderr


BASELINE = Path(__file__).parents[2] / "glm5svc/data/baselines/reference-8x-rtx-pro-6000.json"


def test_a_regression_gate_with_nothing_to_compare_fails(tmp_path, capsys):
    empty = json.loads(BASELINE.read_text())
    empty["levels"] = {}
    path = write(tmp_path / "empty.json", json.dumps(empty))
    argv = ["bench", "compare", str(path), "reference-8x-rtx-pro-6000"]
    assert main([*argv, "--json"]) == 0  # without the gate: a comparison that says so
    capsys.readouterr()
    assert main([*argv, "--fail-on-regression", "--json"]) == 3
    document = json.loads(capsys.readouterr().out)
    assert document["ok"] is False and document["exit_status"] == 3
    assert "the gate cannot" in document["error"] and document["rows"] == []


def test_preflight_json_failure_has_the_envelope_of_every_failure():
    done = run_cli("--config", "/dev/null", "preflight", "--json", timeout=120)
    assert done.returncode == 1
    document = json.loads(done.stdout)
    assert document["ok"] is False and document["exit_status"] == 1
    assert document["error"].startswith("preflight failed") and document["problems"]
    assert document["checks"]  # the report's own fields stay beside them


def test_tune_run_refuses_what_validate_refuses_before_any_trial(tmp_path):
    config = write(tmp_path / "glm5.yaml", "server: {host: 0.0.0.0}\n")
    said = run_cli("validate", str(config)).stderr
    done = run_cli(
        "--config", str(config), "tune", "run", "--run-dir", str(tmp_path / "t"), "--json"
    )
    assert done.returncode == EXIT_CONFIG
    assert json.loads(done.stdout)["error"] in said
    assert not (tmp_path / "t").exists()
