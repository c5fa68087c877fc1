"""The launch plan: exact argv/env for the reference, and its rules."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from glm5svc.config import Config, config_from_mapping
from glm5svc.errors import ConfigError
from glm5svc.gpus import GpuFacts
from glm5svc.launch_plan import DEFAULT_SECRETS_FILE, build_launch_plan
from glm5svc.records import to_dict
from glm5svc.tune.render import SGLANG_PARSER_SCRIPT

SM120_X8 = GpuFacts(8, (12, 0), "580.95.05", ["NVIDIA RTX PRO 6000 Blackwell"] * 8, "nvml")
H200_X1 = GpuFacts(1, (9, 0), "580.159.04", ["NVIDIA H200"], "nvml")


def plan_for(mapping=None, gpus=SM120_X8, nsa_fix=None):
    config = config_from_mapping(mapping or {}) if mapping else Config()
    return build_launch_plan(config, gpus=gpus, nsa_fix_in_place=nsa_fix)


def pairs(argv):
    """Flags of an argv as {name: value or None}."""
    found, name = {}, None
    for token in argv:
        if token.startswith("--"):
            name = token
            found[name] = None
        elif name:
            found[name] = token
    return found


def test_reference_launch():
    plan = plan_for()
    assert plan.argv[:3] == ["/opt/glm5/venv/bin/python", "-m", "sglang.launch_server"]
    flags = pairs(plan.argv)
    assert flags["--tp-size"] == "8"
    assert "--tp" not in flags
    assert flags["--quantization"] == "modelopt_fp4"
    assert flags["--mem-fraction-static"] == "0.92"
    assert flags["--max-running-requests"] == "1024"
    assert flags["--attention-backend"] == "flashinfer"
    assert flags["--nsa-decode-backend"] == flags["--nsa-prefill-backend"] == "trtllm"
    assert flags["--moe-runner-backend"] == "flashinfer_cutlass"
    assert "--disable-cuda-graph" in flags
    assert "--disable-radix-cache" in flags
    assert "--enable-flashinfer-allreduce-fusion" not in flags
    assert "--num-continuous-decode-steps" not in flags
    caches = {k: v for k, v in plan.env.items() if k in CACHE_VARIABLES}
    assert {k: v for k, v in plan.env.items() if k not in caches} == {
        "PYTHONUNBUFFERED": "1",
        "NCCL_IB_DISABLE": "1",
        "NCCL_P2P_LEVEL": "SYS",
        "NCCL_MIN_NCHANNELS": "8",
        "OMP_NUM_THREADS": "8",
        "SAFETENSORS_FAST_GPU": "1",
        "CUDA_HOME": "/usr/local/cuda-12.8",
    }
    assert set(caches) == set(CACHE_VARIABLES)
    assert "--skip-server-warmup" in flags
    # The defaults listen on loopback only: nothing to warn about.
    assert plan.warnings == []
    assert flags["--host"] == "127.0.0.1"


def test_an_open_engine_without_a_key_is_refused_unless_the_config_says_so():
    with pytest.raises(ConfigError, match="allow_unauthenticated"):
        plan_for({"server": {"host": "0.0.0.0"}})
    plan = plan_for({"server": {"host": "0.0.0.0", "allow_unauthenticated": True}})
    assert len(plan.warnings) == 1 and "with no API key" in plan.warnings[0]


CACHE_VARIABLES = ("HOME", "XDG_CACHE_HOME", "FLASHINFER_WORKSPACE_BASE", "SGLANG_CACHE_DIR",
                   "SGLANG_DG_CACHE_DIR", "TRITON_CACHE_DIR",
                   "GLM5SVC_FLASHINFER_AUTOTUNE_DIR")  # fmt: skip


def test_the_caches_are_one_folder_for_every_start(tmp_path):
    """glm5.service and every tune trial read one configuration key, so they share the
    compile caches and FlashInfer's autotune results; unset: the user's own folder."""
    plan = plan_for({"server": {"cache_dir": str(tmp_path / "c")}})
    assert plan.env["SGLANG_CACHE_DIR"] == str(tmp_path / "c" / "sglang")
    assert plan.env["SGLANG_DG_CACHE_DIR"] == str(tmp_path / "c" / "deep_gemm")
    assert plan.env["HOME"] == str(tmp_path / "c" / "home")
    assert plan.env["GLM5SVC_FLASHINFER_AUTOTUNE_DIR"].startswith(str(tmp_path / "c"))
    assert all(plan.env[name].startswith(str(tmp_path / "c")) for name in CACHE_VARIABLES)
    default = plan_for()
    assert default.env["XDG_CACHE_HOME"].endswith("/.cache/glm5")
    assert "server.cache_dir unset" in next(e.reason for e in default.entries if e.name == "HOME")


def test_every_entry_has_a_reason():
    plan = plan_for()
    assert all(len(entry.reason) > 5 for entry in plan.entries)
    text = plan.explain()
    assert "--tp-size 8" in text and "tensor parallel size = GPUs used" in text


def test_radix_cache_follows_the_nsa_fix():
    assert "--disable-radix-cache" not in plan_for(nsa_fix=True).argv
    unknown = plan_for(nsa_fix=None)
    assert "could not be checked" in unknown.entries[-1].reason or any(
        "could not be checked" in e.reason for e in unknown.entries
    )
    assert (
        "--disable-radix-cache" in plan_for({"tuning": {"radix_cache": "off"}}, nsa_fix=True).argv
    )
    forced = plan_for({"tuning": {"radix_cache": "on"}}, nsa_fix=False)
    assert "--disable-radix-cache" not in forced.argv
    assert any("patch apply" in w for w in forced.warnings)


def test_tp_size_is_the_gpus_used():
    plan = plan_for({"gpus": {"expected_count": 4, "visible_devices": [4, 5, 6, 7]}})
    assert pairs(plan.argv)["--tp-size"] == "4"
    assert plan.env["CUDA_VISIBLE_DEVICES"] == "4,5,6,7"


def test_too_few_gpus_warns():
    plan = plan_for(gpus=GpuFacts(4, (12, 0), "580", [], "nvml"))
    assert any("NVML sees 4" in w for w in plan.warnings)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--enable-flashinfer-allreduce-fusion"], "236 tok/s"),
        (["--num-continuous-decode-steps", "4"], "read it nowhere"),
        (["--tp", "8"], "abbreviation"),
        (["--tp-size", "4"], "derived from the GPUs used"),
        (["8192"], "comes before any flag"),
    ],
)
def test_forbidden_extra_args(extra, message):
    with pytest.raises(ConfigError, match=message):
        plan_for({"server": {"extra_args": extra}})


def test_allreduce_fusion_is_allowed_off_sm120():
    plan = plan_for({"server": {"extra_args": ["--enable-flashinfer-allreduce-fusion"]}}, H200_X1)
    assert "--enable-flashinfer-allreduce-fusion" in plan.argv


def test_extra_args_merge_last_and_warn_on_override():
    plan = plan_for(
        {"server": {"extra_args": ["--mem-fraction-static=0.88", "--chunked-prefill-size", "8192"]}}
    )
    flags = pairs(plan.argv)
    assert flags["--mem-fraction-static"] == "0.88"
    assert plan.argv.count("--mem-fraction-static") == 1
    assert plan.argv[-2:] == ["--chunked-prefill-size", "8192"]
    assert any("--mem-fraction-static 0.92" in w for w in plan.warnings)


def test_env_overrides_warn():
    plan = plan_for({"server": {"env": {"NCCL_P2P_LEVEL": "PHB", "NCCL_DEBUG": "INFO"}}})
    assert plan.env["NCCL_P2P_LEVEL"] == "PHB" and plan.env["NCCL_DEBUG"] == "INFO"
    assert any("NCCL_P2P_LEVEL=SYS" in w for w in plan.warnings)


def test_api_key_never_in_argv(tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text("sk-very-secret\n")
    key_file.chmod(0o600)
    plan = plan_for({"server": {"api_key_file": str(key_file)}})
    assert not any("sk-very-secret" in token for token in plan.argv)
    assert "sk-very-secret" not in json.dumps(to_dict(plan.summary()))
    assert "sk-very-secret" not in plan.explain()
    assert plan.secret_files[DEFAULT_SECRETS_FILE] == "api-key: sk-very-secret\n"
    assert pairs(plan.argv)["--config"] == str(DEFAULT_SECRETS_FILE)


def test_unreadable_api_key_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="server.api_key_file"):
        plan_for({"server": {"api_key_file": str(tmp_path / "nope")}})


def test_non_sm120_gpus_are_named():
    plan = plan_for(gpus=H200_X1)
    assert any("these GPUs are SM90, not SM120 of target sm120" in n for n in plan.notes)


def test_shell_command_round_trips_through_a_shell():
    plan = plan_for({"server": {"extra_args": ["--chunked-prefill-size", "8192"]}})
    script = plan.shell_command().replace("env ", "printf '%s\\n' ", 1)
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    env_part = [f"{k}={v}" for k, v in plan.env.items()]
    assert out.stdout.splitlines() == env_part + plan.argv


def parsed_by_sglang(python, argvs):
    """({results per argv}, the parser's option strings, sglang's version)."""
    script = SGLANG_PARSER_SCRIPT
    result = subprocess.run(
        [str(python), str(script), json.dumps(argvs)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-2000:]
    found = json.loads(result.stdout.splitlines()[-1])
    return found["results"], set(found["options"]), found["version"]


def parser_dests(python):
    """{option string: dest} of the real parser of `python`'s sglang."""
    result = subprocess.run(
        [str(python), str(SGLANG_PARSER_SCRIPT), "[]"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.splitlines()[-1])["dests"]


def test_command_explain_on_example_config():
    from glm5svc.config import example_config_path

    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "glm5svc",
            "--config",
            str(example_config_path()),
            "command",
            "--explain",
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert "--tp-size 8" in result.stdout
    assert "NCCL_P2P_LEVEL SYS" in result.stdout or "NCCL_P2P_LEVEL=SYS" in result.stdout


def test_a_port_whose_grpc_port_is_past_65535_is_refused_where_sglang_refuses_it():
    """sglang 0.5.11 derives a gRPC port at port + 10000 and refuses to start past 65535
    (seen on the H200); 0.5.10.post1 has no such port."""
    with pytest.raises(ConfigError, match="55535"):
        plan_for({"server": {"port": 60011, "profile": "cu130"}})
    plan_for({"server": {"port": 55535, "profile": "cu130"}})
    plan_for({"server": {"port": 60011, "profile": "cu130", "env": {"SGLANG_GRPC_PORT": "9"}}})
    plan_for({"server": {"port": 60011, "profile": "cu128"}})


def test_validate_refuses_what_the_plan_refuses(tmp_path):
    path = tmp_path / "glm5.yaml"
    path.write_text("server: {port: 60011, profile: cu130, host: 127.0.0.1}\n")
    done = subprocess.run(
        [sys.executable, "-m", "glm5svc", "--config", str(path), "validate"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 78
    assert "55535" in done.stderr
