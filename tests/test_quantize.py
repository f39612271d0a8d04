"""The pure-torch quantizers against the reference quantizers, byte for byte.

Oracles: llama.cpp's own `ggml_quantize_chunk` (no importance matrix) through ctypes (tests/ggml_ref.py,
skipped when llama-cpp-python is not installed) for every type, and gguf-py's numpy port
(`gguf.quants.quantize`) for the 32-element types it implements.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf.constants import GGMLQuantizationType

import ggml_ref
from gguf_quant.ggml.quant import QUANTIZED_TYPES, quantize
from gguf_quant.ggml.types import ggml_type
from quant_inputs import row

BLOCK32 = ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "MXFP4", "IQ4_NL"]
SUPER256 = ["Q4_K", "Q6_K", "Q5_K", "Q3_K", "Q2_K", "IQ4_XS"]
FLOATS = ["F32", "F16", "BF16"]
GGUF_PY = ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "MXFP4"]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def ggml():
    if not ggml_ref.available():
        pytest.skip("llama-cpp-python (libggml) is not installed")
    return ggml_ref


# --------------------------------------------------------------------------------------------------
# inputs
# --------------------------------------------------------------------------------------------------


KINDS = ["normal", "zeros", "outlier", "tiny", "denormal", "huge", "constant", "alternating", "positive",
         "negative", "eighths", "fp16", "heavy_tail", "sparse", "signed_zeros", "pow2", "offset"]
# gguf-py takes the first element as the max of an all-zero block, so a leading -0.0 flips the sign of
# the stored zero scale; ggml (and we) keep +0. Leave signed zeros out of the gguf-py comparison.
GGUF_PY_KINDS = [k for k in KINDS if k not in ("sparse", "signed_zeros")]


def _matrix(cols: int, kinds=KINDS, reps: int = 2, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed + cols)
    return np.stack([row(k, cols, rng) for _ in range(reps) for k in kinds])


def _assert_bytes_equal(ours: torch.Tensor, ref: np.ndarray, x: np.ndarray, kinds, what: str):
    ours = ours.cpu().numpy()
    assert ours.shape == ref.shape, (ours.shape, ref.shape)
    bad = np.nonzero((ours != ref).any(axis=1))[0]
    if len(bad):
        names = sorted({kinds[i % len(kinds)] for i in bad}) if kinds else []
        r = bad[0]
        col = np.nonzero(ours[r] != ref[r])[0][:8]
        pytest.fail(f"{what}: {len(bad)}/{len(x)} rows differ (kinds {names}); row {r} bytes {col.tolist()}: "
                    f"ours {ours[r, col].tolist()} ref {ref[r, col].tolist()}")


def _cols(t: str) -> list[int]:
    return [32, 64, 256, 4096] if t in BLOCK32 else [256, 512, 4096]


# --------------------------------------------------------------------------------------------------
# byte-exactness
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("qtype", BLOCK32 + SUPER256 + FLOATS)
def test_matches_ggml(ggml, qtype):
    for cols in _cols(qtype):
        x = _matrix(cols, reps=1 if cols == 4096 else 2)
        _assert_bytes_equal(quantize(torch.from_numpy(x), qtype), ggml.ggml_quantize(x, qtype), x, KINDS,
                            f"{qtype} cols={cols} vs ggml")


@pytest.mark.parametrize("qtype", BLOCK32 + SUPER256)
@pytest.mark.parametrize("rows", [1, 3, 17])
def test_matches_ggml_random_rows(ggml, qtype, rows):
    rng = np.random.default_rng(rows)
    cols = 512
    x = (rng.standard_normal((rows, cols)) * rng.uniform(0.01, 10, (rows, 1))).astype(np.float32)
    _assert_bytes_equal(quantize(torch.from_numpy(x), qtype), ggml.ggml_quantize(x, qtype), x, None,
                        f"{qtype} rows={rows} vs ggml")


@pytest.mark.parametrize("qtype", GGUF_PY)
def test_matches_gguf_py(qtype):
    import gguf.quants

    for cols in (32, 64, 256, 4096):
        x = _matrix(cols, GGUF_PY_KINDS, reps=1 if cols == 4096 else 2)
        with np.errstate(all="ignore"):
            ref = gguf.quants.quantize(x, GGMLQuantizationType[qtype])
        _assert_bytes_equal(quantize(torch.from_numpy(x), qtype), ref, x, GGUF_PY_KINDS,
                            f"{qtype} cols={cols} vs gguf-py")


# --------------------------------------------------------------------------------------------------
# interface
# --------------------------------------------------------------------------------------------------

def test_row_shape_and_dtype():
    for t in QUANTIZED_TYPES + tuple(FLOATS):
        gt = ggml_type(t)
        q = quantize(torch.randn(3, 512), t)
        assert q.dtype == torch.uint8 and q.shape == (3, gt.row_bytes(512)), t


def test_quant_type_spellings():
    w = torch.randn(2, 256)
    ref = quantize(w, "Q4_K")
    for spelling in ("q4_k", int(GGMLQuantizationType.Q4_K), GGMLQuantizationType.Q4_K, ggml_type("Q4_K")):
        assert torch.equal(quantize(w, spelling), ref)


def test_leading_dims_and_1d():
    w = torch.randn(2, 3, 256)
    q = quantize(w, "Q6_K")
    assert q.shape == (2, 3, 210)
    assert torch.equal(q.reshape(6, 210), quantize(w.reshape(6, 256), "Q6_K"))
    assert torch.equal(quantize(w[0, 0], "Q6_K"), q[0, 0])
    assert quantize(torch.empty(0, 256), "Q4_0").shape == (0, 144)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_inputs_quantize_their_float32_values(dtype):
    w = torch.randn(4, 256).to(dtype)
    for t in ("Q8_0", "Q4_K", "IQ4_XS", "F16", "BF16"):
        assert torch.equal(quantize(w, t), quantize(w.float(), t)), t


def test_non_contiguous_input():
    w = torch.randn(512, 8)
    assert torch.equal(quantize(w.T, "Q5_K"), quantize(w.T.contiguous(), "Q5_K"))


def test_bad_input():
    with pytest.raises(ValueError, match="multiple of the Q4_K block size 256"):
        quantize(torch.randn(2, 320), "Q4_K")
    with pytest.raises(ValueError, match="multiple of the Q8_0 block size 32"):
        quantize(torch.randn(2, 48), "Q8_0")
    with pytest.raises(ValueError, match="no quantizer for IQ2_XXS"):
        quantize(torch.randn(2, 256), "IQ2_XXS")
    with pytest.raises(ValueError, match="no quantizer for I8"):
        quantize(torch.randn(2, 256), "I8")
    with pytest.raises(ValueError, match="floating point"):
        quantize(torch.ones(2, 256, dtype=torch.int32), "Q4_0")
    with pytest.raises(ValueError, match="unknown ggml type"):
        quantize(torch.randn(2, 256), "Q9_9")
    with pytest.raises(ValueError):
        quantize(torch.tensor(1.0), "Q8_0")


# --------------------------------------------------------------------------------------------------
# round trip through the dequantizer
# --------------------------------------------------------------------------------------------------

# Worst relative RMS error allowed for Gaussian rows (measured values are well below these).
_RT_TOL = {"Q8_0": 0.01, "Q6_K": 0.025, "Q5_0": 0.05, "Q5_1": 0.05, "Q5_K": 0.05, "Q4_0": 0.1, "Q4_1": 0.1,
           "Q4_K": 0.1, "IQ4_NL": 0.1, "IQ4_XS": 0.1, "MXFP4": 0.15, "Q3_K": 0.2, "Q2_K": 0.35,
           "F32": 0.0, "F16": 1e-3, "BF16": 1e-2}


@pytest.mark.parametrize("qtype", list(_RT_TOL))
def test_round_trip(qtype):
    dequant = pytest.importorskip("gguf_quant.ggml.dequant")
    w = torch.randn(8, 512, generator=torch.Generator().manual_seed(1))
    w[0] = 0
    d = dequant.dequantize(quantize(w, qtype), qtype, torch.float32)
    assert d.shape == w.shape
    assert torch.all(d[0] == 0)
    err = ((d - w).pow(2).mean() / w.pow(2).mean()).sqrt().item()
    assert err <= _RT_TOL[qtype], f"{qtype}: relative RMS error {err:.4f}"


# --------------------------------------------------------------------------------------------------
# GPU: the same bytes as on CPU
# --------------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("qtype", BLOCK32 + SUPER256 + FLOATS)
def test_cuda_matches_cpu(qtype):
    x = torch.from_numpy(_matrix(4096, reps=1))
    assert torch.equal(quantize(x.cuda(), qtype).cpu(), quantize(x, qtype))
