"""Targets, stack profiles and models: the plan for other GPUs, other sglang versions, other
models; the installed sglang version; and each profile's plan against its own real parser."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from packaging.version import Version

from glm5svc.config import config_from_mapping, load_config
from glm5svc.errors import ConfigError
from glm5svc.facts import HostFacts
from glm5svc.gpus import GpuFacts
from glm5svc.launch_plan import DEFAULT_SECRETS_FILE, build_launch_plan
from glm5svc.model_info import read_model_facts
from glm5svc.profiles import SglangVersion, known_profiles, load_profile
from glm5svc.sglang_flags import FLAG_HISTORY, flag_exists, flag_name, version_problem
from glm5svc.targets import get_target, known_targets

from .test_launch_plan import SM120_X8, pairs, parsed_by_sglang

H200_X1 = GpuFacts(1, (9, 0), "580.159.04", ["NVIDIA H200"], "nvml")
EXAMPLES = Path(__file__).resolve().parents[2] / "glm5svc" / "data" / "examples"
LLAMA = {"architectures": ["LlamaForCausalLM"], "hidden_size": 512, "num_hidden_layers": 4}
# GLM-5's config.json shape, scaled down: DSA (index_topk) and routed experts.
GLM5 = {"architectures": ["GlmMoeDsaForCausalLM"], "index_topk": 64, "n_routed_experts": 8}


def model_dir(tmp_path: Path, config: dict, name: str = "model") -> Path:
    path = tmp_path / name
    path.mkdir()
    (path / "config.json").write_text(json.dumps(config))
    return path


def h200_config(model: Path, **overrides):
    """The shipped H200 example with its model path pointed at `model`."""
    data = yaml.safe_load((EXAMPLES / "h200-llama-tiny.yaml").read_text())
    data["model"]["path"] = str(model)
    for section, values in overrides.items():
        data.setdefault(section, {}).update(values)
    return config_from_mapping(data)


def installed(version: str) -> SglangVersion:
    return SglangVersion(version, True, "test")


def installed_sglang(config) -> tuple[SglangVersion, bool | None]:
    """The sglang and NSA fix the host facts read for `config` (as serve does)."""
    facts = HostFacts.read(config)
    return facts.sglang_version(load_profile(config.server.profile)), facts.nsa_fix_in_place


def test_target_table_loads_with_the_reference_as_default():
    assert known_targets() == ["sm100", "sm120", "sm90"]
    sm120, sm90 = get_target("sm120"), get_target("sm90")
    assert (sm120.compute_capability, sm120.gpu_count, sm120.fp4) == ("12.0", 8, True)
    assert (sm90.compute_capability, sm90.gpu_count, sm90.fp4) == ("9.0", 1, False)
    assert sm120.requires("uvm_disable_hmm") and not sm90.requires("uvm_disable_hmm")


def test_gpu_expectations_come_from_the_target():
    gpus = config_from_mapping({"gpus": {"target": "sm90"}}).gpus
    assert (gpus.expected_count, gpus.compute_capability) == (1, "9.0")
    gpus = config_from_mapping({"gpus": {"target": "sm90", "expected_count": 2}}).gpus
    assert (gpus.expected_count, gpus.compute_capability) == (2, "9.0")


def test_default_plan_is_the_reference_and_says_where_it_comes_from(tmp_path):
    config = config_from_mapping({"model": {"path": str(model_dir(tmp_path, GLM5))}})
    plan = build_launch_plan(config, gpus=SM120_X8, sglang=installed("0.5.10.post1"))
    flags = pairs(plan.argv)
    assert flags["--quantization"] == "modelopt_fp4"
    assert flags["--attention-backend"] == "flashinfer"
    assert flags["--nsa-decode-backend"] == flags["--nsa-prefill-backend"] == "trtllm"
    assert flags["--moe-runner-backend"] == "flashinfer_cutlass"
    assert "--disable-radix-cache" in flags
    text = plan.explain()
    assert "[target sm120]" in text and "[target sm120, sglang 0.5.10.post1]" in text
    assert "CUDA 12.8" in text and "[profile cu128]" in text


def test_h200_example_plan(tmp_path):
    config = h200_config(model_dir(tmp_path, LLAMA))
    plan = build_launch_plan(config, gpus=H200_X1, sglang=installed("0.5.11"))
    flags = pairs(plan.argv)
    assert flags["--tp-size"] == "1"
    assert flags["--attention-backend"] == "triton"
    assert flags["--load-format"] == "dummy"
    assert flags["--sampling-backend"] == "pytorch" and flags["--grammar-backend"] == "none"
    for absent in ("--quantization", "--moe-runner-backend", "--disable-radix-cache"):
        assert absent not in flags
    assert not [f for f in flags if f.startswith(("--nsa-", "--dsa-"))]
    assert plan.env["CUDA_HOME"] == "/usr/local/cuda-13.0"
    for name in ("NCCL_NVLS_ENABLE", "NVSHMEM_DISABLE_NVLS"):
        assert plan.env[name] == "0" if name == "NCCL_NVLS_ENABLE" else plan.env[name] == "1"
    assert plan.env["HF_HUB_OFFLINE"] == plan.env["TRANSFORMERS_OFFLINE"] == "1"
    assert plan.warnings == []
    text = plan.explain()
    assert "12.8" not in text
    assert "# sglang 0.5.11 on 1x SM90" in text
    assert "stack profile cu130: sglang 0.5.11, torch 2.11.0, CUDA 13.0" in text
    assert "target sm90" in text and "Hopper has no FP4 tensor cores" in text
    assert "LlamaForCausalLM has no DSA attention" in text


def test_sparse_attention_flags_only_for_a_dsa_model(tmp_path):
    dsa = config_from_mapping({"model": {"path": str(model_dir(tmp_path, GLM5, "glm"))}})
    dense = config_from_mapping({"model": {"path": str(model_dir(tmp_path, LLAMA, "llama"))}})
    # DeepseekV3 without index_topk is MLA, not DSA (sglang's is_deepseek_nsa rule).
    mla = {"architectures": ["DeepseekV3ForCausalLM"], "n_routed_experts": 8}
    v3 = config_from_mapping({"model": {"path": str(model_dir(tmp_path, mla, "v3"))}})
    flagged = {
        name: [f for f in build_launch_plan(c, gpus=SM120_X8).argv if f.startswith("--nsa-")]
        for name, c in (("dsa", dsa), ("dense", dense), ("v3", v3))
    }
    assert flagged == {
        "dsa": ["--nsa-decode-backend", "--nsa-prefill-backend"],
        "dense": [],
        "v3": [],
    }
    dense_plan = build_launch_plan(dense, gpus=SM120_X8)
    assert "--moe-runner-backend" not in dense_plan.argv  # Llama has no experts
    assert "--disable-radix-cache" not in dense_plan.argv


def test_unreadable_model_config_falls_back_to_glm5_and_says_so(tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    for path in (tmp_path / "absent", broken):
        facts = read_model_facts(path)
        assert not facts.from_config and facts.sparse_attention
        assert str(path / "config.json") in facts.source
        plan = build_launch_plan(config_from_mapping({"model": {"path": str(path)}}), SM120_X8)
        assert "--nsa-decode-backend" in plan.argv
        assert any("planned for the reference model GLM-5" in n for n in plan.notes)


def test_sparse_flags_are_spelt_as_the_installed_sglang_spells_them(tmp_path):
    config = config_from_mapping({"model": {"path": str(model_dir(tmp_path, GLM5))}})
    for version, prefix in (("0.5.10.post1", "--nsa-"), ("0.5.11", "--nsa-"), ("0.5.13", "--dsa-")):
        plan = build_launch_plan(config, gpus=SM120_X8, sglang=installed(version))
        sparse = [f for f in plan.argv if f.endswith(("-decode-backend", "-prefill-backend"))]
        assert sparse == [f"{prefix}decode-backend", f"{prefix}prefill-backend"], version
        assert f"[target sm120, sglang {version}]" in plan.explain()


def test_flag_table_answers():
    assert flag_name("sparse_decode_backend", "0.5.12.post1") == "--nsa-decode-backend"
    assert flag_name("sparse_decode_backend", "0.5.20") == "--dsa-decode-backend"
    assert flag_exists("--nsa-prefill-backend", "0.5.19")
    assert not flag_exists("--nsa-prefill-backend", "0.5.20")
    assert not flag_exists("--fp4-gemm-backend", "0.5.7") and flag_exists(
        "--fp4-gemm-backend", "0.5.8"
    )
    assert "removed in sglang 0.5.20" in version_problem("--cuda-graph-max-bs", "0.5.21")
    assert version_problem("--enable-metrics", "0.5.21") is None


def test_extra_args_that_the_installed_sglang_lacks_are_refused():
    config = config_from_mapping({"server": {"extra_args": ["--cuda-graph-max-bs", "64"]}})
    build_launch_plan(config, gpus=SM120_X8, sglang=installed("0.5.11"))
    with pytest.raises(ConfigError, match="--cuda-graph-max-bs was removed in sglang 0.5.20"):
        build_launch_plan(config, gpus=SM120_X8, sglang=installed("0.5.20"))


def test_deprecated_flag_is_noted_for_newer_sglang():
    plan = build_launch_plan(config_from_mapping({}), gpus=SM120_X8, sglang=installed("0.5.14"))
    assert any("--disable-cuda-graph is deprecated from sglang 0.5.14" in n for n in plan.notes)


def test_fp4_on_a_gpu_without_fp4_is_refused_by_validation(tmp_path):
    with pytest.raises(ConfigError) as caught:
        h200_config(model_dir(tmp_path, LLAMA), tuning={"quantization": "modelopt_fp4"})
    assert "modelopt_fp4 needs FP4 tensor cores, which target sm90 (SM90) lacks" in (
        caught.value.render()
    )


def test_config_choices_win_over_the_target(tmp_path):
    config = h200_config(
        model_dir(tmp_path, GLM5), tuning={"attention_backend": "fa3", "nsa_decode_backend": "fa3"}
    )
    plan = build_launch_plan(config, gpus=H200_X1, sglang=installed("0.5.11"))
    flags = pairs(plan.argv)
    assert flags["--attention-backend"] == "fa3" and flags["--nsa-decode-backend"] == "fa3"
    assert "--nsa-prefill-backend" not in flags  # sm90 leaves it to sglang
    assert any("--nsa-prefill-backend left to sglang" in n for n in plan.notes)


def fake_site(tmp_path: Path, version: str) -> Path:
    """A site-packages directory with an sglang package and its dist-info metadata."""
    site = tmp_path / "site"
    (site / "sglang").mkdir(parents=True)
    (site / "sglang" / "__init__.py").write_text("raise ImportError('must not be imported')\n")
    info = site / f"sglang-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    return site


def test_version_is_read_from_the_target_environment(tmp_path):
    site = fake_site(tmp_path, "0.5.11")
    config = config_from_mapping(
        {
            "server": {
                "profile": "cu128",
                "python": sys.executable,
                "env": {"PYTHONPATH": str(site)},
            }
        }
    )
    sglang = installed_sglang(config)[0]
    assert (sglang.version, sglang.installed, sglang.label) == ("0.5.11", True, "0.5.11")
    assert str(site) in sglang.detail
    plan = build_launch_plan(config, gpus=SM120_X8, sglang=sglang)
    assert plan.summary().sglang_version == "0.5.11"
    assert plan.explain().startswith("# sglang 0.5.11 on 8x SM120")


def test_version_is_read_from_a_venvs_own_metadata(tmp_path):
    """server.python of a venv (no PYTHONPATH): its site-packages' sglang dist-info."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python3*/site-packages"))
    fake = fake_site(tmp_path, "0.5.11")
    for entry in fake.iterdir():
        entry.rename(site / entry.name)
    config = config_from_mapping({"server": {"python": str(venv / "bin" / "python")}})
    sglang = installed_sglang(config)[0]
    assert (sglang.version, sglang.installed) == ("0.5.11", True)
    assert str(site) in sglang.detail


