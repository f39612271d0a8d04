"""transformers model -> GGUF: tensor names, the inverse of the loading conversions, and the
architecture metadata llama.cpp reads.

The direction is the one llama.cpp's converter takes (HF checkpoint -> GGUF), done on the
loaded model: names come from gguf-py's published table (`gguf.get_tensor_name_map`), the
q/k rotary row order and Gemma's `1 + w` norms are redone (the inverse of `conversions.py`),
and metadata keys follow ggml's docs/gguf.md ("LLM" section) with the value types llama.cpp's
loader checks (it refuses a uint32 key stored as int32). Row moves work on packed blocks, so a
quantized weight is written with exactly the bytes it was loaded with.
"""
from __future__ import annotations

import logging
import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from gguf import GGMLQuantizationType, GGUFValueType, Keys, LlamaFileType
from gguf.gguf_writer import GGUFValue

from ..ggml.types import ggml_type
from ..modules import GgufEmbedding, GgufExperts, GgufLinear
from . import ARCH_RULES, ArchRules, gguf_names, gpt_oss_part
from .configs import yarn_mscale
from .conversions import gpt_oss_llamacpp_parts

__all__ = [
    "ExportError",
    "ExportTensor",
    "EXPORT_ARCHS",
    "gguf_arch",
    "export_tensors",
    "arch_metadata",
    "owned_keys",
    "file_type",
    "rope_permute_rows",
]

logger = logging.getLogger("gguf_quant")


class ExportError(ValueError):
    """A model that cannot be written as a GGUF llama.cpp runs; the message says what and why."""


# transformers `model_type` -> llama.cpp architecture name (the `general.architecture` value).
EXPORT_ARCHS: dict[str, str] = {
    "llama": "llama",
    "qwen2": "qwen2",
    "qwen3": "qwen3",
    "phi3": "phi3",
    "gemma2": "gemma2",
    "gemma3_text": "gemma3",
    "qwen2_moe": "qwen2moe",
    "qwen3_moe": "qwen3moe",
    "mixtral": "llama",  # llama.cpp writes Mixtral as llama with experts
    "mistral": "llama",  # and Mistral as llama
    "starcoder2": "starcoder2",
    "gpt_oss": "gpt-oss",
}

_F32 = GGMLQuantizationType.F32
_FLOAT_QTYPES = {torch.float32: _F32, torch.float16: GGMLQuantizationType.F16, torch.bfloat16: GGMLQuantizationType.BF16}


def _text_config(config):
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def gguf_arch(config) -> str:
    """The llama.cpp architecture a transformers config is written as."""
    model_type = _text_config(config).model_type
    arch = EXPORT_ARCHS.get(model_type)
    if arch is None:
        raise ExportError(
            f"save_gguf: cannot export model_type {model_type!r}; supported: "
            + ", ".join(f"{m} (as {a})" for m, a in EXPORT_ARCHS.items())
        )
    return arch


def _rules(arch: str) -> ArchRules:
    # The loader's table says what llama.cpp's converter did per architecture; the MoE ones
    # it may not list yet only rename (no row order change, no `1 + w`).
    return ARCH_RULES.get(arch, ArchRules())


# --- tensors ---------------------------------------------------------------------------------


@dataclass
class ExportTensor:
    """One GGUF tensor: its name, ggml type, shape in elements (torch order, rows first) and
    a function producing its data (uint8 rows of blocks for block types and BF16, the element
    dtype for F32/F16), called only when the tensor is written."""

    name: str
    qtype: GGMLQuantizationType
    shape: tuple[int, ...]
    data: Callable[[], np.ndarray]

    @property
    def nbytes(self) -> int:
        t = ggml_type(int(self.qtype))
        return math.prod(self.shape) // t.block_size * t.type_size


