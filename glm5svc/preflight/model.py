"""Is the checkpoint directory complete? config.json, the quantization the plan passes, shards.

The NVFP4 row is for the quantization the plan uses (modelopt_fp4: the sm120 and sm100
targets' default); with `tuning.quantization: none` the checkpoint must not be NVFP4.
With `model.load_format: dummy` (random weights) no shard is read, so none is required.
"""

from __future__ import annotations

import json
from pathlib import Path

from glm5svc import paths
from glm5svc.preflight.rows import FAIL, OK, CheckRow, PreflightContext
from glm5svc.targets import get_target, planned_quantization

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"  # small checkpoints: one file, no index


def find_quant_algo(model_dir: Path) -> str | None:
    """The ModelOpt quant_algo from hf_quant_config.json or config.json, if any."""
    hf_quant = model_dir / "hf_quant_config.json"
    if hf_quant.is_file():
        data = _read_json(hf_quant)
        algo = (data.get("quantization") or {}).get("quant_algo")
        if algo:
            return str(algo)
    config = _read_json(model_dir / "config.json")
    quant = config.get("quantization_config") or {}
    return quant.get("quant_algo")


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: unreadable JSON ({exc})") from None
    return data if isinstance(data, dict) else {}


def shard_problems(model_dir: Path) -> tuple[list[str], list[str], int]:
    """(missing shards, empty shards, total bytes of the shards present)."""
    index = _read_json(model_dir / INDEX_FILE)
    shards = sorted(set((index.get("weight_map") or {}).values()))
    missing, empty, total = [], [], 0
    for shard in shards:
        path = model_dir / shard
        if not path.is_file():
            missing.append(shard)
            continue
        size = path.stat().st_size
        total += size
        if size == 0:
            empty.append(shard)
    return missing, empty, total


def check_model_directory(ctx: PreflightContext) -> list[CheckRow]:
    config = ctx.config
    model_dir = config.model.path
    fix = f"download or finish downloading the checkpoint into {model_dir} (or fix model.path)"
    if said_and_fix := paths.PREFLIGHT_MODEL_PATH.said_and_fix(model_dir):
        return [CheckRow("model directory", FAIL, *said_and_fix)]
    if not (model_dir / "config.json").is_file():
        return [CheckRow("model directory", FAIL, f"no config.json in {model_dir}", fix)]
    try:
        algo = find_quant_algo(model_dir)
        index_present = (model_dir / INDEX_FILE).is_file()
        missing, empty, total = shard_problems(model_dir) if index_present else ([], [], 0)
    except ValueError as exc:
        return [CheckRow("model directory", FAIL, str(exc), fix)]
    rows = [_quantization_row(config, algo)]
    if config.model.load_format == "dummy":
        rows.append(
            CheckRow("model shards", OK, "model.load_format dummy: random weights, no shard read")
        )
    elif not index_present and (model_dir / SINGLE_FILE).is_file():
        size = (model_dir / SINGLE_FILE).stat().st_size
        status = OK if size else FAIL
        rows.append(
            CheckRow("model shards", status, f"one file {SINGLE_FILE}, {size / 1e9:.1f} GB", fix)
        )
    else:
        rows.append(_shard_row(index_present, missing, empty, total, fix))
    return rows


def _quantization_row(config, algo: str | None) -> CheckRow:
    target = get_target(config.gpus.target)
    quantization = planned_quantization(config.tuning, target)
    origin = "tuning.quantization" if config.tuning.quantization else f"target {target.name}"
    scope = f"quantization {quantization} ({origin})"
    if quantization == "none":
        if algo == "NVFP4":
            return CheckRow(
                "model quantization",
                FAIL,
                f"an NVFP4 checkpoint, but the plan passes no quantization ({origin}: none)",
                "serve an unquantized checkpoint, or a target with FP4 tensor cores "
                "(gpus.target: sm120 or sm100) with tuning.quantization: modelopt_fp4",
                scope,
            )
        found = f"quant_algo {algo}" if algo else "no ModelOpt quantization config"
        return CheckRow("model quantization", OK, f"{found}: served unquantized", scope=scope)
    if algo != "NVFP4":
        found = f"quant_algo {algo}" if algo else "no quantization config"
        return CheckRow(
            "model quantization",
            FAIL,
            f"{found}: expected NVFP4 (hf_quant_config.json or config.json "
            "quantization_config) for --quantization modelopt_fp4",
            "use the GLM-5-NVFP4 checkpoint; a partial download may lack hf_quant_config.json",
            scope,
        )
    return CheckRow("model quantization", OK, "ModelOpt NVFP4", scope=scope)


def _shard_row(index_present, missing, empty, total, fix) -> CheckRow:
    if not index_present:
        return CheckRow("model shards", FAIL, f"no {INDEX_FILE}: cannot tell the shards", fix)
    if missing or empty:
        parts = []
        if missing:
            parts.append(f"{len(missing)} missing ({_names(missing)})")
        if empty:
            parts.append(f"{len(empty)} empty ({_names(empty)})")
        return CheckRow("model shards", FAIL, "incomplete download: " + "; ".join(parts), fix)
    return CheckRow("model shards", OK, f"all shards present, {total / 1e9:.1f} GB")


def _names(shards: list[str]) -> str:
    shown = ", ".join(shards[:5])
    return shown + (f" and {len(shards) - 5} more" if len(shards) > 5 else "")
