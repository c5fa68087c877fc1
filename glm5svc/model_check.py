"""Is the GLM-5-NVFP4 checkpoint directory complete? config, NVFP4 quantization config, shards."""

from __future__ import annotations

import json
from pathlib import Path

from glm5svc.checks import FAIL, OK, CheckRow, PreflightContext

INDEX_FILE = "model.safetensors.index.json"


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
    model_dir = ctx.config.model.path
    fix = f"download or finish downloading the checkpoint into {model_dir} (or fix model.path)"
    if not model_dir.is_dir():
        return [CheckRow("model directory", FAIL, f"{model_dir} does not exist", fix)]
    if not (model_dir / "config.json").is_file():
        return [CheckRow("model directory", FAIL, f"no config.json in {model_dir}", fix)]
    try:
        algo = find_quant_algo(model_dir)
        index_present = (model_dir / INDEX_FILE).is_file()
        missing, empty, total = shard_problems(model_dir) if index_present else ([], [], 0)
    except ValueError as exc:
        return [CheckRow("model directory", FAIL, str(exc), fix)]
    rows = []
    if algo != "NVFP4":
        found = f"quant_algo {algo}" if algo else "no quantization config"
        rows.append(
            CheckRow(
                "model quantization",
                FAIL,
                f"{found}: expected NVFP4 (hf_quant_config.json or config.json "
                "quantization_config) for --quantization modelopt_fp4",
                "use the GLM-5-NVFP4 checkpoint; a partial download may lack hf_quant_config.json",
            )
        )
    else:
        rows.append(CheckRow("model quantization", OK, "ModelOpt NVFP4"))
    rows.append(_shard_row(index_present, missing, empty, total, fix))
    return rows


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
