"""The CUDA quantize kernels' block math, compiled for the host, against libggml byte for byte (CPU).

`kernels-src/gguf_kernels/csrc/quantize_blocks.cuh` holds the per-block quantizers as
`__host__ __device__` code; `kernels-src/gguf_kernels/tests/quantize_host.cu` runs them on the CPU
in the order the kernel runs its phases. Built here with nvcc the way exactness needs (no FMA
contraction, no fast math) and compared with llama.cpp's `ggml_quantize_chunk` (no importance
matrix, tests/ggml_ref.py). Skipped when nvcc or llama-cpp-python is missing.
The GPU side (the same code in the kernel) is tests/test_kernels_quantize_gpu.py.
"""
from __future__ import annotations

import ctypes
import shutil
import subprocess

import numpy as np
import pytest
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

import ggml_ref
from gguf_quant import build_kernels as bk
from quant_inputs import row

BLOCK32 = ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "MXFP4", "IQ4_NL"]
SUPER256 = ["Q4_K", "Q5_K", "Q6_K", "Q3_K", "Q2_K", "IQ4_XS"]
TYPES = BLOCK32 + SUPER256

NVCC_FLAGS = ["-O2", "-std=c++17", "-fmad=false", "-shared", "-Xcompiler", "-fPIC,-ffp-contract=off"]


