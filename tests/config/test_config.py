"""Configuration: defaults reproduce the reference; every bad input gets a precise message."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from glm5svc.config import Config, example_config_path, load_config, parse_config
from glm5svc.errors import EXIT_CONFIG, ConfigError


def test_defaults_are_the_reference_deployment():
    config = Config()
    assert config.gpus.expected_count == 8
    assert config.gpus.compute_capability == "12.0"
    assert config.tuning.mem_fraction_static == 0.92
    assert config.tuning.max_running_requests == 1024
    assert config.tuning.cuda_graph is False
    assert config.gpus.target == "sm120"
    # null: the target's choice (sm120's are the reference flags: tests/plan/test_launch_plan)
    assert config.tuning.moe_runner_backend is None and config.tuning.quantization is None
    assert config.benchmark.ladder == [64, 256, 512, 1024, 2048]


def test_example_file_spells_out_the_defaults():
    assert load_config(example_config_path()) == Config()


def test_empty_file_means_defaults():
    assert parse_config("") == Config()


def test_legacy_integer_p2p_level_becomes_a_name():
    assert parse_config("gpus: {nccl_p2p_level: 5}").gpus.nccl_p2p_level == "SYS"
    assert parse_config("gpus: {nccl_p2p_level: pxb}").gpus.nccl_p2p_level == "PXB"


BAD_CONFIGS = [
    ("tuning: {mem_fraction_static: 1.5}", "tuning.mem_fraction_static", "less than 1"),
    ("tuning: {mem_fraction_static: fast}", "tuning.mem_fraction_static", "must be a number"),
    (
        "tuning: {max_runing_requests: 64}",
        "tuning.max_runing_requests",
        "did you mean 'max_running_requests'",
    ),
    ("tunning: {}", "tunning", "did you mean 'tuning'"),
    ("gpus: {nccl_p2p_level: FAST}", "gpus.nccl_p2p_level", "LOC, NVL, PIX, PXB, PHB, SYS"),
    ("gpus: {nccl_p2p_level: 9}", "gpus.nccl_p2p_level", "legacy integer 0-5"),
    ("gpus: {expected_count: 0}", "gpus.expected_count", "greater than or equal to 1"),
    ("gpus: {visible_devices: [0, 0], expected_count: 2}", "gpus", "lists a GPU twice"),
    ("gpus: {visible_devices: [0, 1, 2]}", "gpus", "expected_count is 8"),
    ("gpus: {compute_capability: sm120}", "gpus.compute_capability", "pattern"),
    ("server: {port: 70000}", "server.port", "less than or equal to 65535"),
    ("server: {command: []}", "server.command", "non-empty list"),
    ("server: {env: {'BAD NAME': x}}", "server.env", "not a valid environment variable"),
    ("server: {log_level: loud}", "server.log_level", "'debug', 'info', 'warning' or 'error'"),
    ("tuning: {radix_cache: maybe}", "tuning.radix_cache", "'auto', 'on' or 'off'"),
    ("tuning: {moe_runner_backend: magic}", "tuning.moe_runner_backend", "flashinfer_cutlass"),
    ("tuning: {quantization: fp8}", "tuning.quantization", "'modelopt_fp4' or 'none'"),
    ("gpus: {target: sm89}", "gpus.target", "known targets: sm100, sm120, sm90"),
    ("model: {load_format: npcache}", "model.load_format", "'auto', 'safetensors' or 'dummy'"),
    ("model: {path: models/glm5}", "model.path", "absolute path"),
    ("benchmark: {ladder: [256, 64]}", "benchmark.ladder", "strictly increasing"),
    ("benchmark: {ladder: []}", "benchmark.ladder", "at least one"),
    ("telemetry: {pcie_period_s: 0.5}", "telemetry.pcie_period_s", "less than or equal to 0.05"),
    ("service: {listen_port: 30000}", "line 1: service.listen_port", "needs its own port"),
    ("benchmark: {post_start: {ladder: [0]}}", "benchmark.post_start.ladder.0", "greater than 0"),
    ("- just\n- a list", "top level must be a mapping", ""),
    ("tuning: [unclosed", "not valid YAML", ""),
]


@pytest.mark.parametrize(("text", "where", "what"), BAD_CONFIGS, ids=[b[1] for b in BAD_CONFIGS])
def test_bad_config_names_key_and_problem(text, where, what):
    with pytest.raises(ConfigError) as caught:
        parse_config(text, source="glm5.yaml")
    rendered = caught.value.render()
    assert rendered.startswith(("glm5.yaml: ", "glm5.yaml, line "))
    assert where in rendered
    assert what in rendered
    assert caught.value.exit_status == EXIT_CONFIG


def test_every_problem_is_listed_at_once():
    with pytest.raises(ConfigError) as caught:
        parse_config("tuning: {mem_fraction_static: 2}\nserver: {port: 0}\nfoo: 1")
    assert len(caught.value.problems) == 3


def test_missing_file_names_the_fix(tmp_path):
    with pytest.raises(ConfigError, match="No such file or directory; create it.*--config"):
        load_config(tmp_path / "absent.yaml")


def test_environment_variable_selects_the_file(tmp_path, monkeypatch):
    path = tmp_path / "g.yaml"
    path.write_text("server: {port: 31000}\n")
    monkeypatch.setenv("GLM5SVC_CONFIG", str(path))
    assert load_config().server.port == 31000


def test_validate_command_exits_78_with_messages(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(textwrap.dedent("tuning:\n  mem_fraction_static: 3\n"))
    result = subprocess.run(
        [sys.executable, "-m", "glm5svc", "--config", str(path), "validate"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 78
    assert "tuning.mem_fraction_static" in result.stderr
    assert "Traceback" not in result.stderr


def test_api_key_file_is_read_once_for_everyone(tmp_path):
    from glm5svc.config import read_api_key

    key = tmp_path / "key"
    key.write_text("  sk-1\n")
    key.chmod(0o600)
    assert read_api_key(key) == "sk-1"
    assert read_api_key(None) is None
    key.write_text("\n")
    key.chmod(0o600)
    with pytest.raises(ConfigError, match="is empty"):
        read_api_key(key)
