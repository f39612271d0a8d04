"""Host check of the fast small-M matmul's data path (fast_host.cu) against gguf-py, no GPU.

    python kernels-src/gguf_kernels/tests/fast_host_check.py        # builds fast_host.cu with nvcc

Random valid blocks (every byte random except the fp16 scale fields), bf16-valued activations with
a wide spread of magnitudes, rows not a multiple of 16, M = 1..8. The host model sums in fp32 like
the kernel, so the relative error must stay near fp32 rounding (< 5e-5; the 1024 base cancels in the epilogue); a wrong byte, nibble or slot
mapping gives O(1). IQ4_XS's int8 records round the activations to int16 a group (v109's block form: a 256-element
block), so its int8 paths are checked against gguf-py on the activations rounded that way (`group_rounded`), where
they land at ~1e-7.
"""
from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import tempfile

import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType as QT
from gguf.quants import dequantize

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tests"))
from random_blocks import random_blocks  # noqa: E402

TYPES = ["Q4_0", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS", "MXFP4"]


def bf16_round(a):
    u = a.astype(np.float32).view(np.uint32)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.view(np.float32)


def build(out_dir):
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fast_host.cu")
    lib = os.path.join(out_dir, "libfast_host.so")
    subprocess.run(["nvcc", "-O1", "-std=c++17", "--expt-relaxed-constexpr", "-shared", "-Xcompiler", "-fPIC", "-o", lib, src], check=True)
    return lib


def wide_x(rng, M, K):
    """bf16-rounded activations [M, K] whose 16-element groups span magnitudes e^-6..e^6 (the records'
    per-group scaling must hold over that range)."""
    return bf16_round(rng.standard_normal((M, K)) * np.exp(rng.uniform(-6, 6, size=(M, K // 16)).repeat(16, axis=1)))


def random_rows(name, R, K, rng):
    """R random rows of K elements: the packed blocks and gguf-py's dequantization of them (float64)."""
    packed = random_blocks(name, (R,), K, rng)
    return packed, dequantize(packed, QT[name]).reshape(R, K).astype(np.float64)


def report(label, rc, out, x, w):
    """A host model's out against x @ w.T (w: gguf-py's dequantization); prints and returns ok."""
    ref = x.astype(np.float64) @ w.T
    err = np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-30) if rc == 0 else float("nan")
    ok = rc == 0 and np.isfinite(out).all() and err < 5e-5
    print(f"{label} rc={rc} rel={err:.2e} {'ok' if ok else 'FAIL'}")
    return ok


def check_stream(lib, name, packed, w, K, x, R, label, ctas=0, wpc=0, exp8=False):
    """fast_matmul_stream (ctas > 0: its split launch; exp8: the MT = 8 form in EXP's slot order)
    against gguf-py, on x as the records hold it (IQ4_XS's block form)."""
    M = x.shape[0]
    out = np.full((M, R), np.nan, np.float32)
    rc = lib.fast_matmul_stream(int(QT[name]), packed.ctypes.data_as(ctypes.c_void_p), R,
                                ctypes.c_longlong(packed.shape[1]), K,
                                np.ascontiguousarray(x, dtype=np.float32).ctypes.data_as(ctypes.c_void_p),
                                M, out.ctypes.data_as(ctypes.c_void_p), ctas, wpc, int(exp8))
    return report(label, rc, out, records_x(name, x, 256), w)


def group_rounded(x, n=32):
    """x as an int8 type's records hold it (Prep::group_i8): each run of n elements (a group of 32; the block form's
    256, StreamRecs::group_blk, NOTES.md v109) x / sigma rounded half to even to int16 (32767 at most), sigma =
    2^(E - 14) for the exponent E of the run's largest |x| (2^-126 where that is below 2^-112), times sigma again."""
    xb = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, n)
    be = (np.abs(xb).max(axis=1).view(np.uint32) >> 23).astype(np.int64)
    sigma = np.ldexp(1.0, np.where(be > 15, be - 14, 1) - 127)[:, None]
    return (np.minimum(np.rint(xb / sigma), 32767) * sigma).reshape(np.shape(x))


def records_x(name, x, n=32):
    """x as the type's records hold it: IQ4_XS's int8 records round it to int16 a run of n (group_rounded), the
    others' fp16 records keep it to fp32's rounding."""
    return group_rounded(x, n) if name == "IQ4_XS" else x


def check_m1(entry, name, packed, w, K, x, R, label, may_decline=False):
    """A one-token host model (fast_matmul_stream_one, fast_matmul_stream_flat[_ragged]) against gguf-py, on x as the
    records hold it (IQ4_XS's block form). may_decline: the model's refusal of the case (rc 2, the launch's own rule)
    passes too."""
    out = np.full((1, R), np.nan, np.float32)
    rc = entry(int(QT[name]), packed.ctypes.data_as(ctypes.c_void_p), R, ctypes.c_longlong(packed.shape[1]), K,
               np.ascontiguousarray(x, dtype=np.float32).ctypes.data_as(ctypes.c_void_p),
               out.ctypes.data_as(ctypes.c_void_p))
    if may_decline and rc == 2:
        print(f"{label} declined")
        return True
    return report(label, rc, out, records_x(name, x, 256), w)


def extreme_iq4_xs(R, K, rng):
    """IQ4_XS rows whose blocks' sums are the largest the block form's integers meet against activations of one
    sign: each block's codes all 0 or all 15 (kvalues -127 or 113) and its sub-block scales all 0 or all 63
    (ls - 32 = -32 or 31)."""
    packed = random_blocks("IQ4_XS", (R,), K, rng).reshape(R, K // 256, 136)
    pick = rng.choice(np.array([0x00, 0xFF], np.uint8), size=(R, K // 256, 2))
    packed[:, :, 2:8] = pick[:, :, :1]  # scales_h (2 bits a sub-block), scales_l (4)
    packed[:, :, 8:] = pick[:, :, 1:]
    packed = np.ascontiguousarray(packed.reshape(R, -1))
    return packed, dequantize(packed, QT["IQ4_XS"]).reshape(R, K).astype(np.float64)


def main():
    tmp = tempfile.mkdtemp()
    lib = ctypes.CDLL(build(tmp))
    rng = np.random.default_rng(int(os.environ.get("SEED", "1")))
    bad = 0
    for name in TYPES:
        bs, ts = GGML_QUANT_SIZES[QT[name]]
        for K in ([2048, 4096] if name in ("Q6_K", "IQ4_XS", "MXFP4") else [1024, 2048]):
            R = 37
            packed, w = random_rows(name, R, K, rng)
            # IQ4_XS twice: its int8 records and decode (v98, the stream kernels'), then its fp16 ones (the tile kernel's)
            for f16 in ((0, 1) if name == "IQ4_XS" else (0,)):
                for M, U in ((1, 1), (2, 2), (3, 4), (8, 1), (1, 4), (8, 2)):
                    x = wide_x(rng, M, K)
                    out = np.full((M, R), np.nan, np.float32)
                    rc = lib.fast_matmul(int(QT[name]), packed.ctypes.data_as(ctypes.c_void_p), R,
                                         ctypes.c_longlong(packed.shape[1]), K,
                                         np.ascontiguousarray(x, dtype=np.float32).ctypes.data_as(ctypes.c_void_p), M,
                                         out.ctypes.data_as(ctypes.c_void_p), U, f16)
                    bad += not report(f"{name:7s} K={K:5d} M={M} U={U}{' f16' if f16 else ''}", rc, out,
                                      x if f16 else records_x(name, x), w)
    # gemv_stream_kernel's dense path (MT = 1, 2, 4, 8 tokens): odd R (a short last unit for every MT),
    # one stage, several stages, and a short last stage for every MT < 8 (11 chunks; Q6_K: stages
    # 0, 4, 8 and 12 bytes past a 16-byte boundary). Then ragged rows (M = 1 only): not a multiple of
    # 16 bytes, and K not a multiple of the chunk (a short, zero-filled last chunk); MXFP4 K = 2880
    # (gpt-oss: 1530-byte rows, odd rows 2 bytes past 4-byte alignment) and 1600.
    ragged = {"Q4_0": [1600, 2880], "Q8_0": [1600, 2880], "Q6_K": [3072], "IQ4_XS": [2816], "MXFP4": [1600, 2880]}
    for name in TYPES:
        big = name in ("Q6_K", "IQ4_XS", "MXFP4")
        for K in ([2048, 4096, 5632] if big else [1024, 2048, 2816]) + ragged.get(name, []):
            R = 37
            packed, w = random_rows(name, R, K, rng)
            aligned = K % (256 if name in ("Q4_0", "Q8_0", "Q4_K", "Q5_K") else 512) == 0 and packed.shape[1] % 16 == 0
            for M in (1, 2, 3, 4, 5, 8) if aligned else (1,):
                x = wide_x(rng, M, K)
                bad += not check_stream(lib, name, packed, w, K, x, R, f"{name:7s} K={K:5d} M={M} stream")
    # the MT = 8 form over ragged rows in EXP's slot order (MoE units over hit experts, one expert here):
    # MXFP4 K = 2880 and 1600 (rows of 4k + 2 bytes, a short zero-filled last chunk), M = 2, 5, 8, and R
    # = 37, 17, 3 (last units of 5, 1 and 3 rows: slots past them read the unit's first row, its second or the one
    # before); a slot order that mixed the parities would fail the alignment check
    for K in (2880, 1600):
        for R in (37, 17, 3):
            packed, w = random_rows("MXFP4", R, K, rng)
            for M in (2, 5, 8):
                x = wide_x(rng, M, K)
                bad += not check_stream(lib, "MXFP4", packed, w, K, x, R, f"MXFP4   K={K:5d} M={M} R={R} exp8", exp8=True)
    # gemv_stream_kernel's split launch (M = 2..4): CTAs of a few warps splitting their units' stages,
    # so units are cut between up to 8 warps, CTAs own unequal numbers of units, some warps have no
    # stage (3 CTAs x 16 warps), the warp that completes a unit is not always the last one in order,
    # and (11 chunks; Q6_K's rows of 16-byte pieces allow no short stage) the last stage of every unit
    # is short.
    for name in TYPES:
        for K in {"Q6_K": [4096, 6144], "IQ4_XS": [4096, 5632], "MXFP4": [4096, 5632]}.get(name, [4096, 2816]):
            R = 37
            packed, w = random_rows(name, R, K, rng)
            for M in (2, 3, 4):
                x = wide_x(rng, M, K)
                for ctas, wpc in ((1, 8), (3, 16), (4, 3), (7, 2)):
                    bad += not check_stream(lib, name, packed, w, K, x, R,
                                            f"{name:7s} K={K:5d} M={M} split {ctas}x{wpc}", ctas, wpc)
    # M = 1 on the MT = 2 geometry, one kept value a lane (gemv_stream_kernel<..., ONE>): odd R (a
    # short last unit), one and several stages, a short last stage (K of 11 chunks when aligned). IQ4_XS (int8):
    # its records' block form, against gguf-py on the activations rounded as they hold them; its worst sums
    # (every code -127 or 113 and every |x| at its block's largest: the block's integer sums nearest int32's
    # limit) and the error against the unrounded activations
    for name in TYPES:
        for K in {"Q6_K": [2048, 6144], "IQ4_XS": [2048, 5632], "MXFP4": [2048, 5632]}.get(name, [1024, 2816, 4096]):
            R = 37
            packed, w = random_rows(name, R, K, rng)
            x = wide_x(rng, 1, K)
            bad += not check_m1(lib.fast_matmul_stream_one, name, packed, w, K, x, R, f"{name:7s} K={K:5d} M=1 one")
            if name == "IQ4_XS":
                ref = x.astype(np.float64) @ w.T
                out = np.full((1, R), np.nan, np.float32)
                lib.fast_matmul_stream_one(int(QT[name]), packed.ctypes.data_as(ctypes.c_void_p), R,
                                           ctypes.c_longlong(packed.shape[1]), K,
                                           np.ascontiguousarray(x, dtype=np.float32).ctypes.data_as(ctypes.c_void_p),
                                           out.ctypes.data_as(ctypes.c_void_p))
                print(f"{name:7s} K={K:5d} M=1 one: against the unrounded x rel="
                      f"{np.linalg.norm(out - ref) / np.linalg.norm(ref):.2e}")
    packed, w = extreme_iq4_xs(37, 2048, rng)
    x = np.full((1, 2048), 3.984375, np.float32)  # (bf16; x / sigma = 32640, high byte 127)
    bad += not check_m1(lib.fast_matmul_stream_one, "IQ4_XS", packed, w, 2048, x, 37, "IQ4_XS  K= 2048 M=1 one, extreme")
    # MoE pairs on flat items (gemv_stream_kernel's FLAT): rows of 1..4 items (Q6_K: super-blocks, rows of
    # 210 .. 840 bytes, every other one 2 bytes off 4-byte alignment), two units of rows each
    for name in TYPES:
        ie = 256 if name in ("Q4_0", "Q8_0", "Q4_K", "Q5_K", "Q6_K") else 512
        for n in (1, 2, 3, 4):
            K, R = n * ie, 2 * 16 // (n & -n)  # two units of flat_rows(n)
            packed, w = random_rows(name, R, K, rng)
            bad += not check_m1(lib.fast_matmul_stream_flat, name, packed, w, K, wide_x(rng, 1, K), R,
                                f"{name:7s} K={K:5d} M=1 flat, {n} items")
    # ragged flat items (MXFP4 rows of 4k + 2 bytes, v37): rows of 1, 3, 4, 6 and 8 chunks, the last one
    # short (K = 2880: gpt-oss, 6 items, 8 rows a unit), two units (K = 2880: three); then every item count the item
    # sums could hold (1..48 chunks, one K each): what the rule the launch and the model share (flat_rag_fits) admits
    # must sum every item, the rest be declined; rows of 16 chunks ran before the rule and left half their items out
    # (session 87)
    sweep = [32 * max(b for b in range(16 * n - 15, 16 * n + 1) if b % 4 == 2) for n in range(1, 49)]
    for K, may_decline in [(K, False) for K in (64, 1088, 1600, 2880, 3904)] + [(K, True) for K in sweep]:
        n = -(-K // 512)
        R = (3 if K == 2880 else 2) * 16 // (n & -n)
        packed, w = random_rows("MXFP4", R, K, rng)
        bad += not check_m1(lib.fast_matmul_stream_flat_ragged, "MXFP4", packed, w, K, wide_x(rng, 1, K), R,
                            f"MXFP4   K={K:5d} M=1 ragged flat, {n} items", may_decline)
    # IQ4_XS rows of 4k bytes (136-byte blocks, v111) on one-block items (v112): K = 768 (Qwen3-30B-A3B's down
    # projection: 3 items, 16 rows a unit of 3 stages), 256, 1280, 1792, 3840 (15 items, the most the item sums
    # hold); two units each. K = 256 and 768 (at most 4 items a row) as the launch takes them since v113: each
    # stage one run (BR, fast_matmul_stream_flat_run); the per-item form there too
    for K in (256, 768, 1280, 1792, 3840):
        n = K // 256
        R = 2 * 16 // (n & -n)
        packed, w = random_rows("IQ4_XS", R, K, rng)
        x = wide_x(rng, 1, K)
        bad += not check_m1(lib.fast_matmul_stream_flat_ragged, "IQ4_XS", packed, w, K, x, R,
                            f"IQ4_XS  K={K:5d} M=1 ragged flat, {n} items")
        if n <= 4:
            bad += not check_m1(lib.fast_matmul_stream_flat_run, "IQ4_XS", packed, w, K, x, R,
                                f"IQ4_XS  K={K:5d} M=1 flat one run (BR), {n} items")
    # FT<T>::scale (a lane reading one group's scale itself) against the scales chunk() passes
    for name in TYPES:
        K = 4096
        packed = random_blocks(name, (3,), K, rng)
        res = [lib.fast_check_scales(int(QT[name]), np.ascontiguousarray(packed[r]).ctypes.data_as(ctypes.c_void_p), K)
               for r in range(3)]
        ok = all(v == 0 for v in res)
        bad += not ok
        print(f"{name:7s} scales and group order: {res} {'ok' if ok else 'FAIL'}")
    print("host check:", "FAILED" if bad else "all ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