def test_version_falls_back_to_the_profile_labelled(tmp_path):
    config = config_from_mapping({"server": {"profile": "cu130", "python": str(tmp_path / "py")}})
    sglang, nsa_fix = installed_sglang(config)
    assert (sglang.version, sglang.installed, nsa_fix) == ("0.5.11", False, None)
    assert sglang.label == "0.5.11 (profile, not installed)"
    plan = build_launch_plan(config, gpus=SM120_X8, sglang=sglang)
    assert plan.summary().sglang_version == "0.5.11 (profile, not installed)"
    assert "sglang 0.5.11 (profile, not installed) on 8x SM120" in plan.explain()


def test_command_explain_on_the_h200_example_runs(tmp_path):
    config = tmp_path / "h200.yaml"
    data = yaml.safe_load((EXAMPLES / "h200-llama-tiny.yaml").read_text())
    data["model"]["path"] = str(model_dir(tmp_path, LLAMA))
    config.write_text(yaml.safe_dump(data))
    load_config(config)
    result = subprocess.run(
        [sys.executable, "-m", "glm5svc", "--config", str(config), "command", "--explain"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert "--attention-backend triton" in result.stdout and "12.8" not in result.stdout


def reference_plan(profile: str, version: str, tmp_path: Path):
    """The default (sm120, GLM-5) plan with every optional part used: API key file,
    tokenizer path, extra_args, shared-experts fusion off."""
    key_file = tmp_path / "key"
    key_file.write_text("k")
    key_file.chmod(0o600)
    config = config_from_mapping(
        {
            "model": {"tokenizer_path": "/models/tok"},
            "server": {
                "profile": profile,
                "api_key_file": str(key_file),
                "extra_args": ["--chunked-prefill-size", "8192"],
            },
            "tuning": {"disable_shared_experts_fusion": True},
        }
    )
    return build_launch_plan(config, gpus=SM120_X8, sglang=installed(version))


def tp_size(parsed: dict) -> int:
    """The tensor parallel size: dest tensor_parallel_size up to 0.5.11, tp_size in 0.5.23."""
    return parsed["tensor_parallel_size"] if "tensor_parallel_size" in parsed else parsed["tp_size"]


def assert_reference_parsed(parsed: dict, version: str) -> None:
    assert tp_size(parsed) == 8
    assert parsed["quantization"] == "modelopt_fp4"
    assert parsed["mem_fraction_static"] == 0.92
    assert parsed["max_running_requests"] == 1024
    if Version(version) >= Version("0.5.17"):  # sglang's own SM120 DSA path (targets.yaml)
        assert parsed["attention_backend"] == "dsa"
        assert parsed["dsa_decode_backend"] == parsed["dsa_prefill_backend"]
        assert parsed["dsa_decode_backend"] == "flashinfer_sparse_mla"
    else:
        assert parsed["attention_backend"] == "flashinfer"
        assert parsed["nsa_decode_backend"] == parsed["nsa_prefill_backend"] == "trtllm"
    assert parsed["moe_runner_backend"] == "flashinfer_cutlass"
    assert parsed["disable_cuda_graph"] is True
    assert parsed["disable_radix_cache"] is True
    assert parsed["enable_metrics"] is True
    assert parsed["disable_shared_experts_fusion"] is True
    assert parsed["chunked_prefill_size"] == 8192
    assert parsed["served_model_name"] == "glm-5"
    assert parsed["model_path"] == "/models/GLM-5-NVFP4"
    assert parsed["tokenizer_path"] == "/models/tok"
    assert parsed["config"] == str(DEFAULT_SECRETS_FILE)
    assert parsed["enable_flashinfer_allreduce_fusion"] is False


def test_every_profile_plan_is_accepted_by_its_own_sglang_parser(sglang_parser_pythons, tmp_path):
    """For each profile, with one import of that version's real parser: the reference
    (sm120, GLM-5) plan and the H200 Llama plan parse to the planned values, `--tp` is
    refused, and the flag table agrees with the parser about every flag it lists."""
    llama = model_dir(tmp_path, LLAMA, "llama")
    assert set(sglang_parser_pythons) == set(known_profiles())
    for profile_name, python in sglang_parser_pythons.items():
        version = load_profile(profile_name).sglang_version
        reference = reference_plan(profile_name, version, tmp_path)
        h200 = h200_config(llama, server={"profile": profile_name})
        h200_plan = build_launch_plan(h200, gpus=H200_X1, sglang=installed(version))
        (ours, dense, abbreviated), options, parsed_version = parsed_by_sglang(
            python,
            [reference.argv[3:], h200_plan.argv[3:], ["--model-path", "/m", "--tp", "8"]],
        )
        assert parsed_version == version
        assert "error" not in ours, (profile_name, ours)
        assert_reference_parsed(ours["dests"], version)
        assert "error" not in dense, (profile_name, dense)
        assert dense["dests"]["attention_backend"] == "triton"
        assert dense["dests"]["load_format"] == "dummy"
        assert dense["dests"]["quantization"] is None
        assert tp_size(dense["dests"]) == 1
        assert dense["dests"]["sampling_backend"] == "pytorch"
        assert "error" in abbreviated, "allow_abbrev=False must refuse --tp"
        for flag in FLAG_HISTORY:
            assert flag_exists(flag, version) == (flag in options), (version, flag)