def rope_permute_rows(t: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Reorder q/k rows from transformers' half-split rotary layout to ggml's interleaved one:
    each head's rows `[2, d/2]` become `[d/2, 2]` (the inverse of `RopeUnpermuteRows`). Only
    whole rows move, so it is the same on float weights and on rows of ggml blocks."""
    rows = t.shape[0]
    half = rows // n_heads // 2
    return t.reshape(n_heads, 2, half, *t.shape[1:]).transpose(1, 2).reshape(rows, *t.shape[1:]).contiguous()


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    """Host bytes of a tensor, in the dtype GGUFWriter takes (numpy has no bfloat16: its bytes)."""
    if t.device.type == "meta":
        raise ExportError("save_gguf: the model has weights on the meta device (not loaded); load it fully first")
    t = t.detach().to("cpu").contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.uint8)
    return t.numpy()


def _float_tensor(name: str, t: torch.Tensor, transform=None, force_f32: bool = False) -> ExportTensor:
    """A float parameter, in its own dtype (F32/F16/BF16), or F32 when llama.cpp wants F32
    (norms, biases: 1-D tensors, which ggml adds and multiplies in F32)."""
    qtype = _F32 if force_f32 or t.dim() == 1 else _FLOAT_QTYPES.get(t.dtype)
    if qtype is None:
        raise ExportError(f"save_gguf: {name} has dtype {t.dtype}, which GGUF cannot store as a weight")
    dtype = {_F32: torch.float32, GGMLQuantizationType.F16: torch.float16}.get(qtype, torch.bfloat16)

    def data():
        x = t.detach()
        if transform is not None:
            x = transform(x)
        return _to_numpy(x.to(dtype))

    return ExportTensor(name, qtype, tuple(t.shape), data)


def _packed_tensor(name: str, blocks: torch.Tensor, qtype: int, cols: int, transform=None) -> ExportTensor:
    """A weight kept in ggml blocks: `blocks` is uint8 `[*rows, row_bytes]`, written as is."""
    t = ggml_type(qtype)
    if blocks.shape[-1] != t.row_bytes(cols):
        raise ExportError(f"save_gguf: {name}: rows of {blocks.shape[-1]} bytes, expected {t.row_bytes(cols)} for {t.name}")

    def data():
        x = blocks.detach()
        if transform is not None:
            x = transform(x)
        return _to_numpy(x)

    return ExportTensor(name, GGMLQuantizationType(qtype), (*blocks.shape[:-1], cols), data)


def _is_norm(gguf_name: str) -> bool:
    return gguf_name.endswith("norm.weight")


def _q_or_k(gguf_name: str) -> str | None:
    m = re.search(r"\.attn_(q|k)\.(weight|bias)$", gguf_name)
    return m[1] if m else None


# Tensors llama.cpp declares flatter than transformers' parameter: Qwen2-MoE's shared-expert
# gate is a `[1, hidden]` Linear in transformers, a `{n_embd}` vector in llama.cpp.
_VECTORS = re.compile(r"\.ffn_gate_inp_shexp\.weight$")
# Float tensors llama.cpp's converter always writes as F32, whatever their rank: biases (ggml adds
# gpt-oss's `[E, rows]` expert biases with an F32-only op) and MoE routers.
_F32_ONLY = re.compile(r"(\.bias|\.ffn_gate_inp\.weight)$")


def _packing(module: torch.nn.Module, param: str) -> tuple[int, int] | None:
    """(ggml type, elements per row) of a parameter held as ggml blocks, or None for a float one."""
    if param == "weight" and isinstance(module, GgufLinear):
        return module.qtype, module.in_features
    if param == "weight" and isinstance(module, GgufEmbedding):
        return module.qtype, module.embedding_dim
    if isinstance(module, GgufExperts) and param == "gate_up_proj":
        return module.gate_up_qtype, module.hidden_dim
    if isinstance(module, GgufExperts) and param == "down_proj":
        return module.down_qtype, module.intermediate_dim
    return None


def _same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.device == b.device and a.data_ptr() == b.data_ptr()


def export_tensors(model: torch.nn.Module, arch: str) -> list[ExportTensor]:
    """Every GGUF tensor of `model` in llama.cpp's naming and layout, in the model's order.

    Names come from `archs.gguf_names` (the table the loader inverts); a parameter with no GGUF
    name raises ExportError rather than being dropped.
    """
    text = _text_config(model.config)
    if any(p.device.type == "meta" for p in model.parameters()):
        raise ExportError("save_gguf: the model has weights on the meta device (not loaded); load them first")
    rules = _rules(arch)
    heads = {"q": text.num_attention_heads, "k": getattr(text, "num_key_value_heads", None) or text.num_attention_heads}
    names = gguf_names(model, arch)
    embed = model.get_input_embeddings().weight if hasattr(model, "get_input_embeddings") else None
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None

    out: list[ExportTensor] = []
    unnamed: list[str] = []
    for hf_name, t in model.state_dict(keep_vars=True).items():
        module_name, _, param = hf_name.rpartition(".")
        module = model.get_submodule(module_name)
        # llama.cpp reuses token_embd when the file has no output projection: a tied head
        # is written once, as the embedding.
        if module is head and param == "weight" and embed is not None and _same_storage(t, embed):
            continue
        if hf_name not in names:
            unnamed.append(hf_name)
            continue
        # transformers' own gpt-oss experts (float) are transposed and interleaved; GgufExperts are not
        part = None if isinstance(module, GgufExperts) else gpt_oss_part(hf_name, arch)
        out += _tensors_of(names[hf_name], t, _packing(module, param), rules, heads, part)
    if unnamed:
        raise ExportError(f"save_gguf: no GGUF tensor name for {', '.join(unnamed)} (architecture {arch})")
    out += _extra_tensors(text, arch)
    return out


def _tensors_of(
    gguf_names_: list[str], t: torch.Tensor, packing, rules: ArchRules, heads: dict, gpt_oss: str | None = None
) -> list[ExportTensor]:
    """The GGUF tensor(s) of one parameter: a fused expert `gate_up_proj` `[E, 2I, ...]` is two,
    llama.cpp's gate (the first I rows of each expert) and up (the next I); `gpt_oss` names the
    part of a `GptOssExperts` parameter, whose tensors are views in llama.cpp's layout instead."""
    if gpt_oss is not None:
        parts = gpt_oss_llamacpp_parts(t, gpt_oss)
    elif len(gguf_names_) > 1:
        rows = t.shape[1] // len(gguf_names_)
        parts = [t[:, i * rows : (i + 1) * rows] for i in range(len(gguf_names_))]
    else:
        parts = [t]
    return [_one_tensor(name, part, packing, rules, heads) for name, part in zip(gguf_names_, parts)]


def _one_tensor(gguf_name: str, t: torch.Tensor, packing, rules: ArchRules, heads: dict) -> ExportTensor:
    qk = _q_or_k(gguf_name) if rules.rope_permuted else None
    permute = (lambda x, n=heads[qk]: rope_permute_rows(x, n)) if qk else None  # noqa: E731
    if packing is not None:
        return _packed_tensor(gguf_name, t, *packing, permute)
    if t.dtype == torch.uint8:
        raise ExportError(f"save_gguf: {gguf_name} holds raw bytes in a module that does not say their ggml type")
    if rules.norm_plus_one and _is_norm(gguf_name):
        # Gemma's RMSNorm multiplies by (1 + w); llama.cpp's by the stored value. Add in float32.
        return _float_tensor(gguf_name, t, lambda x: x.to(torch.float32) + 1.0, force_f32=True)
    if _VECTORS.search(gguf_name):
        return _float_tensor(gguf_name, t.reshape(-1), force_f32=True)
    return _float_tensor(gguf_name, t, permute, force_f32=bool(_F32_ONLY.search(gguf_name)))


def _extra_tensors(text, arch: str) -> list[ExportTensor]:
    """Tensors llama.cpp needs that transformers computes instead of storing."""
    rope = _rope_parameters(text)
    factors = getattr(text, "rope_freq_factors", None)
    if arch == "llama" and factors is not None:  # loaded from a file that had them: write them back as read
        table = torch.tensor(factors, dtype=torch.float32)
        return [ExportTensor("rope_freqs.weight", _F32, tuple(table.shape), lambda: table.numpy())]
    if arch == "llama" and rope.get("rope_type") == "llama3":
        factors = _llama3_rope_factors(text)
        return [ExportTensor("rope_freqs.weight", _F32, tuple(factors.shape), lambda: factors.numpy())]
    return []


def _llama3_rope_factors(text) -> torch.Tensor:
    """llama.cpp applies Llama 3.1's frequency scaling as a per-frequency divisor (`rope_freqs`):
    the unscaled inverse frequencies `base^(-2i/d)` over the ones transformers' llama3 rope
    code computes, so the two runtimes rotate by the same angles."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    scaled, _ = ROPE_INIT_FUNCTIONS["llama3"](text, "cpu")
    dim = scaled.shape[0] * 2
    base = _rope_parameters(text)["rope_theta"]
    default = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float32) / dim))
    return (default / scaled.to(torch.float32)).to(torch.float32).contiguous()


# --- metadata --------------------------------------------------------------------------------


def _u32(v) -> GGUFValue:
    return GGUFValue(int(v), GGUFValueType.UINT32)


def _f32(v) -> GGUFValue:
    return GGUFValue(float(v), GGUFValueType.FLOAT32)


def _str(v) -> GGUFValue:
    return GGUFValue(str(v), GGUFValueType.STRING)


def _rope_parameters(text) -> dict:
    rp = getattr(text, "rope_parameters", None) or {}
    if isinstance(rp.get("full_attention"), dict):  # per layer type (Gemma 3): the global layers'
        rp = rp["full_attention"]
    rp = dict(rp)
    rp.setdefault("rope_theta", getattr(text, "rope_theta", 10000.0))
    rp.setdefault("rope_type", "default")
    return rp


def _head_dim(text) -> int:
    return getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads


def _partial_rotary(text) -> float:
    rp = getattr(text, "rope_parameters", None) or {}
    return float(rp.get("partial_rotary_factor", getattr(text, "partial_rotary_factor", None) or 1.0))


def _rope_scaling(text, arch: str) -> dict[str, GGUFValue]:
    rp = _rope_parameters(text)
    kind = rp["rope_type"]
    k = lambda key: key.format(arch=arch)  # noqa: E731
    if kind in ("default", "llama3"):  # llama3: the rope_freqs tensor carries it
        return {}
    if kind == "linear":
        return {k(Keys.Rope.SCALING_TYPE): _str("linear"), k(Keys.Rope.SCALING_FACTOR): _f32(rp["factor"])}
    if kind == "yarn":
        out = {k(Keys.Rope.SCALING_TYPE): _str("yarn"), k(Keys.Rope.SCALING_FACTOR): _f32(rp["factor"])}
        orig = rp.get("original_max_position_embeddings")
        if orig is not None:
            out[k(Keys.Rope.SCALING_ORIG_CTX_LEN)] = _u32(orig)
        for hf_key, key in (
            ("extrapolation_factor", Keys.Rope.SCALING_YARN_EXT_FACTOR),
            ("attention_factor", Keys.Rope.SCALING_YARN_ATTN_FACTOR),
            ("beta_fast", Keys.Rope.SCALING_YARN_BETA_FAST),
            ("beta_slow", Keys.Rope.SCALING_YARN_BETA_SLOW),
        ):
            if rp.get(hf_key) is not None:
                out[k(key)] = _f32(rp[hf_key])
        return out
    raise ExportError(f"save_gguf: rope type {kind!r} of this {arch} model has no GGUF equivalent written here")


def _swa_pattern(text, arch: str, period: int) -> dict[str, GGUFValue]:
    """The per-layer sliding flags as llama.cpp's pattern key, or nothing when they follow its
    default pattern (every `period`-th layer global, the others sliding)."""
    types = getattr(text, "layer_types", None)
    if not types:
        return {}
    flags = [t == "sliding_attention" for t in types]
    if flags == [(i + 1) % period != 0 for i in range(len(types))]:
        return {}
    return {Keys.Attention.SLIDING_WINDOW_PATTERN.format(arch=arch): GGUFValue(flags, GGUFValueType.ARRAY, GGUFValueType.BOOL)}


def _base_metadata(text, arch: str) -> dict[str, GGUFValue]:
    k = lambda key: key.format(arch=arch)  # noqa: E731
    heads = text.num_attention_heads
    head_dim = _head_dim(text)
    meta = {
        k(Keys.LLM.CONTEXT_LENGTH): _u32(text.max_position_embeddings),
        k(Keys.LLM.EMBEDDING_LENGTH): _u32(text.hidden_size),
        k(Keys.LLM.BLOCK_COUNT): _u32(text.num_hidden_layers),
        k(Keys.LLM.FEED_FORWARD_LENGTH): _u32(text.intermediate_size),
        k(Keys.Attention.HEAD_COUNT): _u32(heads),
        k(Keys.Attention.HEAD_COUNT_KV): _u32(getattr(text, "num_key_value_heads", None) or heads),
        k(Keys.Attention.KEY_LENGTH): _u32(head_dim),
        k(Keys.Attention.VALUE_LENGTH): _u32(head_dim),
        # RMSNorm models state its epsilon; StarCoder2's LayerNorms theirs under another key
        **(
            {k(Keys.Attention.LAYERNORM_EPS): _f32(text.norm_epsilon)}
            if hasattr(text, "norm_epsilon")
            else {k(Keys.Attention.LAYERNORM_RMS_EPS): _f32(text.rms_norm_eps)}
        ),
        k(Keys.Rope.FREQ_BASE): _f32(_rope_parameters(text)["rope_theta"]),
        k(Keys.Rope.DIMENSION_COUNT): _u32(int(head_dim * _partial_rotary(text))),
        k(Keys.LLM.VOCAB_SIZE): _u32(text.vocab_size),
    }
    meta.update(_rope_scaling(text, arch))
    return meta


def _gemma_metadata(text, arch: str, period: int, layers_27b: int) -> dict[str, GGUFValue]:
    k = lambda key: key.format(arch=arch)  # noqa: E731
    meta = {}
    types = getattr(text, "layer_types", None) or []
    if getattr(text, "sliding_window", None) and (arch == "gemma2" or "sliding_attention" in types):
        meta[k(Keys.Attention.SLIDING_WINDOW)] = _u32(text.sliding_window)
    meta.update(_swa_pattern(text, arch, period))
    rp = getattr(text, "rope_parameters", None) or {}
    if isinstance(rp.get("sliding_attention"), dict) and rp["sliding_attention"].get("rope_theta") is not None:
        meta[k(Keys.Rope.FREQ_BASE_SWA)] = _f32(rp["sliding_attention"]["rope_theta"])
    for attr, key in (("attn_logit_softcapping", Keys.LLM.ATTN_LOGIT_SOFTCAPPING), ("final_logit_softcapping", Keys.LLM.FINAL_LOGIT_SOFTCAPPING)):
        if getattr(text, attr, None) is not None:
            meta[k(key)] = _f32(getattr(text, attr))
    # llama.cpp fixes the query scale from the layer count (1/sqrt(hidden/heads) for the 27B
    # models, 1/sqrt(head_dim) otherwise); transformers reads query_pre_attn_scalar.
    scalar = getattr(text, "query_pre_attn_scalar", None)
    large = text.num_hidden_layers == layers_27b
    expected = text.hidden_size // text.num_attention_heads if large else _head_dim(text)
    if scalar is not None and scalar != expected:
        logger.warning(
            f"save_gguf: query_pre_attn_scalar={scalar}, but llama.cpp scales {arch} queries by "
            f"1/sqrt({expected}) for {text.num_hidden_layers} layers; llama.cpp will compute differently"
        )
    return meta


def _moe_metadata(text, arch: str, norm_topk: bool, shared: bool = False) -> dict[str, GGUFValue]:
    """Expert counts and widths; `norm_topk`: whether llama.cpp renormalises the chosen experts'
    weights for this architecture (it fixes that per architecture, transformers reads it)."""
    k = lambda key: key.format(arch=arch)  # noqa: E731
    if (getattr(text, "decoder_sparse_step", 1) or 1) != 1 or getattr(text, "mlp_only_layers", None):
        raise ExportError(f"save_gguf: llama.cpp's {arch} needs experts in every layer (decoder_sparse_step=1, no mlp_only_layers)")
    if bool(getattr(text, "norm_topk_prob", norm_topk)) != norm_topk:
        logger.warning(
            f"save_gguf: norm_topk_prob={text.norm_topk_prob}, but llama.cpp's {arch} "
            f"{'always' if norm_topk else 'never'} renormalises the top-k router weights"
        )
    meta = {
        k(Keys.LLM.EXPERT_COUNT): _u32(getattr(text, "num_experts", None) or text.num_local_experts),
        k(Keys.LLM.EXPERT_USED_COUNT): _u32(text.num_experts_per_tok),
    }
    # Mixtral's experts are intermediate_size wide (llama.cpp reads feed_forward_length for them).
    width = getattr(text, "moe_intermediate_size", None) or getattr(text, "intermediate_size", None)
    if width:
        meta[k(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH)] = _u32(width)
    if shared and getattr(text, "shared_expert_intermediate_size", None):
        meta[k(Keys.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH)] = _u32(text.shared_expert_intermediate_size)
    return meta


def _gpt_oss_metadata(text, arch: str) -> dict[str, GGUFValue]:
    """Experts, sliding window and YaRN attention factor as llama.cpp runs gpt-oss (the inverse
    of archs/configs.py `_gpt_oss`)."""
    k = lambda key: key.format(arch=arch)  # noqa: E731
    if not getattr(text, "attention_bias", False):
        raise ExportError("save_gguf: llama.cpp's gpt-oss needs the attention output bias (attention_bias=True)")
    # transformers softmaxes the chosen experts' logits, as llama.cpp's gpt-oss gating does
    meta = _moe_metadata(text, arch, norm_topk=True)
    meta[k(Keys.Attention.SLIDING_WINDOW)] = _u32(text.sliding_window or 0)
    meta.update(_swa_pattern(text, arch, period=2))
    rp = _rope_parameters(text)
    if rp["rope_type"] != "yarn":
        return meta
    # llama.cpp also rounds YaRN's correction range outwards (transformers' `truncate=True`, which
    # gpt-oss's own config leaves off): a small difference in a few middle frequencies.
    betas = (rp.get("beta_fast", 32.0), rp.get("beta_slow", 1.0))  # transformers' defaults are llama.cpp's
    if betas != (32.0, 1.0):
        logger.warning(
            f"save_gguf: YaRN beta_fast={betas[0]}, beta_slow={betas[1]}, but llama.cpp runs gpt-oss with 32 and 1 "
            "whatever the file says; llama.cpp will rotate differently"
        )
    if rp.get("attention_factor") is not None:
        # llama.cpp scales cos/sin by its own YaRN factor times this key
        meta[k(Keys.Rope.SCALING_ATTN_FACTOR)] = _f32(rp["attention_factor"] / yarn_mscale(rp["factor"]))
    return meta


def arch_metadata(config, arch: str | None = None) -> dict[str, GGUFValue]:
    """The `{arch}.*` keys for a transformers config: what archs/configs.py reads, written back."""
    text = _text_config(config)
    arch = arch or gguf_arch(config)
    k = lambda key: key.format(arch=arch)  # noqa: E731
    meta = _base_metadata(text, arch)
    if arch == "phi3":
        # llama.cpp tells Phi-3 from Phi-4 by a present sliding window (0: none).
        meta[k(Keys.Attention.SLIDING_WINDOW)] = _u32(getattr(text, "sliding_window", None) or 0)
    elif arch == "gemma2":
        meta.update(_gemma_metadata(text, arch, period=2, layers_27b=46))
    elif arch == "gemma3":
        meta.update(_gemma_metadata(text, arch, period=6, layers_27b=62))
    elif arch == "qwen2moe":
        meta.update(_moe_metadata(text, arch, norm_topk=False, shared=True))
    elif arch == "qwen3moe":
        meta.update(_moe_metadata(text, arch, norm_topk=True))
    elif arch == "llama" and getattr(text, "num_local_experts", None):
        meta.update(_moe_metadata(text, arch, norm_topk=True))  # Mixtral; each expert is feed_forward_length wide
    elif arch == "gpt-oss":
        meta.update(_gpt_oss_metadata(text, arch))
    return meta


def owned_keys(arch: str) -> set[str]:
    """The `{arch}.*` keys the config decides, written or left out: a source file's value for
    one of these is never carried over, so a changed config is what gets written. (YaRN's fine
    tuning keys are not here: the config builders do not read them, so a source's are kept.)"""
    groups = [Keys.LLM, Keys.Attention, Keys.Rope]
    names = {
        "CONTEXT_LENGTH", "EMBEDDING_LENGTH", "BLOCK_COUNT", "FEED_FORWARD_LENGTH", "VOCAB_SIZE",
        "HEAD_COUNT", "HEAD_COUNT_KV", "KEY_LENGTH", "VALUE_LENGTH", "LAYERNORM_RMS_EPS",
        "SLIDING_WINDOW", "SLIDING_WINDOW_PATTERN", "ATTN_LOGIT_SOFTCAPPING", "FINAL_LOGIT_SOFTCAPPING",
        "EXPERT_COUNT", "EXPERT_USED_COUNT", "EXPERT_FEED_FORWARD_LENGTH", "EXPERT_SHARED_FEED_FORWARD_LENGTH",
        "FREQ_BASE", "FREQ_BASE_SWA", "DIMENSION_COUNT", "SCALING_TYPE", "SCALING_FACTOR", "SCALING_ORIG_CTX_LEN",
    }
    owned = {getattr(g, n).format(arch=arch) for g in groups for n in names if hasattr(g, n)}
    if arch == "gpt-oss":  # read into the YaRN attention factor
        owned.add(Keys.Rope.SCALING_ATTN_FACTOR.format(arch=arch))
    return owned


def file_type(tensors: list[ExportTensor]) -> int | None:
    """`general.file_type` for a set of tensors: the type most matrices have, as llama.cpp's
    loader guesses it (counting tensors of 2+ dimensions), or None when no file type names it."""
    counts = Counter(t.qtype for t in tensors if len(t.shape) >= 2)
    if not counts:
        return None
    if any(t.qtype == GGMLQuantizationType.MXFP4 and len(t.shape) == 3 for t in tensors):
        return int(LlamaFileType.MOSTLY_MXFP4_MOE)  # the one llama-quantize mix that writes MXFP4 experts
    qtype = counts.most_common(1)[0][0]
    if qtype == _F32:
        return int(LlamaFileType.ALL_F32)
    # K-quant files are named by their mix; a file mostly of one K type reads as its _M mix.
    for name in (f"MOSTLY_{qtype.name}", f"MOSTLY_{qtype.name}_M", f"MOSTLY_{qtype.name}_MOE"):
        if name in LlamaFileType.__members__:
            return int(LlamaFileType[name])
    return None
