"""Conversion ops that undo what llama.cpp's converter did to a tensor, for transformers'
`WeightConverter`. Those marked `supports_packed` only move whole rows, so they are safe on
ggml blocks (a row of blocks is a row of weights); the others need float values.

Each op returns its tensor under the full parameter name it was asked for
(`full_layer_name`), so one converter with a layer-index pattern serves every layer.
"""
from __future__ import annotations

import torch
from transformers.core_model_loading import ConversionOps

from ..ggml import dequantize

__all__ = [
    "RopeUnpermuteRows", "NormPlusOne", "Reshape", "ConcatRows", "GptOssExpertsLayout", "gpt_oss_llamacpp_parts",
    "gpt_oss_from_llamacpp",
    "openai_mxfp4_to_ggml", "Mxfp4Repack", "Unpack", "Quantize",
]


def _single(input_dict: dict) -> torch.Tensor:
    (tensors,) = input_dict.values()
    return tensors[0] if isinstance(tensors, list) else tensors


class RopeUnpermuteRows(ConversionOps):
    """llama.cpp stores llama's q/k projections with each head's rows interleaved for its
    rotary embedding: head rows `[h, 2, d/2]` were written as `[h, d/2, 2]`. This restores
    transformers' half-split order. Rows move whole, so packed blocks are unaffected."""

    supports_packed = True

    def __init__(self, n_heads: int):
        self.n_heads = n_heads

    def convert(self, input_dict, source_patterns=None, target_patterns=None, full_layer_name=None, **kwargs):
        t = _single(input_dict)
        rows = t.shape[0]
        half = rows // self.n_heads // 2
        t = t.reshape(self.n_heads, half, 2, *t.shape[1:]).transpose(1, 2).reshape(rows, *t.shape[1:])
        return {full_layer_name: t.contiguous()}


class NormPlusOne(ConversionOps):
    """Gemma's RMSNorm multiplies by `1 + w`; llama.cpp stores `1 + w`. Subtract in the file's
    precision (float32), then cast, so the small `w` keeps its bits."""

    supports_packed = False

    def __init__(self, dtype: torch.dtype | None = None):
        self.dtype = dtype

    def convert(self, input_dict, source_patterns=None, target_patterns=None, full_layer_name=None, **kwargs):
        t = _single(input_dict).to(torch.float32) - 1.0
        return {full_layer_name: t.to(self.dtype) if self.dtype is not None else t}


class Reshape(ConversionOps):
    """A float tensor the file stores with a different (equal-sized) shape than the parameter."""

    supports_packed = False

    def __init__(self, shape: tuple[int, ...]):
        self.shape = shape

    def convert(self, input_dict, source_patterns=None, target_patterns=None, full_layer_name=None, **kwargs):
        return {full_layer_name: _single(input_dict).reshape(self.shape)}


class ConcatRows(ConversionOps):
    """Stack llama.cpp's separate expert gate and up tensors `[E, I, ...]` into transformers'
    fused `gate_up_proj` `[E, 2I, ...]`: whole rows again, in the converter's source order."""

    supports_packed = True

    def convert(self, input_dict, source_patterns=None, target_patterns=None, full_layer_name=None, **kwargs):
        parts = [input_dict[p] for p in source_patterns]
        parts = [p[0] if isinstance(p, list) else p for p in parts]
        # dim 1 is the row axis after the expert axis, for weights [E, rows, cols] and biases [E, rows].
        return {full_layer_name: torch.cat(parts, dim=1)}


def gpt_oss_llamacpp_parts(t: torch.Tensor, part: str) -> list[torch.Tensor]:
    """A tensor of transformers' `GptOssExperts` as llama.cpp's tensors (strided views, no copy):
    `gate_up` `[E, H, 2I]` -> gate, up `[E, I, H]`; `gate_up_bias` `[E, 2I]` -> gate, up `[E, I]`;
    `down` `[E, I, H]` -> `[E, H, I]`. Gate and up sit at the even and odd positions of 2I."""
    if part == "down":
        return [t.transpose(-1, -2)]
    halves = [t[..., 0::2], t[..., 1::2]]
    return [h.transpose(-1, -2) for h in halves] if part == "gate_up" else halves


def gpt_oss_from_llamacpp(t: torch.Tensor, part: str) -> torch.Tensor:
    """llama.cpp's `gate_up` `[E, 2I, H]` (gate rows, then up rows), `gate_up_bias` `[E, 2I]` or `down`
    `[E, H, I]` as transformers' `GptOssExperts` holds it (`gpt_oss_llamacpp_parts` goes the other way):
    `[E, H, 2I]` and `[E, 2I]` with gate and up interleaved along 2I, `[E, I, H]`."""
    if part in ("gate_up", "down"):
        t = t.transpose(-1, -2)
    if part.startswith("gate_up"):
        # [..., 2I] as (gate, up) halves -> (gate_0, up_0, gate_1, up_1, ...)
        t = t.unflatten(-1, (2, -1)).transpose(-1, -2).flatten(-2)
    return t.contiguous()


