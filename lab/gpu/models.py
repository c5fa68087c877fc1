"""Tiny models with random weights for the real engine (`--load-format dummy`).

A model directory needs only config.json, generation_config.json and a tokenizer: with
`--load-format dummy` sglang creates the layers from config.json and fills them with
random values, so no checkpoint (and no model hub) is needed.

- llama-tiny: LlamaForCausalLM, 4 layers, hidden 512: the plain dense path.
- glm5-tiny: GLM-5's own architecture (GlmMoeDsaForCausalLM, transformers model type
  `glm_moe_dsa`): GLM-5's attention geometry kept exactly (MLA with kv_lora_rank 512 and
  rope 64, the DSA indexer with 32 heads of 128 and top-k 2048, 64 query heads) so the
  same kernels run, with few layers, a small hidden size and 16 experts.
- qwen3-moe: the tuning testbed (Qwen3MoeForCausalLM, Qwen3-30B-A3B's layer shapes with
  24 of its 48 layers: hidden 2048, 32 query heads and 4 KV heads of 128, 128 experts of
  which 8 are active, expert width 768): about 15B parameters, 30 GB in bf16, a model
  of a realistic shape whose throughput moves with the server's settings.
The tokenizer is a word-level one (built with the `tokenizers` library there). llama-tiny
and the testbed have Qwen3's vocabulary size (151,936): bench_serving's random-ids prompts
are runs of consecutive ids from a random start, so two prompts share all their tokens when
their starts meet, about N^2/2V of N prompts. With 2,048 ids, 3-50 % of a run's prompt
tokens came from the radix cache even after a flush, and glm5svc bench rightly refused
the windows as not new; with 151,936, about 0.3 % of 1,000 prompts do.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

VOCAB_SIZE = 2048  # glm5-tiny's, as its recordings were made
TESTBED_VOCAB_SIZE = 151936  # Qwen3's (GLM-5's is 154,880)

LLAMA_TINY = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 512,
    "intermediate_size": 1408,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 64,
    "vocab_size": TESTBED_VOCAB_SIZE,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 0,
    "eos_token_id": 1,
}

# GLM-5's config.json (zai-org/GLM-5; transformers' GlmMoeDsaConfig defaults) with the
# sizes that do not shape the attention kernels scaled down.
GLM5_TINY = {
    "architectures": ["GlmMoeDsaForCausalLM"],
    "model_type": "glm_moe_dsa",
    "vocab_size": VOCAB_SIZE,
    "hidden_size": 1024,
    "intermediate_size": 2048,
    "moe_intermediate_size": 256,
    "num_hidden_layers": 4,
    "first_k_dense_replace": 1,
    # DeepSeek-style MoE keys GLM-5's config.json carries and sglang's DeepseekV2 code
    # (which GlmMoeDsaForCausalLM reuses) reads directly; transformers' GlmMoeDsaConfig
    # has no defaults for them.
    "moe_layer_freq": 1,
    "topk_method": "noaux_tc",
    "scoring_func": "sigmoid",
    "num_nextn_predict_layers": 0,
    "mlp_layer_types": ["dense", "sparse", "sparse", "sparse"],
    "num_attention_heads": 64,
    "num_key_value_heads": 64,
    "n_shared_experts": 1,
    "n_routed_experts": 16,
    "num_experts_per_tok": 4,
    "routed_scaling_factor": 2.5,
    "n_group": 1,
    "topk_group": 1,
    "norm_topk_prob": True,
    "kv_lora_rank": 512,
    "q_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 192,
    "v_head_dim": 256,
    "index_topk": 2048,
    "index_head_dim": 128,
    "index_n_heads": 32,
    "hidden_act": "silu",
    "max_position_embeddings": 16384,
    "rms_norm_eps": 1e-5,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
    "attention_bias": False,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 0,
    "eos_token_id": 1,
}

# Qwen3-30B-A3B's config.json with half its layers and this vocabulary. sglang 0.5.11's
# qwen3_moe.py reads num_experts, num_experts_per_tok, moe_intermediate_size,
# norm_topk_prob, head_dim, attention_bias, rms_norm_eps, max_position_embeddings and the
# rope parameters (rope_parameters under transformers 5, else rope_theta); every layer is
# sparse there (decoder_sparse_step and mlp_only_layers are kept for transformers' config).
QWEN3_MOE = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "vocab_size": TESTBED_VOCAB_SIZE,
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "moe_intermediate_size": 768,
    "num_hidden_layers": 24,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "norm_topk_prob": True,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "router_aux_loss_coef": 0.001,
    "output_router_logits": False,
    "hidden_act": "silu",
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-6,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
    "attention_bias": False,
    "attention_dropout": 0.0,
    "use_sliding_window": False,
    "sliding_window": None,
    "max_window_layers": 24,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 0,
    "eos_token_id": 1,
}

MODELS = {"llama-tiny": LLAMA_TINY, "glm5-tiny": GLM5_TINY, "qwen3-moe": QWEN3_MOE}


def write_tokenizer(dest: Path, vocab_size: int = VOCAB_SIZE) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<s>", "</s>", "<unk>", "<pad>"] + [f"w{i}" for i in range(vocab_size - 4)]
    tok = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
    )
    fast.save_pretrained(dest)


def write_model(name: str, root: Path) -> Path:
    dest = root / name
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "config.json").write_text(json.dumps(MODELS[name], indent=2) + "\n")
    generation = {"bos_token_id": 0, "eos_token_id": 1, "do_sample": False}
    (dest / "generation_config.json").write_text(json.dumps(generation) + "\n")
    write_tokenizer(dest, MODELS[name]["vocab_size"])
    return dest


if __name__ == "__main__":
    root = Path(sys.argv[1])
    for model in sys.argv[2:] or MODELS:
        print(write_model(model, root))
