"""Which ggml type each tensor gets when a float model is quantized: llama-quantize's mixes.

Follows the per-tensor rules llama.cpp documents and applies in `llama-quantize` without an
importance matrix (src/llama-quant.cpp: tensor categories by GGUF name, the `use_more_bits`
layer pattern, the output/tied-embedding rule, and the fallback for rows that are not a
multiple of the block size). Only the mixes whose types `gguf_quant.quantize` can produce are
offered. Names are llama.cpp's (GGUF) tensor names.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .ggml.types import ggml_type

__all__ = ["MIXES", "ModelFacts", "choose_types"]

# llama-quantize's file types -> their default ggml type.
MIXES: dict[str, str] = {
    "Q4_0": "Q4_0", "Q4_1": "Q4_1", "Q5_0": "Q5_0", "Q5_1": "Q5_1", "Q8_0": "Q8_0",
    "Q2_K": "Q2_K", "Q2_K_S": "Q2_K", "Q3_K_S": "Q3_K", "Q3_K_M": "Q3_K", "Q3_K_L": "Q3_K",
    "Q4_K_S": "Q4_K", "Q4_K_M": "Q4_K", "Q5_K_S": "Q5_K", "Q5_K_M": "Q5_K", "Q6_K": "Q6_K",
    "IQ4_NL": "IQ4_NL", "IQ4_XS": "IQ4_XS", "MXFP4_MOE": "MXFP4",
}

# A 256-element-block type whose rows do not fit falls back to a 32-element one.
_FALLBACK = {"Q2_K": "Q4_0", "Q3_K": "Q4_0", "Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0", "IQ4_XS": "IQ4_NL"}

# Tensors llama-quantize never quantizes, beyond 1-D ones and names not ending in "weight".
_KEEP_FLOAT = ("_norm.weight", "ffn_gate_inp.weight")


@dataclass(frozen=True)
class ModelFacts:
    n_layers: int
    n_expert: int = 0
    n_gqa: int = 1  # query heads per key/value head
    tied: bool = False  # no output.weight of its own: the embedding is the output head


def _category(name: str) -> str:
    if name == "output.weight":
        return "output"
    if name == "token_embd.weight":
        return "token_embd"
    for key, cat in (("attn_qkv.weight", "attn_v"), ("attn_kv_b.weight", "attn_v"), ("attn_v.weight", "attn_v"),
                     ("attn_k.weight", "attn_k"), ("attn_q.weight", "attn_q"), ("attn_output.weight", "attn_output"),
                     ("ffn_up", "ffn_up"), ("ffn_gate", "ffn_gate"), ("ffn_down", "ffn_down")):
        if key in name:
            return cat
    return "other"


def _more_bits(i: int, n: int) -> bool:
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def _layer(name: str) -> int:
    m = re.match(r"blk\.(\d+)\.", name)
    return int(m[1]) if m else 0


def _mix_type(mix: str, t: str, name: str, cols: int, ndim: int, facts: ModelFacts, i_wv: int, n_wv: int) -> str:
    cat = _category(name)
    experts8 = facts.n_expert == 8
    if cat == "output" or (facts.tied and cat == "token_embd"):
        if mix == "MXFP4_MOE" or cols % ggml_type(t).block_size:
            return "Q8_0"
        return "Q6_K" if t != "Q8_0" else t
    if mix == "MXFP4_MOE":
        return "MXFP4" if ndim == 3 else "Q8_0"
    if cat == "attn_v":
        if mix == "Q2_K":
            t = "Q4_K" if facts.n_gqa >= 4 else "Q3_K"
        elif mix == "Q2_K_S" and facts.n_gqa >= 4:
            t = "Q4_K"
        elif mix == "Q3_K_M":
            t = "Q5_K" if i_wv < 2 else "Q4_K"
        elif mix == "Q3_K_L":
            t = "Q5_K"
        elif mix in ("IQ4_NL", "IQ4_XS") and facts.n_gqa >= 4:
            t = "Q5_K"
        elif mix in ("Q4_K_M", "Q5_K_M") and _more_bits(i_wv, n_wv):
            t = "Q6_K"
        elif mix == "Q4_K_S" and i_wv < 4:
            t = "Q5_K"
        if facts.n_layers == 80 and t in ("Q3_K", "Q4_K"):  # llama.cpp's 70B rule (8 heads share attn_v)
            t = "Q5_K"
        return "Q8_0" if experts8 else t
    if cat == "attn_k":
        return "Q8_0" if experts8 else t
    if cat == "ffn_down":
        i, n = _layer(name), facts.n_layers
        if mix == "Q2_K":
            return "Q3_K"
        if mix == "Q2_K_S":
            return "Q4_K" if i < n // 8 else t
        if mix == "Q3_K_M":
            return "Q5_K" if i < n // 16 else "Q4_K"
        if mix == "Q3_K_L":
            return "Q5_K"
        if mix in ("Q4_K_M", "Q5_K_M"):
            return "Q6_K" if _more_bits(i, n) else t
        if mix in ("IQ4_NL", "IQ4_XS") and i < n // 8:
            return "Q5_K"
        if mix == "Q4_K_S" and i < n // 8:
            return "Q5_K"
        return t
    if cat == "attn_output":
        if experts8:
            return "Q5_K" if mix in ("Q2_K", "Q3_K_S", "Q3_K_M", "IQ4_NL", "Q4_K_S", "Q4_K_M", "IQ4_XS") else t
        return {"Q2_K": "Q3_K", "Q3_K_M": "Q4_K", "Q3_K_L": "Q5_K"}.get(mix, t)
    return t


def choose_types(mix: str, tensors: dict[str, tuple[int, ...]], facts: ModelFacts) -> dict[str, str]:
    """`{gguf name: ggml type name}` for the tensors (GGUF name -> numpy-order shape) that
    llama-quantize would quantize under `mix`; tensors it keeps as they are are left out.

    `mix` is a llama-quantize file type (`"Q4_K_M"`, `"Q8_0"`, ...); a plain ggml type name that
    is not one (`"Q4_K"`, `"MXFP4"`, ...) quantizes every eligible tensor to that type.
    """
    key = mix.upper()
    pure = key not in MIXES
    default = ggml_type(key).name if pure else MIXES[key]
    if not ggml_type(default).quantized:
        raise ValueError(f"quant_type {mix!r} is not a quantized type")
    eligible = {
        n: s for n, s in tensors.items() if len(s) in (2, 3) and n.endswith("weight") and not n.endswith(_KEEP_FLOAT)
    }
    attn_v = sorted((n for n in eligible if _category(n) == "attn_v"), key=_layer)
    position = {n: i for i, n in enumerate(attn_v)}
    out = {}
    for name, shape in eligible.items():
        cols = shape[-1]
        t = default if pure else _mix_type(key, default, name, cols, len(shape), facts, position.get(name, 0), len(attn_v))
        block = ggml_type(t).block_size
        if cols % block:
            t = _FALLBACK.get(t, t)
            if cols % ggml_type(t).block_size:
                t = "F16"  # llama.cpp's last resort for rows that fit no block
        out[name] = t
    return out


def _gguf_shape(param, hf_name: str, arch: str) -> tuple[int, ...]:
    """A parameter's shape as llama.cpp stores its (first) tensor, which the rules read: gpt-oss's
    experts are transposed in transformers."""
    from .archs import gpt_oss_part
    from .archs.conversions import gpt_oss_llamacpp_parts

    part = gpt_oss_part(hf_name, arch)
    return tuple((gpt_oss_llamacpp_parts(param, part)[0] if part else param).shape)


def model_types(model, mix: str, arch: str) -> dict[str, str]:
    """`{model parameter: ggml type name}` for quantizing `model` (on the meta device) as
    llama-quantize would quantize the same model written as a GGUF of `arch`."""
    from .archs import gguf_names

    text = model.config.get_text_config()
    tied = bool(getattr(text, "tie_word_embeddings", False) or getattr(model.config, "tie_word_embeddings", False))
    experts = getattr(text, "num_experts", None) or getattr(text, "num_local_experts", None) or 0
    heads = text.num_attention_heads
    facts = ModelFacts(text.num_hidden_layers, int(experts), heads // (getattr(text, "num_key_value_heads", None) or heads), tied)
    params = dict(model.named_parameters(remove_duplicate=False))
    by_gguf: dict[str, str] = {}
    for hf, names in gguf_names(model, arch).items():
        if tied and names[0] == "output.weight":
            continue  # shares the embedding's blocks
        by_gguf[names[0]] = hf  # a fused gate_up takes the rules of its first part, the gate
    chosen = choose_types(mix, {g: _gguf_shape(params[hf], hf, arch) for g, hf in by_gguf.items()}, facts)
    return {by_gguf[g]: t for g, t in chosen.items() if ggml_type(t).quantized}