class GptOssExpertsLayout(ConversionOps):
    """Float gpt-oss experts between llama.cpp's layout and transformers' `GptOssExperts` one.

    After `ConcatRows`, llama.cpp's tensors are `gate_up` `[E, 2I, H]` (gate rows, then up rows),
    `down` `[E, H, I]` and the gate/up bias `[E, 2I]`. `GptOssExperts` multiplies from the left
    (`x @ W`), so it stores `gate_up_proj` `[E, H, 2I]` and `down_proj` `[E, I, H]`, with gate and
    up interleaved along 2I (gate at even, up at odd positions), the bias likewise; the down bias
    `[E, H]` is the same in both. Loading a GGUF, only for a module left unpacked (`GgufExperts`
    keeps llama.cpp's layout); `to_llamacpp=True` goes the other way, for a float gpt-oss
    checkpoint whose experts are quantized into a `GgufExperts` as they load."""

    supports_packed = False

    def __init__(self, part: str, to_llamacpp: bool = False):
        if part not in ("gate_up", "gate_up_bias", "down"):
            raise ValueError(f"GptOssExpertsLayout: unknown part {part!r}")
        self.part = part
        self.to_llamacpp = to_llamacpp

    def convert(self, input_dict, source_patterns=None, target_patterns=None, full_layer_name=None, **kwargs):
        t = _single(input_dict)
        if self.to_llamacpp:
            # the parts stacked along llama.cpp's row axis, as `ConcatRows` stacks them
            return {full_layer_name: torch.cat(gpt_oss_llamacpp_parts(t, self.part), dim=1).contiguous()}
        return {full_layer_name: gpt_oss_from_llamacpp(t, self.part)}


def openai_mxfp4_to_ggml(blocks: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """openai's MXFP4 rows (transformers' `*_blocks` `[..., G, 16]`: element 2k in the low nibble of
    byte k, 2k+1 in the high one; `*_scales` `[..., G]` e8m0) -> ggml `block_mxfp4` rows
    `[..., G * 17]`: the scale byte unchanged (both read it as 2^(e-127) times the e2m1 value), then
    qs[j] = element j (low nibble) | element j+16 (high nibble). A pure byte/nibble permutation."""
    codes = torch.stack((blocks & 0x0F, blocks >> 4), dim=-1).flatten(-2)  # [..., G, 32], element order
    qs = codes[..., :16] | (codes[..., 16:] << 4)
    return torch.cat((scales.unsqueeze(-1), qs), dim=-1).flatten(-2)


class Mxfp4Repack(ConversionOps):
    """gpt-oss experts as openai ships them (`*_blocks` + `*_scales`, one row per output feature,
    gate and up rows interleaved) -> ggml MXFP4 rows in llama.cpp's layout: `gate_up` `[E, 2I, H]`
    as gate rows then up rows, `down` `[E, H, I]`. Bytes move, nothing is rounded, so the result
    is what `GgufExperts` holds for an MXFP4 type; other types `Unpack` and requantize it."""

    supports_packed = True

    def __init__(self, part: str):
        if part not in ("gate_up", "down"):
            raise ValueError(f"Mxfp4Repack: unknown part {part!r}")
        self.part = part

    def convert(self, input_dict, source_patterns=None, target_patterns=None, full_layer_name=None, **kwargs):
        # (in that order; for experts left float transformers casts the bytes to the model dtype
        # on the way in, exactly: 0..255 are integers in any float type)
        blocks, scales = (_single({p: input_dict[p]}).to(torch.uint8) for p in source_patterns)
        rows = openai_mxfp4_to_ggml(blocks, scales)
        if self.part == "gate_up":
            rows = torch.cat((rows[:, 0::2], rows[:, 1::2]), dim=1)
        return {full_layer_name: rows.contiguous()}


class Unpack(ConversionOps):
    """Dequantize tensors whose module cannot hold blocks; runs before any other op but
    `Mxfp4Repack`. `types` gives each input key's ggml type (gate and up experts may differ)."""

    supports_packed = False

    def __init__(self, types: dict[str, int], dtype: torch.dtype):
        self.types = types
        self.dtype = dtype

    def convert(self, input_dict, source_patterns=None, target_patterns=None, full_layer_name=None, **kwargs):
        out = {key: [dequantize(_single({key: t}), self.types[key], self.dtype)] for key, t in input_dict.items()}
        # A lone tensor goes on under the parameter's name; several wait for the op that joins them.
        return {full_layer_name: out.popitem()[1]} if len(out) == 1 else out


class Quantize(ConversionOps):
    """Quantize float weights into ggml blocks as they load (`GgufQuantizeConfig(quant_type=...)`):
    one tensor at a time, on the device it was loaded to, so the dense model never exists whole."""

    def __init__(self, types: dict[str, str]):
        self.types = types  # parameter name -> ggml type name

    def convert(self, input_dict, source_patterns=None, target_patterns=None, full_layer_name=None, **kwargs):
        from ..ggml import quantize

        out = {}
        for name, value in input_dict.items():
            t = value[0] if isinstance(value, list) else value
            out[name] = quantize(t, self.types[name]) if name in self.types else t
        return out
