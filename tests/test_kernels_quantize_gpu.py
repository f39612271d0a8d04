"""The CUDA quantize kernel against the pure-torch quantizers, byte for byte (GPU only).

Needs a CUDA device and a kernel build with the `quantize` op that the loader can find
(`GGUF_QUANT_KERNELS=<dir>` after `python -m gguf_quant.build_kernels`); skipped otherwise.
Inputs are fresh random on every run (the seed is in the failure message). The oracle is
`gguf_quant.ggml.quant`'s torch path (byte-exact with llama.cpp, tests/test_quantize.py), run on
the same device with the kernel dispatch switched off, and libggml itself where llama-cpp-python
is installed.
"""
from __future__ import annotations

import time

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.gpu

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

import ggml_ref
from gguf_quant import kernel_loader
from gguf_quant.ggml import quant
from kernel_build import kernel_module_or_skip

KMOD = kernel_module_or_skip()
if not hasattr(KMOD, "quantize"):
    pytest.skip("the loaded kernel build has no quantize op (rebuild)", allow_module_level=True)

ALL = ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "MXFP4", "IQ4_NL", "Q4_K", "Q5_K", "Q6_K", "Q3_K", "Q2_K", "IQ4_XS"]
TYPES = [t for t in ALL if int(GGMLQuantizationType[t]) in getattr(KMOD, "QUANTIZE_TYPES", ())]
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
DEV = torch.device("cuda")


def qid(name: str) -> int:
    return int(GGMLQuantizationType[name])


def block_of(name: str) -> tuple[int, int]:
    return GGML_QUANT_SIZES[GGMLQuantizationType[name]]


@pytest.fixture
def torch_path(monkeypatch):
    """`quant.quantize` with the kernel dispatch switched off: the pure-torch path on any device."""
    real = kernel_loader.kernel_op

    def no_quantize_kernel(op, qtype, device):
        return None if op == "quantize" else real(op, qtype, device)

    def run(x, name):
        with monkeypatch.context() as m:
            m.setattr(kernel_loader, "kernel_op", no_quantize_kernel)
            return quant.quantize(x, name)

    return run


def fresh_seed() -> int:
    return int(np.random.SeedSequence().entropy % (1 << 31))


