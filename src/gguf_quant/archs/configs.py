"""transformers config dicts from GGUF metadata, for the architectures the plugin maps.

Registered into transformers' own table of fast GGUF config builders
(`transformers.integrations.gguf.GGUF_CONFIG_ARCHS`), so `from_pretrained(..., gguf_file=...)`
reads the header once with transformers' fast reader instead of walking every vocabulary
string through gguf-py (12 of the 14 s a Gemma 3 load took). Keys follow llama.cpp's metadata
names (ggml docs/gguf.md, "LLM" section); values llama.cpp hard-codes rather than stores are
set the way llama.cpp sets them, so both run the same model.
"""
from __future__ import annotations

import math
from typing import Callable

__all__ = ["CONFIG_BUILDERS", "yarn_mscale"]


def _base(meta: dict, names: tuple[str, ...], arch: str, model_type: str, cls: str) -> dict:
    key = lambda k, default=None: meta.get(f"{arch}.{k}", default)  # noqa: E731
    heads = key("attention.head_count")
    hidden = key("embedding_length")
    config = {
        "model_type": model_type,
        "architectures": [cls],
        "max_position_embeddings": key("context_length"),
        "hidden_size": hidden,
        "intermediate_size": key("feed_forward_length"),
        "num_hidden_layers": key("block_count"),
        "num_attention_heads": heads,
        "num_key_value_heads": key("attention.head_count_kv", heads),
        "head_dim": key("attention.key_length", hidden // heads),
        "rms_norm_eps": key("attention.layer_norm_rms_epsilon"),
        "rope_parameters": {"rope_type": "default", "rope_theta": key("rope.freq_base", 10000.0)},
        # `read_gguf_metadata` gives a string array as its length
        "vocab_size": key("vocab_size", meta.get("tokenizer.ggml.tokens")),
        # llama.cpp writes the output projection only when it is not the embedding matrix
        "tie_word_embeddings": "output.weight" not in names,
        "bos_token_id": meta.get("tokenizer.ggml.bos_token_id"),
        "eos_token_id": meta.get("tokenizer.ggml.eos_token_id"),
        "pad_token_id": meta.get("tokenizer.ggml.padding_token_id"),
    }
    if config["intermediate_size"] is None:  # all-expert models state only the expert width
        del config["intermediate_size"]
    scaling = key("rope.scaling.type")
    if scaling in ("linear", "yarn"):
        rope = config["rope_parameters"] | {"rope_type": scaling, "factor": key("rope.scaling.factor")}
        if scaling == "yarn":
            # llama.cpp falls back to the training context when the file names no original one
            rope["original_max_position_embeddings"] = key("rope.scaling.original_context_length", key("context_length"))
        config["rope_parameters"] = rope
    return config


def _llama(meta, names):
    if meta.get("llama.expert_count"):
        # llama.cpp writes Mixtral as llama with experts; each expert is feed_forward_length wide.
        config = _base(meta, names, "llama", "mixtral", "MixtralForCausalLM")
        config["num_local_experts"] = meta["llama.expert_count"]
        config["num_experts_per_tok"] = meta["llama.expert_used_count"]
        return config
    return _base(meta, names, "llama", "llama", "LlamaForCausalLM")


def _moe(meta, config: dict, arch: str, normalise: bool) -> dict:
    key = lambda k, default=None: meta.get(f"{arch}.{k}", default)  # noqa: E731
    config["num_experts"] = key("expert_count")
    config["num_experts_per_tok"] = key("expert_used_count")
    # transformers' own reader drops this key, so any width other than its default (768 for
    # Qwen3-MoE) loaded with wrong shapes.
    config["moe_intermediate_size"] = key("expert_feed_forward_length")
    # llama.cpp renormalises the chosen experts' weights for Qwen3-MoE, not for Qwen2-MoE.
    config["norm_topk_prob"] = normalise
    config["decoder_sparse_step"] = 1
    config["mlp_only_layers"] = []
    return config


def _qwen3moe(meta, names):
    return _moe(meta, _base(meta, names, "qwen3moe", "qwen3_moe", "Qwen3MoeForCausalLM"), "qwen3moe", True)


def _qwen2moe(meta, names):
    config = _moe(meta, _base(meta, names, "qwen2moe", "qwen2_moe", "Qwen2MoeForCausalLM"), "qwen2moe", False)
    config["shared_expert_intermediate_size"] = meta.get("qwen2moe.expert_shared_feed_forward_length")
    return config


def _qwen2(meta, names):
    return _base(meta, names, "qwen2", "qwen2", "Qwen2ForCausalLM")


def _qwen3(meta, names):
    return _base(meta, names, "qwen3", "qwen3", "Qwen3ForCausalLM")


def _starcoder2(meta, names):
    config = _base(meta, names, "starcoder2", "starcoder2", "Starcoder2ForCausalLM")
    # LayerNorm (with biases), not RMSNorm; llama.cpp uses no sliding window for it.
    del config["rms_norm_eps"]
    config["norm_epsilon"] = meta.get("starcoder2.attention.layer_norm_epsilon")
    config["use_bias"] = True
    config["sliding_window"] = None
    return config


def _phi3(meta, names):
    config = _base(meta, names, "phi3", "phi3", "Phi3ForCausalLM")
    # Phi-3 rotates only part of each head.
    rot = meta.get("phi3.rope.dimension_count")
    if rot is not None:
        config["partial_rotary_factor"] = rot / config["head_dim"]
    if (window := meta.get("phi3.attention.sliding_window")) is not None:
        config["sliding_window"] = window
    return config


def _gemma_attention_scale(config: dict, large: bool) -> float:
    # llama.cpp scales queries by 1/sqrt(head_dim), except for the 27B models, which use
    # 1/sqrt(hidden/heads); transformers calls that denominator query_pre_attn_scalar.
    return config["hidden_size"] // config["num_attention_heads"] if large else config["head_dim"]


def _gemma2(meta, names):
    config = _base(meta, names, "gemma2", "gemma2", "Gemma2ForCausalLM")
    config["query_pre_attn_scalar"] = _gemma_attention_scale(config, config["num_hidden_layers"] == 46)
    config["sliding_window"] = meta.get("gemma2.attention.sliding_window")
    config["attn_logit_softcapping"] = meta.get("gemma2.attn_logit_softcapping")
    config["final_logit_softcapping"] = meta.get("gemma2.final_logit_softcapping")
    return config


def _gemma3(meta, names):
    config = _base(meta, names, "gemma3", "gemma3_text", "Gemma3ForCausalLM")
    config["query_pre_attn_scalar"] = _gemma_attention_scale(config, config["num_hidden_layers"] == 62)
    config["sliding_window"] = meta.get("gemma3.attention.sliding_window")
    # llama.cpp: every 6th layer attends globally with the file's rope base, the rest use a
    # sliding window and base 10000; only the global layers take the rope scaling.
    n = config["num_hidden_layers"]
    config["layer_types"] = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(n)]
    config["rope_parameters"] = {
        "full_attention": config["rope_parameters"],
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
    }
    return config


