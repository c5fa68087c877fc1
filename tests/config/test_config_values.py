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


def test_an_engine_open_without_a_key_is_refused_by_validate_command_and_serve(tmp_path, capsys):
    path = tmp_path / "glm5.yaml"
    path.write_text("server: {host: 0.0.0.0}\n")
    for argv in (["validate", str(path)], ["--config", str(path), "command"]):
        assert main(argv) == EXIT_CONFIG
        said = capsys.readouterr().err
        assert "0.0.0.0:30000 with no API key" in said and "allow_unauthenticated" in said
    run = subprocess.run(
        [sys.executable, "-m", "glm5svc", "--config", str(path), "serve"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == EXIT_CONFIG and "allow_unauthenticated" in run.stderr
    path.write_text("server: {host: 0.0.0.0, allow_unauthenticated: true}\n")
    assert main(["validate", str(path)]) == 0
    assert "WARNING: the engine listens on 0.0.0.0:30000 with no API key" in capsys.readouterr().err
    path.write_text("server: {host: 127.0.0.1}\n")
    assert main(["validate", str(path)]) == 0
    assert "WARNING" not in capsys.readouterr().err


def test_a_key_file_others_can_read_is_refused(tmp_path, capsys):
    key_file = tmp_path / "key"
    key_file.write_text("sk-1\n")
    key_file.chmod(0o644)
    path = tmp_path / "glm5.yaml"
    path.write_text(f"server: {{host: 0.0.0.0, api_key_file: {key_file}}}\n")
    for argv in (["validate", str(path)], ["--config", str(path), "command"]):
        assert main(argv) == EXIT_CONFIG
        assert "mode 0644" in capsys.readouterr().err
    key_file.chmod(0o640)
    assert main(["validate", str(path)]) == 0


@pytest.mark.parametrize("key", ["-starts-with-dash", "ünï", "tab\there"])
def test_validate_refuses_an_api_key_that_cannot_reach_sglang(tmp_path, capsys, key):
    key_file = tmp_path / "key"
    key_file.write_text(key)
    key_file.chmod(0o600)
    path = tmp_path / "glm5.yaml"
    path.write_text(f"server: {{api_key_file: {key_file}}}\n")
    assert main(["validate", str(path)]) == EXIT_CONFIG
    assert "server.api_key_file" in capsys.readouterr().err


def test_command_explain_warns_when_the_engine_is_open_without_a_key_on_purpose(tmp_path):
    path = tmp_path / "glm5.yaml"
    path.write_text("server: {host: 0.0.0.0, allow_unauthenticated: true}\n")
    run = subprocess.run(
        [sys.executable, "-m", "glm5svc", "--config", str(path), "command", "--explain"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "# WARNING: the engine listens on 0.0.0.0:30000 with no API key" in run.stdout


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("server:\n  host: 127.0.0.1\n\n  port: true\n", "line 4: server.port: must be a whole"),
        ("server: {port: 1e3}", "line 1: server.port: must be a whole number"),
        ("gpus:\n  expected_count: 8.0\n", "line 2: gpus.expected_count: must be a whole"),
        ("tuning:\n  omp_num_threads: yes\n", "line 2: tuning.omp_num_threads: must be a whole"),
        ("telemetry:\n  period_s: true\n", "line 2: telemetry.period_s: must be a number"),
        ("service:\n  drain_timeout_s: 0\n", "line 2: service.drain_timeout_s: must be greater"),
        ("service:\n  probe_interval_s: 0.0001\n", "greater than or equal to 0.05"),
        ("multinode: {node_rank: 99}", "less than or equal to 63"),
        (
            "server:\n  port: 1\n  port: 2\n",
            "line 3: the key 'port' is given twice (lines 2 and 3)",
        ),
        ("a: &a {b: *a}\n", "line 1: an alias refers to a value that contains it"),
        ("server: {port: !!binary MQ==}", "the tag !!binary is not used"),
        ("server: {port: !port 1}", "the tag '!port' is not known here"),
        ("server: {1: x}", "the key 1 is read as a number, not as a name"),
        ("tuning: {cuda_graph: !!bool yes}", "'yes' is not true or false"),
        ("tuning: {quantization: !!null none}", "'none' is not null"),
        ("server: {port: !!int yes}", "'yes': not a whole number"),
        ("model: {served_name: 2026-01-02}", None),
        ("[" * 200 + "]" * 200, "nested"),
        ('model: {served_name: "\\ud800"}', "half of a UTF-16 pair"),
        ("x: " + "9" * 5000, "too many digits"),
    ],
)
def test_read_as_written_or_refused_with_the_line(text, said):
    if said is None:  # a date stays the text written
        assert parse_config(text).model.served_name == "2026-01-02"
        return
    with pytest.raises(ConfigError) as caught:
        parse_config(text, source="glm5.yaml")
    rendered = caught.value.render()
    assert rendered.startswith("glm5.yaml")
    assert said in rendered


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("fleet: {replicas: [ftp://x]}", "'ftp://x' is not an http(s):// URL"),
        ("model: {path: models/x}", "must be an absolute path (got 'models/x')"),
        ("multinode: {nnodes: 2, dist_init_addr: x}", "'x' is not host:port"),
    ],
)
def test_the_value_is_said_once(text, said):
    with pytest.raises(ConfigError) as caught:
        parse_config(text, source="glm5.yaml")
    rendered = caught.value.render()
    assert said in rendered
    assert rendered.count("(got ") <= 1 and "(got 'x') (got 'x')" not in rendered


def test_a_mapping_from_code_has_no_line_but_names_the_key():
    from glm5svc.config import config_from_mapping

    with pytest.raises(ConfigError) as caught:
        config_from_mapping({"server": {"port": True}}, "trial")
    assert caught.value.problems[0].startswith("server.port: must be a whole number")


def test_merge_keys_still_work_and_name_their_lines():
    text = "x: &base {port: 31000}\nserver: {<<: *base, host: 127.0.0.1}\n"
    with pytest.raises(ConfigError) as caught:  # x is no section
        parse_config(text, source="glm5.yaml")
    assert caught.value.problems == [
        "line 1: x: unknown key (allowed here: model, server, gpus, tuning, service, "
        "telemetry, benchmark, fleet, multinode, monitoring)"
    ]


def test_bench_compare_on_a_file_that_is_not_utf8_is_exit_78(tmp_path, capsys):
    bad = tmp_path / "summary.json"
    bad.write_bytes(b'{"levels": "caf\xe9"}')
    status = main(["bench", "compare", str(bad), "reference-8x-rtx-pro-6000", "--threshold", "5"])
    assert status == EXIT_CONFIG
    err = capsys.readouterr().err
    assert f"baseline {bad}: not JSON (not UTF-8: byte 0xe9 at offset 15)" in err