@pytest.fixture(scope="module")
def host_lib(tmp_path_factory):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not on PATH")
    if not ggml_ref.available():
        pytest.skip("llama-cpp-python (libggml) is not installed")
    src = bk.default_source_dir() / "tests" / "quantize_host.cu"
    lib = tmp_path_factory.mktemp("quant") / "libquantize_host.so"
    r = subprocess.run([nvcc, *NVCC_FLAGS, "-o", str(lib), str(src)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return ctypes.CDLL(str(lib))


def host_quantize(lib, x: np.ndarray, name: str) -> np.ndarray:
    qt = GGMLQuantizationType[name]
    bs, ts = GGML_QUANT_SIZES[qt]
    x = np.ascontiguousarray(x, np.float32)
    rows, cols = x.shape
    out = np.zeros((rows, cols // bs * ts), np.uint8)
    rc = lib.quantize_blocks_host(int(qt), x.ctypes.data_as(ctypes.c_void_p), ctypes.c_int64(x.size // bs),
                                  out.ctypes.data_as(ctypes.c_void_p))
    assert rc == 0
    return out


# --------------------------------------------------------------------------------------------------
# inputs (the classes of tests/test_quantize.py, plus sub-block mixtures that reach every fallback)
# --------------------------------------------------------------------------------------------------


KINDS = ["normal", "zeros", "outlier", "tiny", "denormal", "huge", "constant", "alternating", "positive",
         "negative", "eighths", "fp16", "bf16", "heavy_tail", "sparse", "signed_zeros", "pow2", "offset",
         "sub_mix", "random_bits", "small_ints"]


def _matrix(cols: int, reps: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.stack([row(k, cols, rng) for _ in range(reps) for k in KINDS])


def _assert_equal(ours: np.ndarray, ref: np.ndarray, what: str, kinds=None):
    assert ours.shape == ref.shape
    bad = np.nonzero((ours != ref).any(axis=1))[0]
    if len(bad):
        r = bad[0]
        col = np.nonzero(ours[r] != ref[r])[0][:8]
        names = sorted({kinds[i % len(kinds)] for i in bad}) if kinds else []
        pytest.fail(f"{what}: {len(bad)}/{len(ours)} rows differ (kinds {names}); row {r} bytes {col.tolist()}: "
                    f"ours {ours[r, col].tolist()} ggml {ref[r, col].tolist()}")


# --------------------------------------------------------------------------------------------------
# tests
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", TYPES)
def test_host_quantizer_matches_ggml(host_lib, name):
    seed = int(np.random.SeedSequence().entropy % (1 << 32))  # fresh inputs every run, seed in the message
    cols_list = [32, 64, 256, 4096] if name in BLOCK32 else [256, 512, 4096]
    for cols in cols_list:
        x = _matrix(cols, reps=2 if cols == 4096 else 6, seed=seed + cols)
        with np.errstate(all="ignore"):
            ref = ggml_ref.ggml_quantize(x, name)
        _assert_equal(host_quantize(host_lib, x, name), ref, f"{name} cols={cols} seed={seed}", KINDS)


@pytest.mark.parametrize("name", TYPES)
def test_host_quantizer_matches_ggml_random_rows(host_lib, name):
    # Gaussian rows at random scales, the common case, in bulk (4M elements per type).
    seed = int(np.random.SeedSequence().entropy % (1 << 32))
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((1024, 4096)) * 10.0 ** rng.uniform(-4, 3, (1024, 1))).astype(np.float32)
    _assert_equal(host_quantize(host_lib, x, name), ggml_ref.ggml_quantize(x, name), f"{name} seed={seed}")


def test_fp16_conversion(host_lib):
    # fp16 -> fp32: all 65536 bit patterns (NaN payloads compared as bits).
    h = np.arange(1 << 16, dtype=np.uint16)
    out = np.empty(h.size, np.float32)
    host_lib.fp16_to_f32_host(h.ctypes.data_as(ctypes.c_void_p), ctypes.c_int64(h.size),
                              out.ctypes.data_as(ctypes.c_void_p))
    np.testing.assert_array_equal(out.view(np.uint32), h.view(np.float16).astype(np.float32).view(np.uint32))
    # fp32 -> fp16 (round to nearest even): every half value, the midpoints between neighbours and
    # one float32 ulp either side of them, plus random float32 bit patterns.
    finite = h.view(np.float16)[np.isfinite(h.view(np.float16))].astype(np.float32)
    finite = np.unique(finite)
    mids = ((finite[:-1].astype(np.float64) + finite[1:]) / 2).astype(np.float32)
    xs = [finite, mids, np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(-np.inf)),
          np.array([65504, 65519.996, 65520, 65536, 1e30, np.inf, -np.inf, 2.0**-25, 2.0**-24, 2.0**-26, 1e-45],
                   np.float32)]
    rng = np.random.default_rng(0)
    xs.append(rng.integers(0, 2**32, 200000, dtype=np.uint64).astype(np.uint32).view(np.float32))
    x = np.concatenate(xs).astype(np.float32)
    x = np.concatenate([x, -x])
    out16 = np.empty(x.size, np.uint16)
    host_lib.fp16_bits_host(x.ctypes.data_as(ctypes.c_void_p), ctypes.c_int64(x.size),
                            out16.ctypes.data_as(ctypes.c_void_p))
    with np.errstate(all="ignore"):
        ref = x.astype(np.float16).view(np.uint16)
    ref = np.where(np.isnan(x), np.uint16(0xFE00), ref)  # a NaN scale is stored as x86's default NaN
    np.testing.assert_array_equal(out16, ref)


def test_device_code_has_no_contracted_or_flushed_fp32_math(tmp_path):
    """The kernels' fp32 arithmetic must stay as written on the device too: in the PTX of the quantize
    kernels (built with the build's flags, -fmad=true by default) every fp32 add/sub/mul carries an explicit
    rounding mode (so ptxas cannot fuse it into an FMA), there is no fp32 fma/mad, and nothing flushes
    denormals. Bare float arithmetic added to quantize_blocks.cuh would show up here."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not on PATH")
    csrc = bk.default_source_dir() / "csrc"
    bad = []
    for src in ("quantize_k.cu", "quantize_32.cu"):
        ptx = tmp_path / (src + ".ptx")
        flags = [f for f in bk.NVCC_FLAGS if not f.startswith("-Xptxas")]  # the build's own flags
        r = subprocess.run([nvcc, *flags, "-arch=sm_90a", "-std=c++17", "-ptx", "-o", str(ptx), str(csrc / src)],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        for line in ptx.read_text().splitlines():
            op = line.strip().split(maxsplit=1)[0] if line.strip() else ""
            parts = op.split(".")
            if "f32" not in parts:
                continue
            if parts[0] in ("fma", "mad") or "ftz" in parts:
                bad.append(f"{src}: {line.strip()}")
            elif parts[0] in ("add", "sub", "mul") and not {"rn", "rz", "rm", "rp"} & set(parts):
                bad.append(f"{src}: {line.strip()}")
    assert not bad, "\n".join(bad[:20])