def _swa_layers(meta: dict, arch: str, layers: int, period: int) -> list[str]:
    """transformers `layer_types` from llama.cpp's sliding-window pattern: an explicit per-layer
    array, or a period `n` in which every layer but the last of each `n` slides (0: all slide);
    `period` is the architecture's default when the file states none."""
    pattern = meta.get(f"{arch}.attention.sliding_window_pattern", period)
    if isinstance(pattern, (list, tuple)):
        swa = [bool(x) for x in pattern[:layers]]
    else:
        swa = [pattern == 0 or i % pattern < pattern - 1 for i in range(layers)]
    return ["sliding_attention" if s else "full_attention" for s in swa]


def yarn_mscale(factor: float) -> float:
    """YaRN's attention scale for a context `factor` times the original: `0.1 ln(factor) + 1`."""
    return 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0


def _gpt_oss_rope(meta: dict, config: dict) -> dict:
    """llama.cpp runs gpt-oss's YaRN with its own constants, not those the converter writes:
    beta_fast 32 / beta_slow 1 (the `yarn_beta_*` keys are not read for this architecture), the
    correction range rounded outwards (ggml floors/ceils it: transformers' `truncate=True`), and
    cos/sin scaled by `0.1 ln(factor) + 1` times the file's `rope.scaling.attn_factor`."""
    rope = dict(config["rope_parameters"])
    if rope["rope_type"] != "yarn":
        return rope
    rope |= {"beta_fast": 32.0, "beta_slow": 1.0, "truncate": True}
    if (attn := meta.get("gpt-oss.rope.scaling.attn_factor")) is not None:
        rope["attention_factor"] = yarn_mscale(rope["factor"]) * attn
    return rope


def _gpt_oss(meta, names):
    arch = "gpt-oss"
    config = _base(meta, names, arch, "gpt_oss", "GptOssForCausalLM")
    base_swa = meta.get(f"{arch}.rope.freq_base_swa")
    if base_swa is not None and base_swa != config["rope_parameters"]["rope_theta"]:
        # transformers' GptOssModel has one rotary embedding for every layer.
        raise ValueError(f"gpt-oss: a sliding-window rope base ({base_swa}) other than the global one is not supported")
    # llama.cpp sizes the experts by expert_feed_forward_length; feed_forward_length is not used.
    config["intermediate_size"] = meta[f"{arch}.expert_feed_forward_length"]
    config["num_local_experts"] = meta[f"{arch}.expert_count"]
    config["num_experts_per_tok"] = meta[f"{arch}.expert_used_count"]
    config["sliding_window"] = meta.get(f"{arch}.attention.sliding_window")
    config["layer_types"] = _swa_layers(meta, arch, config["num_hidden_layers"], period=2)
    config["rope_parameters"] = _gpt_oss_rope(meta, config)
    # Constants of llama.cpp's LLM_FFN_SWIGLU_OAI_MOE, not stored in the file.
    config["swiglu_alpha"], config["swiglu_limit"] = 1.702, 7.0
    # llama.cpp loads q/k/v biases when present (the output bias is required).
    config["attention_bias"] = "blk.0.attn_q.bias" in names
    return config


CONFIG_BUILDERS: dict[str, Callable[[dict, tuple], dict]] = {
    "llama": _llama,
    "qwen2": _qwen2,
    "qwen3": _qwen3,
    "qwen2moe": _qwen2moe,
    "qwen3moe": _qwen3moe,
    "phi3": _phi3,
    "starcoder2": _starcoder2,
    "gemma2": _gemma2,
    "gemma3": _gemma3,
    "gpt-oss": _gpt_oss,
}
