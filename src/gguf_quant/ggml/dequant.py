"""Dequantize ggml blocks to floats in pure torch.

One small function per ggml block type, each naming the public block layout it reads
(the `block_*` structs of ggml's ggml-common.h). Every function takes the blocks of one
type as a uint8 tensor `[n_blocks, type_size]` and returns `[n_blocks, block_size]`
float32; `dequantize` handles rows, batch dimensions, validation and the output dtype.

The arithmetic mirrors gguf-py's `gguf.quants` in float32, operation for operation,
so the results equal `gguf.quants.dequantize` bit for bit. Codes stay 8-bit integers until
one conversion to float, and the scale and offset are applied in place on that fresh tensor:
every full-size temporary is another pass over memory and, on the CPU, another allocation.

Everything is vectorised torch: no Python loops over blocks, no host synchronisation,
no numpy in the hot path, so the same code runs on CPU, CUDA and MPS tensors. Lookup
tables (IQ grids, sign patterns, non-linear value tables) are format constants: they
are built once on the CPU (the IQ grids are taken from the `gguf` package, which ships
them) and cached per device.
"""
from __future__ import annotations

import functools
from typing import Callable

import torch
from gguf import quants as gguf_quants
from gguf.constants import GGMLQuantizationType
from torch import Tensor

from .types import GgmlType, ggml_type

__all__ = ["dequantize", "DEQUANTIZABLE_TYPES"]

QK_K = 256  # elements in a k-quant / i-quant super-block

# Plain element types: the row bytes are simply reinterpreted.
_PLAIN_DTYPES: dict[str, torch.dtype] = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


# ---------------------------------------------------------------------------------------
# Byte and bit helpers
# ---------------------------------------------------------------------------------------


def _bytes_as(b: Tensor, dtype: torch.dtype) -> Tensor:
    """Reinterpret the little-endian bytes of the last dim of `b` as `dtype` values."""
    # Tensor.view(dtype) needs a contiguous, suitably aligned last dim: a field sliced out
    # of a block is neither, so view a fresh contiguous copy (the fields are small).
    return b.clone(memory_format=torch.contiguous_format).view(dtype)


def _f16(b: Tensor) -> Tensor:
    """`[..., 2k]` bytes holding k ggml_half values -> `[..., k]` float32."""
    return _bytes_as(b, torch.float16).float()


def _f16_from_bits(bits: Tensor) -> Tensor:
    """int32 tensor of 16-bit patterns (0..65535) -> float32 value of those fp16 patterns."""
    signed = ((bits & 0xFFFF) ^ 0x8000) - 0x8000  # into int16 range, same bit pattern
    return signed.to(torch.int16).view(torch.float16).float()


def _u16(b: Tensor) -> Tensor:
    """`[..., 2k]` bytes -> `[..., k]` uint16 values, as int32."""
    return _bytes_as(b, torch.int16).to(torch.int32) & 0xFFFF


def _u32(b: Tensor) -> Tensor:
    """`[..., 4k]` bytes -> `[..., k]` uint32 bit patterns in int32 (mask after shifting)."""
    return _bytes_as(b, torch.int32)