def inputs(rows: int, cols: int, seed: int) -> torch.Tensor:
    """float32 [rows, cols]: Gaussian rows at random scales, with every few rows a special class."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(rows, cols, generator=g) * 10.0 ** (torch.rand(rows, 1, generator=g) * 8 - 4)
    kinds = rows // 4
    for r in range(kinds):
        k = r % 11
        i = 4 * r + 1
        if k == 0:
            x[i] = 0
        elif k == 1:
            x[i, torch.randint(cols, (1,), generator=g)] = 1e4
        elif k == 2:
            x[i] *= 1e-30
        elif k == 3:
            x[i] *= 1e-39  # denormal
        elif k == 4:
            x[i] *= 1e25  # fp16 overflow of the scales, fp32 overflow of x*x
        elif k == 5:
            x[i] = x[i, 0]  # constant
        elif k == 6:
            x[i] = (torch.randint(-64, 65, (cols,), generator=g) / 8).float()  # rounding ties
        elif k == 7:  # every 16 elements their own magnitude (K-quant sub-block fallbacks)
            x[i] *= (10.0 ** (torch.rand(cols // 16, 1, generator=g) * 14 - 9)).repeat_interleave(16, 0).reshape(cols)
        elif k == 8:
            x[i] = x[i].abs() + 100
        elif k == 9:
            x[i] = torch.where(torch.rand(cols, generator=g) < 0.9, torch.zeros(cols), x[i])  # sparse
        else:  # powers of two and the floats just below them (MXFP4's log2 edge)
            e = torch.randint(-10, 10, (cols,), generator=g).double()
            below = torch.randint(0, 3, (cols,), generator=g).double() * 2.0**-24
            x[i] = (2.0**e * (1 - below) * torch.sign(torch.randn(cols, generator=g))).float()
    return x


def assert_bytes_equal(ours: torch.Tensor, ref: torch.Tensor, what: str):
    assert ours.dtype == torch.uint8 and ours.shape == ref.shape, (ours.shape, ref.shape)
    bad = (ours != ref).any(dim=-1).reshape(-1).nonzero().flatten()
    if len(bad):
        r = int(bad[0])
        o, e = ours.reshape(-1, ours.shape[-1])[r], ref.reshape(-1, ref.shape[-1])[r]
        col = (o != e).nonzero().flatten()[:8]
        pytest.fail(f"{what}: {len(bad)} rows differ; row {r} bytes {col.tolist()}: "
                    f"kernel {o[col].tolist()} reference {e[col].tolist()}")


# Row counts not a multiple of any CTA's block count (32-element types: 256 blocks per CTA,
# Q4_K/Q5_K/IQ4_XS: 32 super-blocks, Q2_K/Q3_K/Q6_K: 16).
SHAPES = [(1, 256), (3, 512), (37, 256), (129, 768), (1000, 4096), (61, 11008)]


@pytest.mark.parametrize("name", TYPES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_kernel_matches_torch_path(torch_path, name, dtype):
    seed = fresh_seed()
    bs, _ = block_of(name)
    shapes = SHAPES + ([(5, 32), (77, 96), (333, 2880)] if bs == 32 else [])
    if dtype != torch.float32:  # the input type only changes the kernel's loads
        shapes = [(37, 256), (129, 768), (1000, 4096)]
    for rows, cols in shapes:
        x = inputs(rows, cols, seed + rows).to(DEV, dtype)
        ours = KMOD.quantize(x, qid(name))
        ref = torch_path(x, name)
        assert_bytes_equal(ours, ref, f"{name} {dtype} [{rows}, {cols}] seed={seed}")


@pytest.mark.parametrize("name", TYPES)
def test_kernel_matches_ggml(name):
    if not ggml_ref.available():
        pytest.skip("llama-cpp-python (libggml) is not installed")
    seed = fresh_seed()
    x = inputs(512, 4096, seed)
    with np.errstate(all="ignore"):
        ref = torch.from_numpy(ggml_ref.ggml_quantize(x.numpy(), name))
    assert_bytes_equal(KMOD.quantize(x.to(DEV), qid(name)).cpu(), ref, f"{name} vs libggml seed={seed}")


@pytest.mark.parametrize("name", TYPES)
def test_quantize_dispatches_to_kernel(name):
    assert kernel_loader.kernel_op("quantize", qid(name), DEV) is not None
    x = inputs(64, 1024, fresh_seed()).to(DEV, torch.bfloat16)
    assert torch.equal(quant.quantize(x, name), KMOD.quantize(x, qid(name)))
    assert torch.equal(quant.quantize(x.double(), name), KMOD.quantize(x.float(), qid(name)))


def test_layouts_and_edges(torch_path):
    x = inputs(96, 512, fresh_seed()).to(DEV)
    ref = KMOD.quantize(x, qid("Q4_K"))
    # leading dims, non-contiguous and misaligned inputs
    assert torch.equal(KMOD.quantize(x.reshape(4, 24, 512), qid("Q4_K")).reshape(96, -1), ref)
    assert torch.equal(KMOD.quantize(x.T.contiguous().T, qid("Q4_K")), ref)
    buf = torch.empty(x.numel() + 1, device=DEV)
    buf[1:] = x.reshape(-1)
    assert torch.equal(KMOD.quantize(buf[1:].view(96, 512), qid("Q4_K")), ref)
    assert KMOD.quantize(torch.empty(0, 256, device=DEV), qid("Q6_K")).shape == (0, 210)
    # the current stream
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        out = KMOD.quantize(x, qid("Q4_K"))
    s.synchronize()
    assert torch.equal(out, ref)
    # clear errors
    with pytest.raises(RuntimeError, match="multiple of the block size 256"):
        KMOD.quantize(torch.randn(2, 320, device=DEV), qid("Q4_K"))
    with pytest.raises(RuntimeError, match="float32, bfloat16 or float16"):
        KMOD.quantize(torch.ones(2, 256, device=DEV, dtype=torch.int32), qid("Q4_K"))
    with pytest.raises((RuntimeError, NotImplementedError)):  # no CPU kernel registered
        KMOD.quantize(torch.randn(2, 256), qid("Q4_K"))
    with pytest.raises(RuntimeError, match="not supported"):
        KMOD.quantize(torch.randn(2, 256, device=DEV), int(GGMLQuantizationType.IQ2_XXS))


def test_opcheck():
    x = torch.randn(8, 512, device=DEV, dtype=torch.bfloat16)
    for name in ("Q8_0", "Q4_K", "Q6_K"):
        torch.library.opcheck(KMOD.ops.quantize, (x, qid(name)))


@pytest.mark.parametrize("name", ["Q8_0", "Q4_K", "Q5_K", "Q6_K"])
def test_throughput_report(name, capsys):
    """Not a benchmark with a bar: prints the kernel's rate on a Llama-3-8B up-projection (bf16)."""
    x = torch.randn(14336, 4096, device=DEV, dtype=torch.bfloat16)
    KMOD.quantize(x, qid(name))
    torch.cuda.synchronize()
    n = 5
    t0 = time.perf_counter()
    for _ in range(n):
        KMOD.quantize(x, qid(name))
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / n
    with capsys.disabled():
        print(f"\nquantize {name} 14336x4096 bf16: {dt * 1e3:.2f} ms, {x.numel() * 2 / dt / 1e9:.0f} GB/s of bf16 input")
