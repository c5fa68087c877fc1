"""The checkpoint check on made-up model directories."""

from __future__ import annotations

import json

import pytest

from glm5svc.config import config_from_mapping
from glm5svc.facts import HostFacts
from glm5svc.preflight.model import check_model_directory
from glm5svc.preflight.rows import FAIL, OK, PreflightContext


def make_checkpoint(root, shards=3, quant=True, drop=None, empty=None):
    root.mkdir()
    (root / "config.json").write_text(json.dumps({"architectures": ["GlmMoeDsaForCausalLM"]}))
    if quant:
        quant_cfg = {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4"}}
        (root / "hf_quant_config.json").write_text(json.dumps(quant_cfg))
    names = [f"model-{i:05d}-of-{shards:05d}.safetensors" for i in range(1, shards + 1)]
    weight_map = {f"layer.{i}.weight": name for i, name in enumerate(names)}
    (root / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    for name in names:
        if name == drop:
            continue
        (root / name).write_bytes(b"" if name == empty else b"x" * 1000)
    return names


def rows_for(path):
    config = config_from_mapping({"model": {"path": str(path)}})
    ctx = PreflightContext(config, HostFacts.given(config, nvml_error="no driver"))
    return {row.name: row for row in check_model_directory(ctx)}


def test_complete_checkpoint(tmp_path):
    make_checkpoint(tmp_path / "m")
    rows = rows_for(tmp_path / "m")
    assert rows["model quantization"].status == OK
    assert rows["model shards"].status == OK
    assert "all shards present" in rows["model shards"].detail


def test_missing_shard_is_named(tmp_path):
    names = make_checkpoint(tmp_path / "m", drop="model-00002-of-00003.safetensors")
    row = rows_for(tmp_path / "m")["model shards"]
    assert row.status == FAIL and "1 missing" in row.detail and names[1] in row.detail


def test_empty_shard_is_named(tmp_path):
    make_checkpoint(tmp_path / "m", empty="model-00003-of-00003.safetensors")
    row = rows_for(tmp_path / "m")["model shards"]
    assert row.status == FAIL and "1 empty (model-00003-of-00003.safetensors)" in row.detail


def test_missing_quantization_config(tmp_path):
    make_checkpoint(tmp_path / "m", quant=False)
    row = rows_for(tmp_path / "m")["model quantization"]
    assert row.status == FAIL and "no quantization config" in row.detail


def test_quant_algo_in_config_json(tmp_path):
    make_checkpoint(tmp_path / "m", quant=False)
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "modelopt", "quant_algo": "NVFP4"}
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    assert rows_for(tmp_path / "m")["model quantization"].status == OK


@pytest.mark.parametrize("setup", ["absent", "no-config"])
def test_missing_directory_or_config(tmp_path, setup):
    if setup == "no-config":
        (tmp_path / "m").mkdir()
    row = rows_for(tmp_path / "m")["model directory"]
    assert row.status == FAIL


def test_corrupt_index_is_reported(tmp_path):
    make_checkpoint(tmp_path / "m")
    (tmp_path / "m" / "model.safetensors.index.json").write_text("{not json")
    row = rows_for(tmp_path / "m")["model directory"]
    assert row.status == FAIL and "unreadable JSON" in row.detail


@pytest.mark.parametrize(
    ("setup", "said", "fix"),
    [
        ("file", "Not a directory (it is a regular file)", "not a file"),
        ("loop", "Too many levels of symbolic links", "replace the links"),
        ("absent", "No such file or directory", "download the checkpoint"),
    ],
)
def test_a_model_path_that_is_no_folder_is_named_in_the_systems_words(tmp_path, setup, said, fix):
    model = tmp_path / "m"
    if setup == "file":
        model.write_text("weights?")
    elif setup == "loop":
        model.symlink_to(tmp_path / "n")
        (tmp_path / "n").symlink_to(model)
    row = rows_for(model)["model directory"]
    assert row.status == FAIL and row.detail.startswith(f"model.path: {model}: {said}")
    assert fix in row.fix and "does not exist" not in row.detail
