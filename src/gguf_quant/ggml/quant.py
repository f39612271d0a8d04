"""Pure-torch ggml quantizers, byte-for-byte equal to llama.cpp's reference quantizers.

`quantize(weight, quant_type)` turns a float tensor `[..., cols]` into the packed ggml rows
`uint8 [..., row_bytes]` that llama.cpp's `ggml_quantize_chunk(type, ..., imatrix=NULL)` writes, for
Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL and IQ4_XS, plus the plain
F32 / F16 / BF16 casts. Everything is vectorised over all blocks and runs on any torch device.

Being bit-exact with a C reference means doing the same float32 arithmetic in the same order:

* every product is written with C's left-to-right association (`w*l*l` is `(w*l)*l`);
* sums that C accumulates in a loop are accumulated element by element too (`_seqsum`), a Python loop
  over the 16 or 32 elements of a (sub-)block, each step still vectorised over every block;
* llama.cpp's `nearest_int` (the 12582912 magic number: round half to even, garbage past 2**22) is
  reproduced bit for bit, as are C's float -> int truncating casts (`_c_int`) and `roundf`;
* searches keep C's tie-breaking (first maximum, strict `<` / `>`), and constant divisions are
  real float32 divisions, never multiplications by a reciprocal (`_div`: torch computes
  `python_number / tensor` as a reciprocal times the number, and CUDA divides by a Python number that
  way too);
* sqrt is taken in float64 and rounded (torch's float32 CPU sqrt is not always correctly rounded);
* float16 scales are rounded (round to nearest even) exactly where ggml stores them, and read back
  where ggml reads them back.

Non-finite inputs (NaN, inf) are not part of the contract.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from .types import GgmlType, ggml_type

__all__ = ["quantize", "QUANTIZED_TYPES"]

QK_K = 256
GROUP_MAX_EPS = float(np.float32(1e-15))  # ggml's GROUP_MAX_EPS (1e-15f): below it a group is all zero

# 4-bit non-linear grid of IQ4_NL / IQ4_XS (kvalues_iq4nl) and doubled e2m1 grid of MXFP4 (kvalues_mxfp4).
_KVALUES_IQ4NL = (-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113)
_KVALUES_MXFP4 = (0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12)

# Elements quantized per pass: bounds the temporaries (the K-quant searches hold a few dozen tensors the
# size of the chunk). On CPU a chunk that stays in cache is fastest; on a GPU larger chunks keep it busy.
_CHUNK_ELEMENTS = {"cpu": 1 << 18}
_CHUNK_ELEMENTS_DEFAULT = 1 << 24


# --------------------------------------------------------------------------------------------------
# float32 helpers shared by the quantizers
# --------------------------------------------------------------------------------------------------

def _f32(v: float) -> float:
    """Round a Python number to float32 (a C `float` constant or an int converted to float)."""
    return float(np.float32(v))


def _div(a, b):
    """float32 `a / b` as C computes it; either side may be a Python number."""
    if not isinstance(a, torch.Tensor):
        a = torch.full_like(b, _f32(a))
    if not isinstance(b, torch.Tensor):
        b = torch.full_like(a, _f32(b))
    return torch.div(a, b)


def _nearest_f(x: torch.Tensor) -> torch.Tensor:
    """llama.cpp's `nearest_int` (add 1.5 * 2**23 in float32, read the low mantissa bits), as float32.

    Round half to even for |x| < 2**22, where it equals (x + 1.5*2**23) - 1.5*2**23 (the quick path on
    CPU); past that the C function returns mantissa garbage (it asserts only in debug builds),
    reproduced from the bits. A NaN (from inf - inf, 0 * inf, ... in the searches, on huge or
    denormal inputs) is x86's default NaN in C, whose mantissa bits give 0; CUDA's NaN has other
    bits, so NaN is mapped to 0 explicitly."""
    if x.device.type == "cpu" and x.numel():
        lo, hi = torch.aminmax(x)  # NaN fails both tests
        if bool(lo >= -4194303.0) and bool(hi <= 4194303.0):
            return (x + 12582912.0) - 12582912.0
    bits = (x + 12582912.0).view(torch.int32)
    r = ((bits & 0x007FFFFF) - 0x00400000).to(torch.float32)
    return torch.where(torch.isnan(x), torch.zeros_like(r), r)


def _nearest_int(x: torch.Tensor) -> torch.Tensor:
    """llama.cpp's `nearest_int` as int32."""
    return _nearest_f(x).to(torch.int32)


def _c_int(x: torch.Tensor) -> torch.Tensor:
    """C's float -> int truncation as x86-64 does it (cvttss2si): out of range or NaN gives INT_MIN."""
    ok = (x > -2147483904.0) & (x < 2147483648.0)
    t = torch.where(ok, x, torch.zeros_like(x)).trunc().to(torch.int64)
    return torch.where(ok, t, torch.full_like(t, -(1 << 31)))


def _as_int8(v: torch.Tensor) -> torch.Tensor:
    """Wrap an integer tensor to int8 range, as a C `(int8_t)` cast does (two's complement)."""
    return ((v + 128) & 0xFF) - 128


def _roundf(x: torch.Tensor) -> torch.Tensor:
    """C `roundf`: round half away from zero (exact in float32: x - trunc(x) is exact)."""
    t = x.trunc()
    return torch.where((x - t).abs() >= 0.5, t + torch.sign(x), t)


def _sqrtf(x: torch.Tensor) -> torch.Tensor:
    """Correctly rounded float32 sqrt, as C's sqrtf (torch's float32 CPU sqrt can be off by an ulp;
    sqrt in float64 rounded to float32 is exact)."""
    return torch.sqrt(x.to(torch.float64)).to(torch.float32)