@functools.lru_cache(maxsize=None)
def _steps(count: int, step: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    """`[0, step, 2 * step, ...]` (`count` values), cached per device."""
    return torch.arange(count, dtype=dtype, device=device) * step


def _bits(x: Tensor, width: int, count: int, dim: int = -2) -> Tensor:
    """Split every element of the integer tensor `x` into `count` fields of `width` bits,
    lowest field first, laid out along a new axis inserted at `dim` (negative)."""
    # One shift by a constant per field, then one stack: on the CPU a shift by a broadcast tensor
    # of amounts, or into a strided slice, is not vectorised (7x slower for nibbles).
    mask = (1 << width) - 1
    return torch.stack([(x >> (width * i)) & mask if i else x & mask for i in range(count)], dim=dim)


def _nibbles(qs: Tensor) -> Tensor:
    """`[..., k]` bytes -> `[..., 2k]` 4-bit values: the k low nibbles, then the k high nibbles
    (the order every ggml 4-bit layout uses within a group of bytes)."""
    return _bits(qs, 4, 2).flatten(-2)


# ---------------------------------------------------------------------------------------
# Format constants, built once on the CPU and cached per device
# ---------------------------------------------------------------------------------------


def _gguf_grid(class_name: str) -> Tensor:
    """An i-quant grid as gguf-py decodes it from its packed form: `[n_points, point_size]`."""
    cls = getattr(gguf_quants, class_name)
    cls.init_grid()
    return torch.tensor(cls.grid.reshape(cls.grid_shape), dtype=torch.float32)


def _byte_signs() -> Tensor:
    """`[256, 8]`: +1 / -1 for each bit (lowest first) of a byte being 0 / 1."""
    bits = (torch.arange(256).unsqueeze(-1) >> torch.arange(8)) & 1
    return (1 - 2 * bits).float()


def _ksigns() -> Tensor:
    """`[128, 8]`: ggml's ksigns_iq2xs as signs; 7 stored bits plus an implied even-parity bit."""
    return _byte_signs()[torch.tensor(list(gguf_quants.IQ2_XXS.ksigns), dtype=torch.long)]


def _e8m0_half() -> Tensor:
    """`[256]`: ggml_e8m0_to_fp32_half, half of 2**(e - 127), for every E8M0 byte e."""
    e = torch.arange(256, dtype=torch.int32)
    bits = torch.where(e < 2, torch.bitwise_left_shift(0x00200000, e), (e - 1) << 23)
    return bits.view(torch.float32)


def _ue4m3_half() -> Tensor:
    """`[256]`: an unsigned E4M3 (bias 7) scale byte times 0.5, as gguf-py decodes it
    (bit 7 ignored; 0x00 and 0x7F decode to 0)."""
    values = []
    for x in range(256):
        exp, man = (x >> 3) & 0xF, x & 0x7
        raw = man * 2.0**-9 if exp == 0 else (1.0 + man / 8.0) * 2.0 ** (exp - 7)
        values.append(0.0 if x in (0x00, 0x7F) else raw * 0.5)  # all exact in float32
    return torch.tensor(values, dtype=torch.float32)


def _kvalues(class_name: str) -> Tensor:
    """A non-linear 4-bit value table (integers) that gguf-py publishes as `kvalues`."""
    return torch.tensor(getattr(gguf_quants, class_name).kvalues, dtype=torch.float32)


_TABLE_BUILDERS: dict[str, Callable[[], Tensor]] = {
    "iq2xxs_grid": lambda: _gguf_grid("IQ2_XXS"),
    "iq2xs_grid": lambda: _gguf_grid("IQ2_XS"),
    "iq2s_grid": lambda: _gguf_grid("IQ2_S"),
    "iq3xxs_grid": lambda: _gguf_grid("IQ3_XXS"),
    "iq3s_grid": lambda: _gguf_grid("IQ3_S"),
    "iq1s_grid": lambda: _gguf_grid("IQ1_S"),
    "ksigns": _ksigns,
    "byte_signs": _byte_signs,
    "kvalues_iq4nl": lambda: _kvalues("IQ4_NL"),
    "kvalues_fp4": lambda: _kvalues("MXFP4"),  # doubled E2M1 values, shared by MXFP4 and NVFP4
    "e8m0_half": _e8m0_half,
    "ue4m3_half": _ue4m3_half,
}


@functools.lru_cache(maxsize=None)
def _cpu_table(name: str) -> Tensor:
    return _TABLE_BUILDERS[name]()


@functools.lru_cache(maxsize=None)
def _table(name: str, device: torch.device) -> Tensor:
    return _cpu_table(name).to(device)


def _lookup(name: str, index: Tensor) -> Tensor:
    """Rows of the constant table `name` at integer `index` (any shape), on index's device."""
    table = _table(name, index.device)
    # index_select with int32 indices: on the CPU 3x faster than indexing with int64
    rows = table.index_select(0, index.reshape(-1).to(torch.int32))
    return rows.view(*index.shape, *table.shape[1:])


# ---------------------------------------------------------------------------------------
# Legacy 32-element blocks
# ---------------------------------------------------------------------------------------


def _q5_legacy(qh: Tensor, qs: Tensor) -> Tensor:
    """5-bit quants of block_q5_0 / block_q5_1: nibbles of qs, bit 4 from the 32-bit qh."""
    high = _bits(qh, 1, 8, dim=-1).flatten(-2)  # bit j of the little-endian 32-bit qh: bit j % 8 of byte j // 8
    return _nibbles(qs).bitwise_or_(high.bitwise_left_shift_(4))


def _q4_0(blocks: Tensor) -> Tensor:
    # block_q4_0: ggml_half d; uint8_t qs[16]
    d, qs = blocks.split([2, 16], dim=-1)
    return _nibbles(qs).view(torch.int8).sub_(8).float().mul_(_f16(d))


def _q4_1(blocks: Tensor) -> Tensor:
    # block_q4_1: ggml_half d, m; uint8_t qs[16]
    d, m, qs = blocks.split([2, 2, 16], dim=-1)
    return _nibbles(qs).float().mul_(_f16(d)).add_(_f16(m))


def _q5_0(blocks: Tensor) -> Tensor:
    # block_q5_0: ggml_half d; uint8_t qh[4]; uint8_t qs[16]
    d, qh, qs = blocks.split([2, 4, 16], dim=-1)
    return _q5_legacy(qh, qs).view(torch.int8).sub_(16).float().mul_(_f16(d))


def _q5_1(blocks: Tensor) -> Tensor:
    # block_q5_1: ggml_half d, m; uint8_t qh[4]; uint8_t qs[16]
    d, m, qh, qs = blocks.split([2, 2, 4, 16], dim=-1)
    return _q5_legacy(qh, qs).float().mul_(_f16(d)).add_(_f16(m))


def _q8_0(blocks: Tensor) -> Tensor:
    # block_q8_0: ggml_half d; int8_t qs[32]
    d, qs = blocks.split([2, 32], dim=-1)
    return qs.view(torch.int8).float().mul_(_f16(d))


def _q8_k(blocks: Tensor) -> Tensor:
    # block_q8_K: float d; int8_t qs[256]; int16_t bsums[16] (sums of 16 qs, unused here)
    d, qs, _ = blocks.split([4, QK_K, QK_K // 8], dim=-1)
    return _bytes_as(d, torch.float32) * qs.view(torch.int8).float()


def _q1_0(blocks: Tensor) -> Tensor:
    # block_q1_0: ggml_half d; uint8_t qs[16]; bit j (lowest bit first) selects +d or -d
    d, qs = blocks.split([2, 16], dim=-1)
    d = _f16(d)
    return torch.where(_bits(qs, 1, 8, dim=-1).flatten(-2).bool(), d, -d)


# ---------------------------------------------------------------------------------------
# k-quants: 256-element super-blocks
# ---------------------------------------------------------------------------------------


def _k_scale_min(scales: Tensor) -> tuple[Tensor, Tensor]:
    """The 8 six-bit scales and 8 six-bit mins packed in the 12 `scales` bytes of
    block_q4_K / block_q5_K (ggml's get_scale_min_k4), each `[n, 8]`."""
    lo, hi, mix = scales.unflatten(-1, (3, 4)).unbind(-2)
    sc = torch.cat([lo & 0x3F, (mix & 0x0F) | ((lo >> 2) & 0x30)], dim=-1)
    mn = torch.cat([hi & 0x3F, (mix >> 4) | ((hi >> 2) & 0x30)], dim=-1)
    return sc, mn


def _k_sub_block_scales(d: Tensor, dmin: Tensor, scales: Tensor) -> tuple[Tensor, Tensor]:
    """Per 32-element sub-block scale `d * sc` and offset `dmin * m`, each `[n, 8, 1]`."""
    sc, mn = _k_scale_min(scales)
    return (_f16(d) * sc.float()).unsqueeze(-1), (_f16(dmin) * mn.float()).unsqueeze(-1)


def _q2_k(blocks: Tensor) -> Tensor:
    # block_q2_K: uint8_t scales[16] (4-bit scale | 4-bit min); uint8_t qs[64]; ggml_half d, dmin
    n = blocks.shape[0]
    scales, qs, d, dmin = blocks.split([QK_K // 16, QK_K // 4, 2, 2], dim=-1)
    dl = (_f16(d) * (scales & 0x0F).float()).unsqueeze(-1)
    ml = (_f16(dmin) * (scales >> 4).float()).unsqueeze(-1)
    q = _bits(qs.unflatten(-1, (2, 32)), 2, 4).reshape(n, QK_K // 16, 16)
    return q.float().mul_(dl).sub_(ml).reshape(n, QK_K)


def _q3_k(blocks: Tensor) -> Tensor:
    # block_q3_K: uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12] (16 x 6 bits); ggml_half d
    n = blocks.shape[0]
    hmask, qs, scales, d = blocks.split([QK_K // 8, QK_K // 4, 12, 2], dim=-1)
    # scale i: low 4 bits from nibble i of bytes 0..7, high 2 bits from field i // 4 of byte 8 + i % 4
    low, high = scales.split([8, 4], dim=-1)
    sc = (_nibbles(low).int() | (_bits(high, 2, 4).flatten(-2).int() << 4)) - 32
    dl = (_f16(d) * sc.float()).unsqueeze(-1)
    ql = _bits(qs.unflatten(-1, (2, 32)), 2, 4).reshape(n, QK_K // 16, 16).view(torch.int8)
    hbit = _bits(hmask, 1, 8).reshape(n, QK_K // 16, 16).view(torch.int8)
    q = ql.sub_(hbit.bitwise_xor_(1).bitwise_left_shift_(2))  # a clear hmask bit subtracts 4
    return q.float().mul_(dl).reshape(n, QK_K)


def _q4_k(blocks: Tensor) -> Tensor:
    # block_q4_K: ggml_half d, dmin; uint8_t scales[12]; uint8_t qs[128]
    n = blocks.shape[0]
    d, dmin, scales, qs = blocks.split([2, 2, 12, QK_K // 2], dim=-1)
    dl, ml = _k_sub_block_scales(d, dmin, scales)
    q = _bits(qs.unflatten(-1, (4, 32)), 4, 2).reshape(n, 8, 32)
    return q.float().mul_(dl).sub_(ml).reshape(n, QK_K)


def _q5_k(blocks: Tensor) -> Tensor:
    # block_q5_K: ggml_half d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]
    n = blocks.shape[0]
    d, dmin, scales, qh, qs = blocks.split([2, 2, 12, QK_K // 8, QK_K // 2], dim=-1)
    dl, ml = _k_sub_block_scales(d, dmin, scales)
    ql = _bits(qs.unflatten(-1, (4, 32)), 4, 2).reshape(n, 8, 32)
    q = ql.bitwise_or_(_bits(qh, 1, 8).bitwise_left_shift_(4))
    return q.float().mul_(dl).sub_(ml).reshape(n, QK_K)


def _q6_k(blocks: Tensor) -> Tensor:
    # block_q6_K: uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; ggml_half d
    n = blocks.shape[0]
    ql, qh, scales, d = blocks.split([QK_K // 2, QK_K // 4, QK_K // 16, 2], dim=-1)
    dl = (_f16(d) * scales.view(torch.int8).float()).unsqueeze(-1)
    low = _bits(ql.unflatten(-1, (2, 64)), 4, 2).reshape(n, QK_K)
    high = _bits(qh.unflatten(-1, (2, 32)), 2, 4).reshape(n, QK_K)
    q = low.bitwise_or_(high.bitwise_left_shift_(4)).view(torch.int8).sub_(32).reshape(n, QK_K // 16, 16)
    return q.float().mul_(dl).reshape(n, QK_K)


# ---------------------------------------------------------------------------------------
# Ternary and fp4 types
# ---------------------------------------------------------------------------------------


def _trits(x: Tensor, count: int) -> Tensor:
    """The `count` base-3 digits packed in each byte of `x` (block_tq1_0 encoding), most
    significant first, along a new axis -2, as 0..2."""
    powers_of_3 = torch.pow(3, _steps(count, 1, torch.int32, x.device)).unsqueeze(-1)
    shifted = (x.int().unsqueeze(-2) * powers_of_3) & 0xFF  # a uint8 product: drops leading digits
    return (shifted * 3) >> 8


def _tq1_0(blocks: Tensor) -> Tensor:
    # block_tq1_0: uint8_t qs[48] (5 trits a byte); uint8_t qh[4] (4 trits a byte); ggml_half d
    qs, qh, d = blocks.split([(QK_K - 4 * QK_K // 64) // 5, QK_K // 64, 2], dim=-1)
    q = torch.cat(
        [_trits(qs[..., :32], 5).flatten(-2), _trits(qs[..., 32:], 5).flatten(-2), _trits(qh, 4).flatten(-2)],
        dim=-1,
    )
    return q.sub_(1).float().mul_(_f16(d))


def _tq2_0(blocks: Tensor) -> Tensor:
    # block_tq2_0: uint8_t qs[64] (2 bits a value); ggml_half d
    qs, d = blocks.split([QK_K // 4, 2], dim=-1)
    q = _bits(qs.unflatten(-1, (2, 32)), 2, 4).flatten(-3)
    return q.float().sub_(1).mul_(_f16(d))


def _mxfp4(blocks: Tensor) -> Tensor:
    # block_mxfp4: uint8_t e (E8M0 scale); uint8_t qs[16] (E2M1 nibbles)
    e, qs = blocks.split([1, 16], dim=-1)
    return _lookup("kvalues_fp4", _nibbles(qs)).mul_(_lookup("e8m0_half", e))


def _nvfp4(blocks: Tensor) -> Tensor:
    # block_nvfp4: uint8_t d[4] (UE4M3 scale per 16 values); uint8_t qs[32] (E2M1 nibbles)
    n = blocks.shape[0]
    d, qs = blocks.split([4, 32], dim=-1)
    d = _lookup("ue4m3_half", d).unsqueeze(-1)
    values = _lookup("kvalues_fp4", _nibbles(qs.unflatten(-1, (4, 8))))
    return values.mul_(d).reshape(n, 64)


# ---------------------------------------------------------------------------------------
# i-quants
# ---------------------------------------------------------------------------------------


def _iq_scale_nibbles(d: Tensor, scales: Tensor) -> Tensor:
    """`d * (0.5 + s) * 0.25` for every 4-bit scale s of block_iq2_xs / block_iq2_s: `[n, 16]`."""
    return _f16(d) * (_bits(scales, 4, 2, dim=-1).flatten(-2).float() + 0.5) * 0.25


def _iq_word_scale_signs(d: Tensor, words: Tensor, scale_factor: float) -> tuple[Tensor, Tensor]:
    """block_iq2_xxs / block_iq3_xxs: each 32-bit word holds four 7-bit ksigns indices and a
    4-bit scale in its top bits. Returns the scales `d * (0.5 + s) * factor` `[n, 8]` and
    the signs `[n, 8, 4, 8]`."""
    db = _f16(d) * (((words >> 28) & 0xF).float() + 0.5) * scale_factor
    return db, _lookup("ksigns", _bits(words, 7, 4, dim=-1))


def _iq2_xxs(blocks: Tensor) -> Tensor:
    # block_iq2_xxs: ggml_half d; uint16_t qs[32], read as 8 pairs of uint32:
    #   4 grid indices (bytes) | 4 x 7-bit ksigns indices + 4-bit scale
    n = blocks.shape[0]
    d, qs = blocks.split([2, QK_K // 4], dim=-1)
    words = _u32(qs).unflatten(-1, (8, 2))
    db, signs = _iq_word_scale_signs(d, words[..., 1], 0.25)
    grid = _lookup("iq2xxs_grid", qs.unflatten(-1, (8, 2, 4))[..., 0, :])
    return grid.mul_(db.view(n, 8, 1, 1)).mul_(signs).reshape(n, QK_K)


def _iq2_xs(blocks: Tensor) -> Tensor:
    # block_iq2_xs: ggml_half d; uint16_t qs[32] (9-bit grid index | 7-bit ksigns index); uint8_t scales[8]
    n = blocks.shape[0]
    d, qs, scales = blocks.split([2, QK_K // 4, QK_K // 32], dim=-1)
    qs = _u16(qs)
    db = _iq_scale_nibbles(d, scales).view(n, 16, 1, 1)
    signs = _lookup("ksigns", qs >> 9).view(n, 16, 2, 8)
    grid = _lookup("iq2xs_grid", qs & 511).view(n, 16, 2, 8)
    return grid.mul_(db).mul_(signs).reshape(n, QK_K)


def _iq2_s(blocks: Tensor) -> Tensor:
    # block_iq2_s: ggml_half d; uint8_t qs[64] (32 grid index low bytes, then 32 sign bytes);
    #   uint8_t qh[8] (grid index bits 8-9); uint8_t scales[8]
    n = blocks.shape[0]
    d, qs, sign_bytes, qh, scales = blocks.split([2, QK_K // 8, QK_K // 8, QK_K // 32, QK_K // 32], dim=-1)
    db = _iq_scale_nibbles(d, scales).view(n, 16, 1, 1)
    signs = _lookup("byte_signs", sign_bytes).view(n, 16, 2, 8)
    index = qs.int() | (_bits(qh, 2, 4, dim=-1).flatten(-2).int() << 8)
    grid = _lookup("iq2s_grid", index).view(n, 16, 2, 8)
    return grid.mul_(db).mul_(signs).reshape(n, QK_K)


def _iq3_xxs(blocks: Tensor) -> Tensor:
    # block_iq3_xxs: ggml_half d; uint8_t qs[96]: 64 grid indices, then 8 uint32 of
    #   4 x 7-bit ksigns indices + 4-bit scale
    n = blocks.shape[0]
    d, qs, words = blocks.split([2, QK_K // 4, QK_K // 8], dim=-1)
    db, signs = _iq_word_scale_signs(d, _u32(words), 0.5)
    grid = _lookup("iq3xxs_grid", qs).view(n, 8, 4, 8)
    return grid.mul_(db.view(n, 8, 1, 1)).mul_(signs).reshape(n, QK_K)


def _iq3_s(blocks: Tensor) -> Tensor:
    # block_iq3_s: ggml_half d; uint8_t qs[64] (grid index low bytes); uint8_t qh[8] (index bit 8);
    #   uint8_t signs[32]; uint8_t scales[4]
    n = blocks.shape[0]
    d, qs, qh, sign_bytes, scales = blocks.split([2, QK_K // 4, QK_K // 32, QK_K // 8, 4], dim=-1)
    sc = _bits(scales, 4, 2, dim=-1).flatten(-2)
    db = (_f16(d) * (2 * sc + 1).float()).view(n, 8, 1, 1)
    signs = _lookup("byte_signs", sign_bytes).view(n, 8, 4, 8)
    index = qs.int() | (_bits(qh, 1, 8, dim=-1).flatten(-2).int() << 8)
    grid = _lookup("iq3s_grid", index).view(n, 8, 4, 8)
    return grid.mul_(db).mul_(signs).reshape(n, QK_K)


_IQ1_DELTA = 0.125


def _iq1_delta(sign_bit: Tensor) -> Tensor:
    """+IQ1_DELTA where the bit is 0, -IQ1_DELTA where it is 1."""
    return (1 - 2 * sign_bit.int()).float() * _IQ1_DELTA


def _iq1_s(blocks: Tensor) -> Tensor:
    # block_iq1_s: ggml_half d; uint8_t qs[32] (grid index low bytes);
    #   uint16_t qh[8]: 4 x 3-bit index high bits | 3-bit scale | delta sign
    n = blocks.shape[0]
    d, qs, qh = blocks.split([2, QK_K // 8, QK_K // 16], dim=-1)
    qh = _u16(qh)
    dl = (_f16(d) * (2 * ((qh >> 12) & 7) + 1).float()).view(n, 8, 1, 1)
    delta = _iq1_delta((qh >> 15) & 1).view(n, 8, 1, 1)
    index = qs.int() | (_bits(qh, 3, 4, dim=-1).flatten(-2) << 8)
    grid = _lookup("iq1s_grid", index).view(n, 8, 4, 8)
    return grid.add_(delta).mul_(dl).reshape(n, QK_K)


def _iq1_m(blocks: Tensor) -> Tensor:
    # block_iq1_m: uint8_t qs[32] (grid index low bytes); uint8_t qh[16] (two nibbles of
    #   3-bit index high bits | delta sign); uint8_t scales[8] (uint16 x 4: four 3-bit
    #   scales each, and the top nibbles together form the fp16 super-block scale)
    n = blocks.shape[0]
    qs, qh, scales = blocks.split([QK_K // 8, QK_K // 16, QK_K // 32], dim=-1)
    scales = _u16(scales)
    top = scales >> 12
    d = _f16_from_bits(top[..., 0] | (top[..., 1] << 4) | (top[..., 2] << 8) | (top[..., 3] << 12))
    sc = _bits(scales, 3, 4, dim=-1).flatten(-2)
    dl = (d.unsqueeze(-1) * (2 * sc + 1).float()).view(n, 8, 2, 1, 1)
    qh = _bits(qh, 4, 2, dim=-1).flatten(-2)
    delta = _iq1_delta((qh >> 3) & 1).view(n, 8, 2, 2, 1)
    grid = _lookup("iq1s_grid", qs.int() | ((qh & 7).int() << 8)).view(n, 8, 2, 2, 8)
    return grid.add_(delta).mul_(dl).reshape(n, QK_K)


def _iq4_nl(blocks: Tensor) -> Tensor:
    # block_iq4_nl: ggml_half d; uint8_t qs[16] (indices into kvalues_iq4nl)
    d, qs = blocks.split([2, 16], dim=-1)
    return _lookup("kvalues_iq4nl", _nibbles(qs)).mul_(_f16(d))


def _iq4_xs(blocks: Tensor) -> Tensor:
    # block_iq4_xs: ggml_half d; uint16_t scales_h; uint8_t scales_l[4]; uint8_t qs[128]
    n = blocks.shape[0]
    d, scales_h, scales_l, qs = blocks.split([2, 2, QK_K // 64, QK_K // 2], dim=-1)
    low = _bits(scales_l, 4, 2, dim=-1).flatten(-2).int()
    high = _bits(_u16(scales_h), 2, 8, dim=-1).flatten(-2)
    dl = (_f16(d) * ((low | (high << 4)) - 32).float()).unsqueeze(-1)
    values = _lookup("kvalues_iq4nl", _nibbles(qs.unflatten(-1, (8, 16))))
    return values.mul_(dl).reshape(n, QK_K)


# ---------------------------------------------------------------------------------------
# Dispatch
# ---------------------------------------------------------------------------------------

_DEQUANTIZERS: dict[str, Callable[[Tensor], Tensor]] = {
    "Q4_0": _q4_0,
    "Q4_1": _q4_1,
    "Q5_0": _q5_0,
    "Q5_1": _q5_1,
    "Q8_0": _q8_0,
    "Q8_K": _q8_k,
    "Q1_0": _q1_0,
    "Q2_K": _q2_k,
    "Q3_K": _q3_k,
    "Q4_K": _q4_k,
    "Q5_K": _q5_k,
    "Q6_K": _q6_k,
    "TQ1_0": _tq1_0,
    "TQ2_0": _tq2_0,
    "MXFP4": _mxfp4,
    "NVFP4": _nvfp4,
    "IQ2_XXS": _iq2_xxs,
    "IQ2_XS": _iq2_xs,
    "IQ2_S": _iq2_s,
    "IQ3_XXS": _iq3_xxs,
    "IQ3_S": _iq3_s,
    "IQ1_S": _iq1_s,
    "IQ1_M": _iq1_m,
    "IQ4_NL": _iq4_nl,
    "IQ4_XS": _iq4_xs,
}

#: Names of every type `dequantize` accepts.
DEQUANTIZABLE_TYPES: frozenset[str] = frozenset(_PLAIN_DTYPES) | frozenset(_DEQUANTIZERS)


def dequantize(
    packed: Tensor, quant_type: str | int | GGMLQuantizationType | GgmlType, dtype: torch.dtype = torch.float32
) -> Tensor:
    """Dequantize ggml rows.

    `packed` is a uint8 tensor `[..., row_bytes]` of whole blocks of `quant_type` (a name
    like "Q4_K", a ggml type id, a `gguf.GGMLQuantizationType` or a `GgmlType`); the result
    is `[..., cols]` in `dtype`, computed in float32 and cast at the end, on packed's device.
    For F32 rows read as float32 the result is a view of `packed`'s memory.
    """
    qt = ggml_type(quant_type)
    if not isinstance(packed, Tensor):
        raise ValueError(f"{qt.name}: packed must be a torch.Tensor of uint8, got {type(packed).__name__}")
    if packed.dtype != torch.uint8:
        raise ValueError(f"{qt.name}: packed must be a uint8 tensor of raw block bytes, got dtype {packed.dtype}")
    if packed.dim() == 0:
        raise ValueError(f"{qt.name}: packed must have at least one dimension (the row bytes)")
    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise ValueError(f"{qt.name}: output dtype must be a floating point torch.dtype, got {dtype}")
    if qt.name not in DEQUANTIZABLE_TYPES:
        raise ValueError(f"{qt.name}: no dequantizer for this type; supported: {', '.join(sorted(DEQUANTIZABLE_TYPES))}")
    row_bytes = packed.shape[-1]
    if row_bytes % qt.type_size:
        raise ValueError(
            f"{qt.name}: row of {row_bytes} bytes is not a multiple of the block size "
            f"({qt.type_size} bytes per {qt.block_size} elements)"
        )
    lead = packed.shape[:-1]
    cols = row_bytes // qt.type_size * qt.block_size

    plain = _PLAIN_DTYPES.get(qt.name)
    if plain is not None:
        # A direct cast equals float32-then-cast: widening F16/BF16 to float32 is exact.
        if not packed.is_contiguous() or packed.storage_offset() % plain.itemsize:
            packed = packed.clone(memory_format=torch.contiguous_format)
        return packed.view(plain).to(dtype)

    blocks = packed.reshape(-1, qt.type_size)
    values = _DEQUANTIZERS[qt.name](blocks)
    return values.reshape(*lead, cols).to(dtype)
