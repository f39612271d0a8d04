"""Tiny random-weight GGUF files of several architectures, written with gguf-py's writer and
quantizers, with llama.cpp's tensor names and metadata keys, and SmolLM2's tokenizer (from
`data/vocab.gguf`) so llama.cpp can run them."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFWriter, LlamaFileType, RopeScalingType
from gguf.quants import quantize

from gguf_quant.gguf_io.reader import read_gguf
from gguf_quant.gguf_io.writer import source_tokenizer

VOCAB = Path(__file__).parent / "data" / "vocab.gguf"


@dataclass
class Shape:
    hidden: int = 64
    ff: int = 128
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 16
    experts: int = 0  # > 0: a mixture-of-experts FFN in every layer
    used: int = 2
    ff_exp: int = 64
    ff_shexp: int = 96  # qwen2moe's shared expert
    window: int = 128  # sliding window of the architectures that have one


def _copy_tokenizer(w: GGUFWriter) -> int:
    meta = read_gguf(VOCAB).metadata
    for key, v in source_tokenizer(meta).items():
        w.add_key_value(key, v.value, v.type, v.sub_type)
    return len(meta["tokenizer.ggml.tokens"])


def _gpt_oss_layer(b: str, s: Shape) -> list[tuple[str, tuple[int, ...], str]]:
    """What llama.cpp's gpt-oss loader requires of a layer: biased attention with per-head sinks,
    a post-attention norm in place of ffn_norm, and a biased router and biased experts."""
    q, kv, e = s.heads * s.head_dim, s.kv_heads * s.head_dim, s.experts
    out = [(b + "attn_norm.weight", (s.hidden,), "norm"), (b + "post_attention_norm.weight", (s.hidden,), "norm")]
    out += [(b + f"attn_{x}.weight", (n, s.hidden), "matrix") for x, n in (("q", q), ("k", kv), ("v", kv))]
    out += [(b + f"attn_{x}.bias", (n,), "bias") for x, n in (("q", q), ("k", kv), ("v", kv))]
    out += [(b + "attn_output.weight", (s.hidden, q), "matrix"), (b + "attn_output.bias", (s.hidden,), "bias")]
    out += [(b + "attn_sinks.weight", (s.heads,), "sink")]
    out += [(b + "ffn_gate_inp.weight", (e, s.hidden), "router"), (b + "ffn_gate_inp.bias", (e,), "bias")]
    for x in ("gate", "up"):
        out += [(b + f"ffn_{x}_exps.weight", (e, s.ff_exp, s.hidden), "experts"), (b + f"ffn_{x}_exps.bias", (e, s.ff_exp), "bias")]
    out += [(b + "ffn_down_exps.weight", (e, s.hidden, s.ff_exp), "experts"), (b + "ffn_down_exps.bias", (e, s.hidden), "bias")]
    return out


def _arch_tensors(arch: str, s: Shape) -> list[tuple[str, tuple[int, ...], str]]:
    """(name, numpy shape, kind) per tensor; kind is 'matrix', 'experts', 'router', 'norm',
    'bias' or 'sink'."""
    if arch == "gpt-oss":
        return [t for i in range(s.layers) for t in _gpt_oss_layer(f"blk.{i}.", s)]
    q, kv = s.heads * s.head_dim, s.kv_heads * s.head_dim
    out = []
    for i in range(s.layers):
        b = f"blk.{i}."
        out += [(b + "attn_norm.weight", (s.hidden,), "norm"), (b + "attn_output.weight", (s.hidden, q), "matrix")]
        if arch == "phi3":
            out += [(b + "attn_qkv.weight", (q + 2 * kv, s.hidden), "matrix")]
            out += [(b + "ffn_up.weight", (2 * s.ff, s.hidden), "matrix")]
        else:
            out += [(b + "attn_q.weight", (q, s.hidden), "matrix"), (b + "attn_k.weight", (kv, s.hidden), "matrix")]
            out += [(b + "attn_v.weight", (kv, s.hidden), "matrix")]
        out += [(b + "ffn_norm.weight", (s.hidden,), "norm")]
        if s.experts:
            e = s.experts
            out += [(b + "ffn_gate_inp.weight", (e, s.hidden), "router")]
            out += [(b + f"ffn_{x}_exps.weight", (e, s.ff_exp, s.hidden), "experts") for x in ("gate", "up")]
            out += [(b + "ffn_down_exps.weight", (e, s.hidden, s.ff_exp), "experts")]
        elif arch == "starcoder2":  # a plain GELU MLP
            out += [(b + "ffn_up.weight", (s.ff, s.hidden), "matrix")]
        elif arch != "phi3":
            out += [(b + "ffn_gate.weight", (s.ff, s.hidden), "matrix"), (b + "ffn_up.weight", (s.ff, s.hidden), "matrix")]
        if not s.experts:
            out += [(b + "ffn_down.weight", (s.hidden, s.ff), "matrix")]
        if arch == "qwen2moe":
            out += [(b + f"ffn_{x}_shexp.weight", (s.ff_shexp, s.hidden), "matrix") for x in ("gate", "up")]
            out += [(b + "ffn_down_shexp.weight", (s.hidden, s.ff_shexp), "matrix")]
            out += [(b + "ffn_gate_inp_shexp.weight", (s.hidden,), "router")]
        if arch in ("qwen2", "qwen2moe"):
            out += [(b + f"attn_{x}.bias", (n,), "bias") for x, n in (("q", q), ("k", kv), ("v", kv))]
        if arch == "starcoder2":  # LayerNorms and every projection with a bias
            sizes = {"attn_norm": s.hidden, "ffn_norm": s.hidden, "attn_q": q, "attn_k": kv, "attn_v": kv,
                     "attn_output": s.hidden, "ffn_up": s.ff, "ffn_down": s.hidden}
            out += [(b + f"{x}.bias", (n,), "bias") for x, n in sizes.items()]
        if arch in ("qwen3", "qwen3moe", "gemma3"):
            out += [(b + "attn_q_norm.weight", (s.head_dim,), "norm"), (b + "attn_k_norm.weight", (s.head_dim,), "norm")]
        if arch in ("gemma2", "gemma3"):
            out += [(b + "post_attention_norm.weight", (s.hidden,), "norm"), (b + "post_ffw_norm.weight", (s.hidden,), "norm")]
    return out


def write_tiny(
    path: Path,
    arch: str,
    qtype: str = "Q8_0",
    shape: Shape | None = None,
    tied: bool = True,
    seed: int = 0,
    std: float = 0.05,
    router_std: float = 0.5,
    rope_factors: bool = False,
) -> Path:
    """`qtype` is a ggml type for every matrix, or "MXFP4_MOE" (llama-quantize's mix of that name:
    MXFP4 routed experts, Q8_0 for the other matrices)."""
    s = shape or Shape()
    rng = np.random.default_rng(seed)
    mxfp4_moe = qtype == "MXFP4_MOE"
    t = GGMLQuantizationType.Q8_0 if mxfp4_moe else GGMLQuantizationType[qtype]
    t_experts = GGMLQuantizationType.MXFP4 if mxfp4_moe else t
    w = GGUFWriter(str(path), arch)
    vocab = _copy_tokenizer(w)
    w.add_name(f"tiny-{arch}")
    # gpt-oss's context is its YaRN factor times the original one (below), as in its real files
    w.add_context_length(32 * 4096 if arch == "gpt-oss" else 256)
    w.add_embedding_length(s.hidden)
    w.add_block_count(s.layers)
    w.add_feed_forward_length(s.ff)
    w.add_head_count(s.heads)
    w.add_head_count_kv(s.kv_heads)
    w.add_key_length(s.head_dim)
    w.add_value_length(s.head_dim)
    w.add_rope_dimension_count(s.head_dim)
    w.add_rope_freq_base(10000.0)
    if arch == "starcoder2":
        w.add_layer_norm_eps(1e-5)
    else:
        w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(int(LlamaFileType.MOSTLY_MXFP4_MOE) if mxfp4_moe else int(t))
    if arch in ("gemma2", "gemma3", "phi3", "gpt-oss"):
        w.add_sliding_window(s.window)
    if arch == "gpt-oss":
        # gpt-oss's own YaRN settings (factor 32 over a 4096-token original context)
        w.add_rope_scaling_type(RopeScalingType.YARN)
        w.add_rope_scaling_factor(32.0)
        w.add_rope_scaling_orig_ctx_len(4096)
    if s.experts:
        w.add_expert_count(s.experts)
        w.add_expert_used_count(s.used)
        w.add_expert_feed_forward_length(s.ff_exp)
    if arch == "qwen2moe":
        w.add_expert_shared_feed_forward_length(s.ff_shexp)
    if arch == "gemma2":
        w.add_float32("gemma2.attn_logit_softcapping", 50.0)
        w.add_float32("gemma2.final_logit_softcapping", 30.0)

    def matrix(name, shp, qt=t):
        data = (rng.standard_normal(shp) * std).astype(np.float32)
        w.add_tensor(name, quantize(data, qt), raw_dtype=qt)

    if rope_factors:
        # Llama 3.1-style: low frequencies slowed down by up to 8x, as a per-frequency divisor.
        half = s.head_dim // 2
        w.add_tensor("rope_freqs.weight", np.linspace(1.0, 8.0, half, dtype=np.float32) ** 1.5 / 8 ** 0.5 + 0.5)
    matrix("token_embd.weight", (vocab, s.hidden))
    if not tied:
        matrix("output.weight", (vocab, s.hidden))
    # Norms near 1 (Gemma files store 1 + w, so near 1 there as well).
    w.add_tensor("output_norm.weight", (1 + 0.1 * rng.standard_normal(s.hidden)).astype(np.float32))
    if arch == "starcoder2":
        w.add_tensor("output_norm.bias", (0.1 * rng.standard_normal(s.hidden)).astype(np.float32))
    for name, shp, kind in _arch_tensors(arch, s):
        if kind in ("matrix", "experts"):
            matrix(name, shp, t_experts if kind == "experts" else t)
        elif kind == "router":
            # Decisive routing: near-tied experts would flip under llama.cpp's 8-bit activations.
            w.add_tensor(name, (rng.standard_normal(shp) * router_std).astype(np.float32))
        elif kind == "norm":
            w.add_tensor(name, (1 + 0.1 * rng.standard_normal(shp)).astype(np.float32))
        elif kind == "sink":
            # attention-sink logits, per head, on the scale of the attention scores
            w.add_tensor(name, rng.standard_normal(shp).astype(np.float32))
        else:
            w.add_tensor(name, (0.1 * rng.standard_normal(shp)).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def quantize_with_llamacpp(src: Path, dst: Path, ftype: str = "Q4_K_M") -> Path:
    """llama.cpp's own llama-quantize (through llama-cpp-python) on a float GGUF."""
    import ctypes

    llama_cpp = pytest.importorskip("llama_cpp")  # the CPU set-up installs it; the GPU machine has none

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{ftype}")
    params.nthread = 2
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize({src} -> {ftype}) failed with {rc}")
    return dst
