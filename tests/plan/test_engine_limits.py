"""The known SM120 failures of GLM-5-class (DSA) models, refused by the plan with the fix,
by `validate` alike, and left out of the tune's space; the decode graph cap on 96 GB cards."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from glm5svc.commands.validate import check_config
from glm5svc.config import config_from_mapping, load_config
from glm5svc.engine_limits import EngineLimitError
from glm5svc.facts import HostFacts
from glm5svc.gpus import GpuFacts
from glm5svc.launch_plan import build_launch_plan
from glm5svc.profiles import SglangVersion
from glm5svc.tune.render import Renderer
from glm5svc.tune.space import apply_candidate, load_space

RTX_PRO_6000 = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
SM120_96GB = GpuFacts(8, (12, 0), "590.44", [RTX_PRO_6000] * 8, "nvml", memory_mib=97887)
GLM5 = {"architectures": ["GlmMoeDsaForCausalLM"], "index_topk": 64, "n_routed_experts": 8}
DSV32 = {"architectures": ["DeepseekV32ForCausalLM"], "index_topk": 64, "n_routed_experts": 8}
CURRENT = ("cu130-0.5.23", "0.5.23")
SPARSE_MLA = {
    "attention_backend": "dsa",
    "nsa_decode_backend": "flashinfer_sparse_mla",
    "nsa_prefill_backend": "flashinfer_sparse_mla",
}


@pytest.fixture
def glm5(tmp_path) -> Path:
    path = tmp_path / "glm5"
    path.mkdir()
    (path / "config.json").write_text(json.dumps(GLM5))
    return path


def mapping(model: Path, profile: str, tuning=None, extra_args=None) -> dict:
    return {
        "model": {"path": str(model)},
        "server": {"profile": profile, "extra_args": list(extra_args or [])},
        "tuning": dict(tuning or {}),
    }


def plan(model, stack=CURRENT, tuning=None, extra_args=None, gpus=SM120_96GB):
    profile, version = stack
    config = config_from_mapping(mapping(model, profile, tuning, extra_args))
    return build_launch_plan(config, gpus=gpus, sglang=SglangVersion(version, True, "test"))


def refusal(model, **kwargs) -> str:
    with pytest.raises(EngineLimitError) as excinfo:
        plan(model, **kwargs)
    return excinfo.value.render()


def test_trtllm_dsa_kernels_on_sm120_are_refused_naming_flag_card_and_fix(glm5):
    text = refusal(glm5, tuning={**SPARSE_MLA, "nsa_decode_backend": "trtllm"})
    assert "--dsa-decode-backend trtllm on 8x NVIDIA RTX PRO 6000" in text
    assert "not built for SM120" in text
    assert "Fix: set --dsa-decode-backend flashinfer_sparse_mla" in text
    assert "--dsa-prefill-backend" not in text  # the prefill backend is a runnable one


def test_the_trtllm_sglang_picks_itself_is_refused_too(glm5):
    """A target that leaves the DSA backends to sglang (sm100's) on SM120 GPUs, with a bf16
    KV cache: sglang leaves its SM120 path and picks trtllm for decode."""
    data = mapping(glm5, "cu130-0.5.23", extra_args=["--kv-cache-dtype", "bfloat16"])
    config = config_from_mapping({**data, "gpus": {"target": "sm100"}})
    with pytest.raises(EngineLimitError) as excinfo:
        build_launch_plan(config, gpus=SM120_96GB, sglang=SglangVersion("0.5.23", True, "t"))
    text = excinfo.value.render()
    assert "--dsa-decode-backend unset (sglang picks trtllm)" in text
    assert "Fix: an FP8 KV cache (leave --kv-cache-dtype out)" in text


def test_sparse_mla_without_an_fp8_kv_cache_is_refused(glm5):
    text = refusal(glm5, tuning=SPARSE_MLA, extra_args=["--kv-cache-dtype", "bfloat16"])
    assert "runs only GLM's DSA" in text and "a bfloat16 KV" in text


def test_fp8_dsa_before_sglang_0_5_17_has_no_backend_on_sm120(glm5):
    text = refusal(glm5, stack=("cu130", "0.5.11"), tuning={"attention_backend": "nsa"})
    assert "sglang 0.5.11 has no DSA backend for SM120" in text
    assert "Fix: server.profile: cu130-0.5.23" in text
    assert "tuning.attention_backend: flashinfer" in text


def test_sparse_mla_is_for_glm_only(tmp_path):
    model = tmp_path / "dsv32"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(DSV32))
    text = refusal(model, tuning=SPARSE_MLA)
    assert "takes only GlmMoeDsaForCausalLM" in text and "DeepseekV32ForCausalLM" in text


def test_a_backend_sglang_refuses_on_its_sm120_path_is_refused(glm5):
    text = refusal(glm5, tuning={**SPARSE_MLA, "nsa_prefill_backend": "flashmla_sparse"})
    assert "refuses flashmla_sparse" in text and "--dsa-prefill-backend" in text
    ok = plan(glm5, tuning={**SPARSE_MLA, "nsa_prefill_backend": "triton_sparse_mla"})
    assert ok.flag_value("--dsa-prefill-backend") == "triton_sparse_mla"  # 0.5.22+


def test_what_runs_is_planned(glm5):
    """The reference's dense path on its sglang, sglang's own SM120 path on the current one."""
    reference = plan(glm5, stack=("cu128", "0.5.10.post1"))
    assert reference.flag_value("--attention-backend") == "flashinfer"
    assert reference.flag_value("--nsa-decode-backend") == "trtllm"  # not the DSA kernels
    current = plan(glm5)
    assert current.flag_value("--attention-backend") == "dsa"
    assert current.flag_values("--dsa-decode-backend") == ["flashinfer_sparse_mla"]
    assert current.flag_values("--dsa-prefill-backend") == ["flashinfer_sparse_mla"]
    elsewhere = plan(glm5, tuning={"nsa_decode_backend": "trtllm"},
                     gpus=GpuFacts(8, (10, 0), "590", ["NVIDIA B200"] * 8, "nvml"))  # fmt: skip
    assert elsewhere.flag_value("--dsa-decode-backend") == "trtllm"


@pytest.mark.parametrize(
    ("stack", "flag"),
    [(("cu128", "0.5.10.post1"), "--cuda-graph-max-bs"), (CURRENT, "--cuda-graph-max-bs-decode")],
)
def test_a_decode_graph_ceiling_of_512_on_96_gb_cards_is_refused(glm5, stack, flag):
    text = refusal(glm5, stack=stack, tuning={"cuda_graph": True}, extra_args=[flag, "512"])
    assert f"{flag} 512 on 8x NVIDIA RTX PRO 6000" in text and "97887 MiB" in text
    assert "ran out of memory" in text and "Fix: a ceiling of 256 or less" in text
    assert plan(glm5, stack=stack, tuning={"cuda_graph": True}, extra_args=[flag, "256"])
    # Graphs off: no ceiling is captured; bigger cards: not the failure seen.
    assert plan(glm5, stack=stack, extra_args=[flag, "512"])
    big = GpuFacts(8, (12, 0), "590", ["big"] * 8, "nvml", memory_mib=150_000)
    assert plan(glm5, stack=stack, tuning={"cuda_graph": True}, extra_args=[flag, "512"], gpus=big)


def test_the_ceiling_in_cuda_graph_config_counts_too(glm5):
    config = json.dumps({"decode": {"backend": "full", "max_bs": 512}})
    text = refusal(glm5, tuning={"cuda_graph": True}, extra_args=["--cuda-graph-config", config])
    assert "--cuda-graph-config 512" in text


@pytest.mark.parametrize(
    ("stack", "flag"),
    [(("cu128", "0.5.10.post1"), "--cuda-graph-max-bs"), (CURRENT, "--cuda-graph-max-bs-decode")],
)
def test_with_graphs_on_the_plan_caps_the_decode_graphs_at_256(glm5, stack, flag):
    """sglang's own ceiling on these cards at tensor parallel 8 is 512."""
    capped = plan(glm5, stack=stack, tuning={"cuda_graph": True})
    assert capped.flag_values(flag) == ["256"]
    assert "ran out of memory at capture" in next(e.reason for e in capped.flags if e.name == flag)
    assert plan(glm5, stack=stack).flag_value(flag) is None  # graphs off: nothing to cap
    few = plan(glm5, stack=stack, tuning={"cuda_graph": True, "max_running_requests": 64})
    assert few.flag_values(flag) == ["64"]  # no graph for batches that never run
    h200 = GpuFacts(8, (9, 0), "590", ["NVIDIA H200"] * 8, "nvml", memory_mib=143_771)
    assert plan(glm5, stack=stack, tuning={"cuda_graph": True}, gpus=h200).flag_value(flag) is None


def write_config(tmp_path, data: dict) -> Path:
    path = tmp_path / "glm5.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_validate_refuses_what_serve_would(glm5, tmp_path):
    """No NVML here: the GPUs are the sm120 target's, the sglang the profile's pin."""
    path = write_config(tmp_path, mapping(glm5, "cu130", {"attention_backend": "dsa"}))
    with pytest.raises(EngineLimitError) as excinfo:
        check_config(load_config(path), path)
    assert "sglang 0.5.11 has no DSA backend for SM120" in excinfo.value.render()
    fine = write_config(tmp_path, mapping(glm5, "cu130-0.5.23", {"attention_backend": "dsa"}))
    check_config(load_config(fine), fine)


def test_the_tune_space_leaves_out_what_cannot_run_here(glm5, tmp_path):
    operator = mapping(glm5, "cu130-0.5.23", SPARSE_MLA)
    config = config_from_mapping(operator)
    renderer = Renderer(HostFacts.read(config), check_with_sglang=False)
    space_file = tmp_path / "space.yaml"
    space_file.write_text(
        "knobs:\n"
        "  - key: tuning.nsa_decode_backend\n"
        "    values: [trtllm, flashinfer_sparse_mla]\n"
        "  - flag: --cuda-graph-max-bs-decode\n"
        "    values: [512, 256]\n"
        "  - key: tuning.cuda_graph\n"
        "    values: [true]\n"
    )
    space = load_space(
        space_file, config, moe=True, sglang_version="0.5.23",
        refuse=lambda name, value: renderer.limit_refusal(
            apply_candidate({**operator, "tuning": {**SPARSE_MLA, "cuda_graph": True}},
                            {name: value})
        ),
    )  # fmt: skip
    assert space.knob("tuning.nsa_decode_backend").values == ("flashinfer_sparse_mla",)
    assert space.knob("--cuda-graph-max-bs-decode").values == (None, 256)
    left = " ".join(space.left_out)
    assert "tuning.nsa_decode_backend=trtllm: the launch plan refuses it" in left
    assert "--cuda-graph-max-bs-decode=512" in left and "ran out of memory" in left