def _seqsum(t: torch.Tensor) -> torch.Tensor:
    """`float s = 0; for (i...) s += t[i];` over dim 0 of an element-major `[n, blocks]` tensor."""
    s = t[0] + 0.0  # 0 + t[0]: turns -0 into +0 as C does
    for i in range(1, t.shape[0]):
        s.add_(t[i])
    return s


def _first_absmax(x: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`amax = max|x|` and `max` = the first element reaching it, as in C's
    `if (fabsf(v) > amax) { amax = fabsf(v); max = v; }` starting from amax = max = 0."""
    ax = x.abs()
    ax = torch.where(torch.isnan(ax), torch.zeros_like(ax), ax)  # a NaN never passes `>`
    amax = ax.amax(dim=dim, keepdim=True)
    idx = (ax == amax).to(torch.uint8).argmax(dim=dim, keepdim=True)
    mx = x.gather(dim, idx)
    mx = torch.where(amax > 0, mx, torch.zeros_like(mx))
    return amax.squeeze(dim), mx.squeeze(dim)


def _positive_max(v: torch.Tensor) -> torch.Tensor:
    """`float m = 0; for (...) if (v > m) m = v;` over dim 1: the largest positive value, else +0."""
    m = torch.where(v > 0, v, torch.zeros_like(v)).amax(dim=1)  # NaN and negatives never pass `>`
    return m


def _fp16_round(x: torch.Tensor) -> torch.Tensor:
    """GGML_FP16_TO_FP32(GGML_FP32_TO_FP16(x)): the value ggml reads back from a stored scale."""
    return x.to(torch.float16).to(torch.float32)


def _fp16_bytes(x: torch.Tensor) -> torch.Tensor:
    """float32 `[n]` -> the two little-endian bytes of GGML_FP32_TO_FP16 (round to nearest even), `[n, 2]`.

    A NaN scale (IQ4_NL's least-squares d on inputs whose squares overflow) is x86's default NaN in C,
    stored as 0xFE00; CUDA's NaN is positive, so NaN is written as 0xFE00 explicitly."""
    h = x.to(torch.float16).view(torch.int16).to(torch.int32)
    return _u16_bytes(torch.where(torch.isnan(x), torch.full_like(h, 0xFE00), h))


def _u16_bytes(v: torch.Tensor) -> torch.Tensor:
    """Integer `[...]` -> its low 16 bits as little-endian bytes `[..., 2]`."""
    return torch.stack([v & 0xFF, (v >> 8) & 0xFF], dim=-1).to(torch.uint8)


def _u32_bytes(v: torch.Tensor) -> torch.Tensor:
    """Integer `[...]` -> its low 32 bits as little-endian bytes `[..., 4]`."""
    return torch.stack([(v >> s) & 0xFF for s in (0, 8, 16, 24)], dim=-1).to(torch.uint8)


def _pack_nibbles(q: torch.Tensor) -> torch.Tensor:
    """`[n, 32]` 4-bit codes -> `[n, 16]` bytes: element j in the low nibble, element j+16 in the high one."""
    return (q[:, :16] | (q[:, 16:] << 4)).to(torch.uint8)


def _high_bits32(q: torch.Tensor) -> torch.Tensor:
    """Bit 4 of each of the 32 codes of a block gathered into one uint32 (element k -> bit k), `[n, 4]` bytes."""
    bit = (q >> 4) & 1
    weights = torch.tensor([1 << k for k in range(32)], dtype=torch.int64, device=q.device)
    return _u32_bytes((bit.to(torch.int64) * weights).sum(dim=1))


def _pack_2bit_k(L: torch.Tensor) -> torch.Tensor:
    """Q2_K / Q3_K low bits: `[n, 256]` 2-bit codes -> `[n, 64]` bytes; byte 32*c + l holds elements
    128*c + l, +32, +64, +96 in bits 0-1, 2-3, 4-5, 6-7."""
    L = L.reshape(-1, 2, 4, 32)
    return (L[:, :, 0] | (L[:, :, 1] << 2) | (L[:, :, 2] << 4) | (L[:, :, 3] << 6)).reshape(-1, 64).to(torch.uint8)


class _IntGrid:
    """ggml's `best_index_int8(n, values, x)` for a sorted grid of integers, as a table lookup.

    C binary-searches the neighbours lo <= x < hi and takes lo when `x - lo < hi - x`, else hi; x at or
    beyond an end gives that end, NaN gives the last index. The midpoints (lo + hi)/2 are multiples of
    1/2 and near them both float32 differences are exact, so the choice is exactly `x >= midpoint`,
    which floor(2x) decides: one table index per element (`index`) and its grid value (`value`)."""

    def __init__(self, values: tuple[int, ...], device: torch.device):
        self.lo, self.hi = 2 * values[0] - 1, 2 * values[-1]
        mids2 = [a + b for a, b in zip(values, values[1:])]  # 2 * midpoints
        idx = [sum(k >= m for m in mids2) for k in range(self.lo, self.hi + 1)]
        self.index_table = torch.tensor(idx, dtype=torch.int64, device=device)
        self.value_table = torch.tensor([float(values[i]) for i in idx], dtype=torch.float32, device=device)
        self.values = torch.tensor(values, dtype=torch.float32, device=device)

    def _key(self, x: torch.Tensor) -> torch.Tensor:
        k = torch.nan_to_num(x * 2.0, nan=float(self.hi)).floor().clamp(self.lo, self.hi) - self.lo
        return k.to(torch.int32).reshape(-1)

    def index(self, x: torch.Tensor) -> torch.Tensor:
        return self.index_table.index_select(0, self._key(x)).reshape(x.shape)

    def value(self, x: torch.Tensor) -> torch.Tensor:
        return self.value_table.index_select(0, self._key(x)).reshape(x.shape)


# --------------------------------------------------------------------------------------------------
# in-block scale searches (element-major tensors: x is [n, blocks], one column per (sub-)block)
# --------------------------------------------------------------------------------------------------

def _make_qkx2_quants(x, w, nmax: int, rmin: float, rdelta: float, nstep: int, use_mad: bool):
    """Scale/min search of the "type-1" K-quants (Q2_K, Q4_K, Q5_K): llama.cpp's make_qkx2_quants.

    Codes l in [0, nmax] with x ~ scale*l - the_min. Starts from the min/max fit, then tries the
    iscales (rmin + rdelta*is + nmax)/(max - min), is = 0..nstep (min being the best fit's so far),
    each time solving the weighted least squares for (scale, min) and keeping it when its weighted
    error (squared, or absolute with use_mad) is strictly lower.
    Returns (L int32 [n, blocks], scale [blocks], the_min [blocks])."""
    sum_w = w[0].clone()
    sum_x = sum_w * x[0]
    for i in range(1, x.shape[0]):
        sum_w = sum_w + w[i]
        sum_x = sum_x + w[i] * x[i]
    mn = x.amin(dim=0)
    mx = x.amax(dim=0)
    mn = torch.where(mn > 0, torch.zeros_like(mn), mn)
    flat = mx == mn

    def error(scale, L, mn):
        diff = scale * L + mn - x
        diff = diff.abs() if use_mad else diff * diff
        return _seqsum(w * diff)

    iscale = _div(nmax, mx - mn)
    scale = _div(1.0, iscale)
    L = _nearest_f(iscale * (x - mn)).clamp(0, nmax)  # codes kept as float32 integers
    best_error = error(scale, L, mn)
    for step in range(nstep + 1):
        c = np.float32(rmin) + np.float32(rdelta) * np.float32(step) + np.float32(nmax)
        iscale = _div(float(c), mx - mn)  # C moves `min` along with the best fit so far
        Laux = _nearest_f(iscale * (x - mn)).clamp(0, nmax)
        wl = w * Laux
        sum_l = _seqsum(wl)
        sum_l2 = _seqsum(wl * Laux)
        sum_xl = _seqsum(wl * x)
        D = sum_w * sum_l2 - sum_l * sum_l
        this_scale = _div(sum_w * sum_xl - sum_x * sum_l, D)
        this_min = _div(sum_l2 * sum_x - sum_l * sum_xl, D)
        clip = this_min > 0
        this_min = torch.where(clip, torch.zeros_like(this_min), this_min)
        this_scale = torch.where(clip, _div(sum_xl, sum_l2), this_scale)
        cur_error = error(this_scale, Laux, this_min)
        better = (D > 0) & (cur_error < best_error)
        L = torch.where(better, Laux, L)
        best_error = torch.where(better, cur_error, best_error)
        scale = torch.where(better, this_scale, scale)
        mn = torch.where(better, this_min, mn)
    L = torch.where(flat, torch.zeros_like(L), L).to(torch.int32)
    scale = torch.where(flat, torch.zeros_like(scale), scale)
    return L, scale, -mn


def _make_qx_quants(x, nmax: int):
    """Symmetric scale search of Q6_K: llama.cpp's make_qx_quants with rmse_type 1 (weights x*x).

    Codes l in [-nmax, nmax-1] with x ~ scale*l; tries iscale = -(nmax + 0.1*is)/max, is = -9..9, and
    keeps the least-squares scale with the largest sumlx^2/suml2 (strictly). Returns (L = l + nmax,
    int32 [n, blocks]; L = 0 for an all-zero group) and the scale [blocks]."""
    amax, mx = _first_absmax(x, dim=0)
    zero = amax < GROUP_MAX_EPS
    w = x * x
    wx = w * x

    def attempt(iscale):
        l = _nearest_f(iscale * x).clamp(-nmax, nmax - 1)
        return l, _seqsum(wx * l), _seqsum(w * l * l)

    l, sumlx, suml2 = attempt(_div(-nmax, mx))
    L = l + nmax
    scale = torch.where(suml2 != 0, _div(sumlx, suml2), torch.zeros_like(sumlx))
    best = scale * sumlx
    for step in range(-9, 10):
        if step == 0:
            continue
        c = -(np.float32(nmax) + np.float32(0.1) * np.float32(step))
        l, sumlx, suml2 = attempt(_div(float(c), mx))
        better = (suml2 > 0) & (sumlx * sumlx > best * suml2)
        L = torch.where(better, l + nmax, L)
        scale = torch.where(better, _div(sumlx, suml2), scale)
        best = torch.where(better, scale * sumlx, best)
    L = torch.where(zero, torch.zeros_like(L), L).to(torch.int32)
    scale = torch.where(zero, torch.zeros_like(scale), scale)
    return L, scale


def _make_q3_quants(x, nmax: int):
    """Symmetric scale search of Q3_K: llama.cpp's make_q3_quants with do_rmse.

    Codes l in [-nmax, nmax-1]; starts from l = round(-nmax*x/max), then up to 5 passes of coordinate
    descent, element by element, moving each l to round(x*suml2/sumlx) when that raises sumlx^2/suml2
    (weights x*x). Returns (L = l + nmax, int32 [n, blocks]; 0 for an all-zero group) and the scale."""
    amax, mx = _first_absmax(x, dim=0)
    zero = amax < GROUP_MAX_EPS
    w = x * x
    wx = w * x
    L = _nearest_f(_div(-nmax, mx) * x).clamp(-nmax, nmax - 1)
    sumlx = _seqsum(wx * L)
    suml2 = _seqsum(w * L * L)
    L = list(L.unbind(0))
    for _ in range(5):
        changed = torch.zeros_like(zero)
        for i in range(x.shape[0]):
            li = L[i]
            slx = sumlx - wx[i] * li
            sl2 = suml2 - w[i] * li * li
            new_l = _nearest_f(_div(x[i] * sl2, slx)).clamp(-nmax, nmax - 1)
            slx = slx + wx[i] * new_l
            sl2 = sl2 + w[i] * new_l * new_l
            take = (sumlx - wx[i] * li > 0) & (new_l != L[i]) & (sl2 > 0) & (slx * slx * suml2 > sumlx * sumlx * sl2)
            L[i] = torch.where(take, new_l, L[i])
            sumlx = torch.where(take, slx, sumlx)
            suml2 = torch.where(take, sl2, suml2)
            changed |= take
        # A pass that changes nothing is a fixed point: C's per-group `break` cannot differ from going on.
        if not bool(changed.any()):
            break
    L = torch.stack(L) + nmax
    scale = torch.where(suml2 > 0, _div(sumlx, suml2), torch.zeros_like(sumlx))
    L = torch.where(zero, torch.zeros_like(L), L).to(torch.int32)
    scale = torch.where(zero, torch.zeros_like(scale), scale)
    return L, scale


def _iq4_scales(x, grid: _IntGrid, ntry: int = 7):
    """Per-32-group scale search of IQ4_NL / IQ4_XS (quantize_row_iq4_nl_impl, no imatrix: weights x*x).

    Starts from d = max/127 (the sign making the largest element land on -127), then tries
    id = (itry - 127)/max for itry = -ntry..ntry, keeping the least-squares d with the largest
    sumqx^2/sumq2 (strictly). Returns d [blocks] (0 for an all-zero group)."""
    amax, mx = _first_absmax(x, dim=0)
    zero = amax < GROUP_MAX_EPS
    w = x * x

    v0 = int(grid.values[0].item())

    def attempt(id_):
        q = grid.value(id_ * x)
        wq = w * q
        return _seqsum(wq * x), _seqsum(wq * q)

    d = _div(-mx, v0)
    sumqx, sumq2 = attempt(_div(1.0, d))
    d = torch.where(sumq2 > 0, _div(sumqx, sumq2), torch.zeros_like(sumqx))
    best = d * sumqx
    for itry in range(-ntry, ntry + 1):
        sumqx, sumq2 = attempt(_div(itry + v0, mx))
        better = (sumq2 > 0) & (sumqx * sumqx > best * sumq2)
        d = torch.where(better, _div(sumqx, sumq2), d)
        best = torch.where(better, d * sumqx, best)
    return torch.where(zero, torch.zeros_like(d), d)


def _subblocks(x: torch.Tensor, n: int) -> torch.Tensor:
    """`[blocks, k*n]` -> element-major sub-blocks `[n, blocks*k]` (column b*k + j is sub-block j of block b)."""
    return x.reshape(-1, n).T.contiguous()


def _from_subblocks(t: torch.Tensor, nblocks: int) -> torch.Tensor:
    """Inverse of `_subblocks`: `[n, blocks*k]` -> `[blocks, k*n]`."""
    return t.T.reshape(nblocks, -1)


# --------------------------------------------------------------------------------------------------
# 32-element block types
# --------------------------------------------------------------------------------------------------

def _quantize_q8_0(x: torch.Tensor) -> torch.Tensor:
    """block_q8_0 (34 bytes): fp16 d, int8 qs[32]; x = d * q, d = max|x|/127, q = roundf(x/d)."""
    amax = x.abs().amax(dim=1)
    d = _div(amax, 127)
    id_ = torch.where(d != 0, _div(1.0, d), torch.zeros_like(d))
    q = _c_int(_roundf(x * id_[:, None])) & 0xFF
    return torch.cat([_fp16_bytes(d), q.to(torch.uint8)], dim=1)


def _quantize_q4_0(x: torch.Tensor) -> torch.Tensor:
    """block_q4_0 (18 bytes): fp16 d, qs[16] (element j low nibble, j+16 high); x = d * (q - 8),
    d = max/-8 with max the (first) element of largest magnitude."""
    _, mx = _first_absmax(x, dim=1)
    d = _div(mx, -8)
    id_ = torch.where(d != 0, _div(1.0, d), torch.zeros_like(d))
    q = _as_int8(_c_int(x * id_[:, None] + 8.5)).clamp(max=15) & 0xFF
    return torch.cat([_fp16_bytes(d), _pack_nibbles(q)], dim=1)


def _first_min_max(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """min and max of each row, keeping the first of equal candidates (so the sign of a zero is C's)."""
    mn, mx = x.amin(dim=1, keepdim=True), x.amax(dim=1, keepdim=True)
    first_mn = x.gather(1, (x == mn).to(torch.uint8).argmax(dim=1, keepdim=True))
    first_mx = x.gather(1, (x == mx).to(torch.uint8).argmax(dim=1, keepdim=True))
    return first_mn.squeeze(1), first_mx.squeeze(1)


def _quantize_q4_1(x: torch.Tensor) -> torch.Tensor:
    """block_q4_1 (20 bytes): fp16 d, fp16 m, qs[16]; x = d * q + m, m = min, d = (max - min)/15."""
    mn, mx = _first_min_max(x)
    d = _div(mx - mn, 15)
    id_ = torch.where(d != 0, _div(1.0, d), torch.zeros_like(d))
    q = _as_int8(_c_int((x - mn[:, None]) * id_[:, None] + 0.5)).clamp(max=15) & 0xFF
    return torch.cat([_fp16_bytes(d), _fp16_bytes(mn), _pack_nibbles(q)], dim=1)


def _quantize_q5_0(x: torch.Tensor) -> torch.Tensor:
    """block_q5_0 (22 bytes): fp16 d, uint32 qh (bit k = bit 4 of element k), qs[16] low nibbles;
    x = d * (q - 16), d = max/-16."""
    _, mx = _first_absmax(x, dim=1)
    d = _div(mx, -16)
    id_ = torch.where(d != 0, _div(1.0, d), torch.zeros_like(d))
    q = _as_int8(_c_int(x * id_[:, None] + 16.5)).clamp(max=31) & 0xFF
    return torch.cat([_fp16_bytes(d), _high_bits32(q), _pack_nibbles(q & 0xF)], dim=1)


def _quantize_q5_1(x: torch.Tensor) -> torch.Tensor:
    """block_q5_1 (24 bytes): fp16 d, fp16 m, uint32 qh, qs[16]; x = d * q + m, d = (max - min)/31."""
    mn, mx = _first_min_max(x)
    d = _div(mx - mn, 31)
    id_ = torch.where(d != 0, _div(1.0, d), torch.zeros_like(d))
    q = _c_int((x - mn[:, None]) * id_[:, None] + 0.5) & 0xFF
    return torch.cat([_fp16_bytes(d), _fp16_bytes(mn), _high_bits32(q), _pack_nibbles(q & 0xF)], dim=1)


def _quantize_mxfp4(x: torch.Tensor) -> torch.Tensor:
    """block_mxfp4 (17 bytes): e8m0 exponent e, qs[16] e2m1 codes (j low nibble, j+16 high);
    x = 2**(e-127) * e2m1(q), e = floor(log2(max|x|)) - 2 + 127, q the nearest code (first on ties)."""
    amax = x.abs().amax(dim=1)
    # floorf(log2f(amax)): float32 log2 correctly rounded (via float64), so that values just below a
    # power of two whose log2 rounds up to the integer do so here too.
    lg = torch.log2(amax.to(torch.float64)).to(torch.float32).floor()
    e = torch.where(amax > 0, _c_int(lg - 2 + 127) & 0xFF, torch.zeros_like(amax, dtype=torch.int64))
    # GGML_E8M0_TO_FP32_HALF(e) = 2**(e-128), denormal for e < 2.
    bits = torch.where(e < 2, torch.full_like(e, 0x00200000) << e.clamp(max=1), (e - 1) << 23).to(torch.int32)
    d = bits.view(torch.float32)[:, None]
    # best_index_mxfp4 scans the 16 codes for the smallest |k*d - x|, keeping the first on ties: the
    # non-negative codes 0..7 come first, so x >= 0 gets the nearest magnitude (ties to the smaller) and
    # x < 0 the same magnitude's negative code (8 + i), except that 0 stays code 0. d is a power of two,
    # so a = |x|/d is exact, and near a midpoint both float32 differences are exact too (Sterbenz): the
    # scan equals counting the midpoints 0.5, 1.5, 2.5, 3.5, 5, 7, 10 that a strictly exceeds, which
    # ceil(2a) decides.
    a2 = torch.ceil(_div(x.abs(), d.expand_as(x)) * 2.0).clamp(0, _MXFP4_KEYS - 1).to(torch.int32)
    mag = _mxfp4_table(x.device).index_select(0, a2.reshape(-1)).reshape(x.shape)
    q = torch.where((x < 0) & (mag > 0), mag + 8, mag)
    return torch.cat([e.to(torch.uint8)[:, None], _pack_nibbles(q)], dim=1)


_MXFP4_KEYS = 26


def _mxfp4_table(device: torch.device) -> torch.Tensor:
    """Code of the nearest non-negative e2m1 magnitude for each key ceil(2|x|/d) (ties to the smaller)."""
    mags = _KVALUES_MXFP4[:8]
    mids2 = [a + b for a, b in zip(mags, mags[1:])]  # 2 * midpoints: 1, 3, 5, 7, 10, 14, 20
    return torch.tensor([sum(k > m for m in mids2) for k in range(_MXFP4_KEYS)], dtype=torch.int64, device=device)


def _quantize_iq4_nl(x: torch.Tensor) -> torch.Tensor:
    """block_iq4_nl (18 bytes): fp16 d, qs[16] (j low nibble, j+16 high); x = d * kvalues_iq4nl[q].
    As ggml_quantize_chunk does it (quantize_iq4_nl, ntry = 7); the codes use the unrounded d."""
    grid = _IntGrid(_KVALUES_IQ4NL, x.device)
    d = _iq4_scales(x.T.contiguous(), grid)
    id_ = torch.where(d != 0, _div(1.0, d), torch.zeros_like(d))
    q = grid.index(x * id_[:, None])
    return torch.cat([_fp16_bytes(d), _pack_nibbles(q)], dim=1)


# --------------------------------------------------------------------------------------------------
# 256-element super-block types (K-quants, IQ4_XS)
# --------------------------------------------------------------------------------------------------

def _pack_k4_scales(ls: torch.Tensor, lm: torch.Tensor) -> torch.Tensor:
    """Q4_K / Q5_K scales[12]: eight 6-bit scales and mins. Bytes 0-3: scale j (6 bits) | high 2 bits
    of scale j+4; bytes 4-7: min j | high 2 bits of min j+4; bytes 8-11: low nibbles of scale j+4 and
    min j+4."""
    lo = ls[:, :4] | ((ls[:, 4:] >> 4) << 6)
    mid = lm[:, :4] | ((lm[:, 4:] >> 4) << 6)
    hi = (ls[:, 4:] & 0xF) | ((lm[:, 4:] & 0xF) << 4)
    return torch.cat([lo, mid, hi], dim=1).to(torch.uint8)


def _k_scale_min_quants(x: torch.Tensor, nmax: int, rmin: float, nstep: int):
    """The part Q4_K and Q5_K share (quantize_row_q{4,5}_K_ref): per 32-group scale/min search with
    weights av_x + |x|, the 8 scales and 8 mins quantized to 6 bits against fp16 d = max_scale/63 and
    dmin = max_min/63, then every group re-quantized against its stored scale and min.
    Returns (d, dmin [blocks] float32, ls, lm [blocks, 8], L [blocks, 256] in [0, nmax])."""
    nb = x.shape[0]
    xs = _subblocks(x, 32)
    av_x = _sqrtf(_div(_seqsum(xs * xs), 32))
    w = av_x + xs.abs()
    L, scales, mins = _make_qkx2_quants(xs, w, nmax, rmin, 0.1, nstep, use_mad=False)
    scales, mins = scales.reshape(nb, 8), mins.reshape(nb, 8)
    L = _from_subblocks(L, nb)
    max_scale, max_min = _positive_max(scales), _positive_max(mins)
    inv_scale = torch.where(max_scale > 0, _div(63.0, max_scale), torch.zeros_like(max_scale))
    inv_min = torch.where(max_min > 0, _div(63.0, max_min), torch.zeros_like(max_min))
    ls = (_nearest_int(inv_scale[:, None] * scales) & 0xFF).clamp(max=63)
    lm = (_nearest_int(inv_min[:, None] * mins) & 0xFF).clamp(max=63)
    d = _div(max_scale, 63.0)
    dmin = _div(max_min, 63.0)
    dl = _fp16_round(d)[:, None] * ls.to(torch.float32)
    ml = _fp16_round(dmin)[:, None] * lm.to(torch.float32)
    xg = x.reshape(nb, 8, 32)
    Lq = _nearest_int(_div(xg + ml[..., None], dl[..., None].expand_as(xg))).clamp(0, nmax)
    L = torch.where((dl != 0)[..., None], Lq, L.reshape(nb, 8, 32)).reshape(nb, QK_K)
    return d, dmin, ls, lm, L


def _quantize_q4_k(x: torch.Tensor) -> torch.Tensor:
    """block_q4_K (144 bytes): fp16 d, fp16 dmin, scales[12] (6-bit scale/min pairs), qs[128];
    group j of 32: x = d*sc_j * q - dmin*m_j; qs byte 32*c + l = element 64c+l (low) | 64c+32+l (high)."""
    d, dmin, ls, lm, L = _k_scale_min_quants(x, 15, -1.0, 20)
    L = L.reshape(-1, 4, 2, 32)
    qs = (L[:, :, 0] | (L[:, :, 1] << 4)).reshape(-1, 128).to(torch.uint8)
    return torch.cat([_fp16_bytes(d), _fp16_bytes(dmin), _pack_k4_scales(ls, lm), qs], dim=1)


def _quantize_q5_k(x: torch.Tensor) -> torch.Tensor:
    """block_q5_K (176 bytes): fp16 d, fp16 dmin, scales[12], qh[32], qs[128]; as Q4_K with 5-bit
    codes: the low nibbles packed like Q4_K, bit 4 of element 32*k + j in bit k of qh[j]."""
    d, dmin, ls, lm, L = _k_scale_min_quants(x, 31, -0.5, 15)
    hb = ((L >> 4) & 1).reshape(-1, 8, 32)
    qh = sum(hb[:, k] << k for k in range(8)).to(torch.uint8)
    L = (L & 0xF).reshape(-1, 4, 2, 32)
    qs = (L[:, :, 0] | (L[:, :, 1] << 4)).reshape(-1, 128).to(torch.uint8)
    return torch.cat([_fp16_bytes(d), _fp16_bytes(dmin), _pack_k4_scales(ls, lm), qh, qs], dim=1)


def _quantize_q6_k(x: torch.Tensor) -> torch.Tensor:
    """block_q6_K (210 bytes): ql[128], qh[64], int8 scales[16], fp16 d; group j of 16:
    x = d*scales[j] * (q - 32), q 6 bits. Per 128 half c: ql[64c + l] = q[128c+l] | q[128c+l+64] << 4,
    ql[64c+32+l] = q[128c+l+32] | q[128c+l+96] << 4 (low nibbles), qh[32c + l] = the four high 2-bit
    pairs of q[128c+l], +32, +64, +96."""
    nb = x.shape[0]
    L, scales = _make_qx_quants(_subblocks(x, 16), 32)
    scales = scales.reshape(nb, 16)
    L = _from_subblocks(L, nb)
    abs_max, max_scale = _first_absmax(scales, dim=1)
    zero = abs_max < GROUP_MAX_EPS
    iscale = _div(-128.0, max_scale)
    d = _div(1.0, iscale)
    sc = _as_int8(_nearest_int(iscale[:, None] * scales).clamp(max=127))
    dl = _fp16_round(d)[:, None] * sc.to(torch.float32)
    xg = x.reshape(nb, 16, 16)
    Lq = _nearest_int(_div(xg, dl[..., None].expand_as(xg))).clamp(-32, 31) + 32
    L = torch.where((dl != 0)[..., None], Lq, L.reshape(nb, 16, 16)).reshape(nb, 2, 4, 32)
    ql = torch.cat([(L[:, :, 0] & 0xF) | ((L[:, :, 2] & 0xF) << 4), (L[:, :, 1] & 0xF) | ((L[:, :, 3] & 0xF) << 4)],
                   dim=2)
    qh = (L[:, :, 0] >> 4) | ((L[:, :, 1] >> 4) << 2) | ((L[:, :, 2] >> 4) << 4) | ((L[:, :, 3] >> 4) << 6)
    out = torch.cat([ql.reshape(nb, 128).to(torch.uint8), qh.reshape(nb, 64).to(torch.uint8),
                     (sc & 0xFF).to(torch.uint8), _fp16_bytes(d)], dim=1)
    return torch.where(zero[:, None], torch.zeros_like(out), out)  # an all-zero block is all zero bytes


def _quantize_q3_k(x: torch.Tensor) -> torch.Tensor:
    """block_q3_K (110 bytes): hmask[32], qs[64], scales[12] (16 6-bit scales), fp16 d; group j of 16:
    x = d*(s_j - 32) * (q - 4), q 3 bits: low 2 bits packed as Q2_K, bit 2 of element 32*k + m in bit k
    of hmask[m]. scales: bytes 0-7 low nibbles of s_j (j low, j+8 high), bytes 8-11 the high 2-bit
    pairs (s_j >> 4 at bits 2*(j/4) of byte 8 + j%4)."""
    nb = x.shape[0]
    L, scales = _make_q3_quants(_subblocks(x, 16), 4)
    scales = scales.reshape(nb, 16)
    L = _from_subblocks(L, nb)
    _, max_scale = _first_absmax(scales, dim=1)
    nonzero = max_scale != 0
    iscale = _div(-32.0, max_scale)
    l = _as_int8(_nearest_int(iscale[:, None] * scales)).clamp(-32, 31) + 32
    l = torch.where(nonzero[:, None], l, torch.zeros_like(l))
    d = torch.where(nonzero, _div(1.0, iscale), torch.zeros_like(iscale))
    lo = (l[:, :8] & 0xF) | ((l[:, 8:] & 0xF) << 4)
    hi = (l >> 4).reshape(nb, 4, 4)  # [blocks, j/4, j%4]
    hi = hi[:, 0] | (hi[:, 1] << 2) | (hi[:, 2] << 4) | (hi[:, 3] << 6)
    sc = l - 32  # the stored scale as ggml reads it back (-32 everywhere for a zero block)
    dl = _fp16_round(d)[:, None] * sc.to(torch.float32)
    xg = x.reshape(nb, 16, 16)
    Lq = _nearest_int(_div(xg, dl[..., None].expand_as(xg))).clamp(-4, 3) + 4
    L = torch.where((dl != 0)[..., None], Lq, L.reshape(nb, 16, 16)).reshape(nb, QK_K)
    hb = ((L >> 2) & 1).reshape(nb, 8, 32)
    hmask = sum(hb[:, k] << k for k in range(8)).to(torch.uint8)
    return torch.cat([hmask, _pack_2bit_k(L & 3), torch.cat([lo, hi], dim=1).to(torch.uint8), _fp16_bytes(d)], dim=1)


def _quantize_q2_k(x: torch.Tensor) -> torch.Tensor:
    """block_q2_K (84 bytes): scales[16] (low nibble scale, high nibble min per group of 16), qs[64],
    fp16 d, fp16 dmin; group j: x = d*(s_j & 15) * q - dmin*(s_j >> 4), q 2 bits packed 4 per byte
    (byte 32*c + l: elements 128c + l, +32, +64, +96)."""
    nb = x.shape[0]
    xs = _subblocks(x, 16)
    L, scales, mins = _make_qkx2_quants(xs, xs.abs(), 3, -0.5, 0.1, 15, use_mad=True)
    scales, mins = scales.reshape(nb, 16), mins.reshape(nb, 16)
    L = _from_subblocks(L, nb)
    max_scale, max_min = _positive_max(scales), _positive_max(mins)
    has_scale, has_min = max_scale > 0, max_min > 0
    ls = _nearest_int(_div(15.0, max_scale)[:, None] * scales)
    ls = torch.where(has_scale[:, None], ls, torch.zeros_like(ls))
    lm = _nearest_int(_div(15.0, max_min)[:, None] * mins)
    s = (ls | torch.where(has_min[:, None], lm << 4, torch.zeros_like(lm))) & 0xFF
    d = torch.where(has_scale, _div(max_scale, 15.0), torch.zeros_like(max_scale))
    dmin = torch.where(has_min, _div(max_min, 15.0), torch.zeros_like(max_min))
    dl = _fp16_round(d)[:, None] * (s & 0xF).to(torch.float32)
    ml = _fp16_round(dmin)[:, None] * (s >> 4).to(torch.float32)
    xg = x.reshape(nb, 16, 16)
    Lq = _nearest_int(_div(xg + ml[..., None], dl[..., None].expand_as(xg))).clamp(0, 3)
    L = torch.where((dl != 0)[..., None], Lq, L.reshape(nb, 16, 16)).reshape(nb, QK_K)
    return torch.cat([s.to(torch.uint8), _pack_2bit_k(L), _fp16_bytes(d), _fp16_bytes(dmin)], dim=1)


def _quantize_iq4_xs(x: torch.Tensor) -> torch.Tensor:
    """block_iq4_xs (136 bytes): fp16 d, uint16 scales_h, scales_l[4], qs[128]; group j of 32:
    x = d*(s_j - 32) * kvalues_iq4nl[q], s_j 6 bits (low nibbles in scales_l, j even low / odd high;
    high 2 bits at bits 2j of scales_h); qs as IQ4_NL per group. The codes use the unrounded d."""
    nb = x.shape[0]
    grid = _IntGrid(_KVALUES_IQ4NL, x.device)
    scales = _iq4_scales(_subblocks(x, 32), grid).reshape(nb, 8)
    _, max_scale = _first_absmax(scales, dim=1)
    d = _div(-max_scale, 32.0)
    id_ = torch.where(d != 0, _div(1.0, d), torch.zeros_like(d))
    l = _nearest_int(id_[:, None] * scales).clamp(-32, 31)
    dl = d[:, None] * l.to(torch.float32)
    idl = torch.where(dl != 0, _div(1.0, dl), torch.zeros_like(dl))
    q = grid.index(x.reshape(nb, 8, 32) * idl[..., None])
    l = l + 32
    scales_l = ((l[:, 0::2] & 0xF) | ((l[:, 1::2] & 0xF) << 4)).to(torch.uint8)
    scales_h = sum((l[:, j] >> 4) << (2 * j) for j in range(8))
    qs = _pack_nibbles(q.reshape(-1, 32)).reshape(nb, 128)
    return torch.cat([_fp16_bytes(d), _u16_bytes(scales_h), scales_l, qs], dim=1)


# --------------------------------------------------------------------------------------------------
# plain float types
# --------------------------------------------------------------------------------------------------

def _to_f32_bytes(x: torch.Tensor) -> torch.Tensor:
    return x.contiguous().view(torch.uint8)


def _to_f16_bytes(x: torch.Tensor) -> torch.Tensor:
    """GGML_FP32_TO_FP16 per element (round to nearest even; NaN -> sign | 0x7E00)."""
    h = x.to(torch.float16).view(torch.int16).to(torch.int32) & 0xFFFF
    h = torch.where(torch.isnan(x), (h & 0x8000) | 0x7E00, h)
    return _u16_bytes(h).reshape(x.shape[0], -1)


def _to_bf16_bytes(x: torch.Tensor) -> torch.Tensor:
    """ggml_compute_fp32_to_bf16 per element: round to nearest even, NaN quieted (| 0x40)."""
    u = x.contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    h = torch.where(nan, (u >> 16) | 64, (u + (0x7FFF + ((u >> 16) & 1))) >> 16)
    return _u16_bytes(h).reshape(x.shape[0], -1)


_QUANTIZERS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "Q4_0": _quantize_q4_0,
    "Q4_1": _quantize_q4_1,
    "Q5_0": _quantize_q5_0,
    "Q5_1": _quantize_q5_1,
    "Q8_0": _quantize_q8_0,
    "MXFP4": _quantize_mxfp4,
    "Q2_K": _quantize_q2_k,
    "Q3_K": _quantize_q3_k,
    "Q4_K": _quantize_q4_k,
    "Q5_K": _quantize_q5_k,
    "Q6_K": _quantize_q6_k,
    "IQ4_NL": _quantize_iq4_nl,
    "IQ4_XS": _quantize_iq4_xs,
}
_FLOAT_WRITERS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "F32": _to_f32_bytes,
    "F16": _to_f16_bytes,
    "BF16": _to_bf16_bytes,
}

QUANTIZED_TYPES: tuple[str, ...] = tuple(_QUANTIZERS)


def quantize(weight: torch.Tensor, quant_type: str | int | GgmlType) -> torch.Tensor:
    """Quantize `weight` (`[..., cols]`, fp32 / fp16 / bf16; computed in fp32) to ggml's block layout.

    Returns `uint8 [..., row_bytes]`: each row packed exactly as llama.cpp's reference quantizer
    (`ggml_quantize_chunk` without importance matrix) packs it. `quant_type` is a name ("Q4_K"), a ggml
    type id, a `gguf.GGMLQuantizationType` or a `GgmlType`. F32, F16 and BF16 give the plain element bytes.
    """
    t = ggml_type(quant_type)
    if not isinstance(weight, torch.Tensor):
        raise ValueError(f"quantize expects a torch.Tensor, got {type(weight).__name__}")
    if not weight.is_floating_point():
        raise ValueError(f"quantize expects a floating point tensor (fp32, fp16 or bf16), got {weight.dtype}")
    if weight.dim() == 0:
        raise ValueError("quantize expects a tensor of shape [..., cols], got a scalar")
    cols = weight.shape[-1]
    if cols % t.block_size:
        raise ValueError(
            f"{t.name}: rows of {cols} elements cannot be quantized, the row length must be a multiple "
            f"of the {t.name} block size {t.block_size}"
        )
    if t.name in _FLOAT_WRITERS:
        writer = _FLOAT_WRITERS[t.name]
    elif t.name in _QUANTIZERS:
        writer = _QUANTIZERS[t.name]
    else:
        raise ValueError(
            f"no quantizer for {t.name} yet; supported: {', '.join([*_FLOAT_WRITERS, *_QUANTIZERS])}"
        )
    lead = weight.shape[:-1]
    row_bytes = t.row_bytes(cols)
    if weight.numel() == 0:
        return torch.empty((*lead, row_bytes), dtype=torch.uint8, device=weight.device)
    if weight.device.type == "cuda" and t.name in _QUANTIZERS:
        # The CUDA quantize kernel, when a kernel build is loaded: the same bytes, one launch.
        from .. import kernel_loader  # imported here: kernel_loader is only needed for CUDA tensors

        fn = kernel_loader.kernel_op("quantize", t.id, weight.device)
        if fn is not None:
            w = weight.detach()
            if w.dtype not in (torch.float32, torch.bfloat16, torch.float16):
                w = w.to(torch.float32)
            return fn(w.reshape(-1, cols), t.id).reshape(*lead, row_bytes)
    x = weight.detach().reshape(-1, cols).to(torch.float32).contiguous()
    if t.name in _FLOAT_WRITERS:
        return writer(x).reshape(*lead, row_bytes)
    blocks = x.reshape(-1, t.block_size)
    step = max(1, _CHUNK_ELEMENTS.get(x.device.type, _CHUNK_ELEMENTS_DEFAULT) // t.block_size)
    out = [writer(blocks[i:i + step]) for i in range(0, blocks.shape[0], step)]
    packed = out[0] if len(out) == 1 else torch.cat(out)
    return packed.reshape(*lead, row_bytes)
