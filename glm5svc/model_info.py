"""What the launch plan needs to know about the model: its architecture, from config.json.

Sparse attention (DSA/NSA) is decided as sglang decides it (sglang 0.5.11
`sglang/srt/configs/model_config.py` `is_deepseek_nsa`): the first architecture is one of
DSA_ARCHITECTURES and config.json has `index_topk`. When config.json cannot be read (the
checkpoint is not on this machine yet), the plan is made for the reference model, GLM-5,
and says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from glm5svc import paths

DSA_ARCHITECTURES = (
    "DeepseekV3ForCausalLM",
    "DeepseekV32ForCausalLM",
    "DeepseekV3ForCausalLMNextN",
    "MistralLarge3ForCausalLM",
    "PixtralForConditionalGeneration",
    "GlmMoeDsaForCausalLM",
)
REFERENCE_ARCHITECTURE = "GlmMoeDsaForCausalLM"  # GLM-5: DSA attention, MoE
# config.json keys that give a model's routed experts (DeepSeek/GLM, Qwen-MoE, Mixtral).
EXPERT_KEYS = ("n_routed_experts", "num_experts", "num_local_experts")


@dataclass(frozen=True)
class ModelFacts:
    architecture: str
    sparse_attention: bool  # DeepSeek-style sparse attention (DSA/NSA)
    moe: bool
    source: str  # the config.json read, or why the reference model was assumed
    from_config: bool = True
    problem: str | None = None  # model.path holds something that is not a checkpoint
    missing_config: str | None = None  # a folder without config.json
    vocab_size: int | None = None  # config.json's (or its text_config's) vocab_size

    @property
    def summary(self) -> str:
        parts = [self.architecture, "DSA sparse attention" if self.sparse_attention else "dense"]
        if self.moe:
            parts.append("MoE")
        return ", ".join(parts)


def model_path_problem(model_dir: Path) -> str | None:
    """Why model.path cannot be a checkpoint although something is there (None when it can,
    or when nothing is there yet: the plan is then made for the reference model)."""
    return paths.MODEL_PATH.problem(model_dir)


def missing_config_problem(model_dir: Path) -> str | None:
    """A folder without config.json: sglang cannot start on it (a stand-in engine can)."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir() or (model_dir / "config.json").is_file():
        return None
    return (
        f"{model_dir} has no config.json: not a Hugging Face checkpoint folder (sglang "
        "reads config.json even with load_format: dummy); copy the checkpoint there"
    )


def read_model_facts(model_dir: Path) -> ModelFacts:
    """Facts from `model_dir`/config.json; the reference model's, labelled, if unreadable."""
    path = Path(model_dir) / "config.json"
    if problem := model_path_problem(Path(model_dir)):
        return replace(_assumed(problem), problem=problem)
    if problem := missing_config_problem(Path(model_dir)):
        return replace(_assumed(problem), missing_config=problem)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return _assumed(f"{path} does not exist")
    except (OSError, ValueError) as exc:
        return _assumed(f"{path} is unreadable ({exc})")
    architectures = data.get("architectures") if isinstance(data, dict) else None
    if not architectures or not isinstance(architectures, list):
        return _assumed(f"{path} names no architectures")
    architecture = str(architectures[0])
    sparse = architecture in DSA_ARCHITECTURES and data.get("index_topk") is not None
    moe = any(isinstance(data.get(key), int) and data[key] > 0 for key in EXPERT_KEYS)
    text = data.get("text_config") if isinstance(data.get("text_config"), dict) else {}
    vocab = data.get("vocab_size", text.get("vocab_size"))
    vocab = vocab if isinstance(vocab, int) and not isinstance(vocab, bool) and vocab > 1 else None
    return ModelFacts(architecture, sparse, moe, str(path), vocab_size=vocab)


def _assumed(problem: str) -> ModelFacts:
    return ModelFacts(
        REFERENCE_ARCHITECTURE,
        sparse_attention=True,
        moe=True,
        source=f"{problem}; planned for the reference model GLM-5 ({REFERENCE_ARCHITECTURE})",
        from_config=False,
    )


# sglang's order (0.5.11 `sglang/srt/utils/hf_transformers/common.py`, CONTEXT_LENGTH_KEYS):
# the first key config.json has is the model's context length, unless --context-length is given.
CONTEXT_LENGTH_KEYS = (
    "max_sequence_length",
    "seq_length",
    "max_seq_len",
    "model_max_length",
    "max_position_embeddings",
)


def context_length(model_dir: Path, extra_args: list[str]) -> tuple[int | None, str]:
    """The engine's context length in tokens and where it comes from: --context-length in
    server.extra_args, else config.json as sglang reads it (its rope scaling factor
    included); None when neither says (the checkpoint is not on this machine yet)."""
    for index, arg in enumerate(extra_args):
        value = None
        if arg == "--context-length" and index + 1 < len(extra_args):
            value = extra_args[index + 1]
        elif arg.startswith("--context-length="):
            value = arg.split("=", 1)[1]
        if value is not None and value.isdigit() and int(value) > 0:
            return int(value), "--context-length in server.extra_args"
    path = Path(model_dir) / "config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None, f"{path} is not readable"
    if not isinstance(data, dict):
        return None, f"{path} is not a mapping"
    factor = 1.0
    rope = data.get("rope_scaling")
    if isinstance(rope, dict) and "original_max_position_embeddings" not in rope:
        if rope.get("rope_type") != "llama3" and isinstance(rope.get("factor"), int | float):
            factor = float(rope["factor"])
    for key in CONTEXT_LENGTH_KEYS:
        value = data.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return int(factor * value), f"{key} in {path}"
    return None, f"{path} names no context length"
