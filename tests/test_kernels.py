"""The CUDA kernels against the pure-torch path, on fresh random blocks (GPU only).

Needs a CUDA device and a kernel build the loader can find (`GGUF_QUANT_KERNELS=<dir>` after
`python -m gguf_quant.build_kernels`, or the Hub); skipped otherwise.
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.gpu

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from gguf_quant import kernel_loader
from kernel_build import kernel_module_or_skip
from moe_reference import moe_reference
from random_blocks import random_blocks

KMOD = kernel_module_or_skip()

TYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS", "MXFP4",
         "NVFP4", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M"]
DTYPES = [torch.bfloat16, torch.float16, torch.float32]
TOL = {torch.bfloat16: 1e-2, torch.float16: 1e-2, torch.float32: 1e-3}
DEV = torch.device("cuda")

def qid(name: str) -> int:
    return int(GGMLQuantizationType[name])


def block_of(name: str) -> tuple[int, int]:
    return GGML_QUANT_SIZES[GGMLQuantizationType[name]]


def random_packed(name: str, shape: tuple[int, ...], cols: int, rng: np.random.Generator) -> torch.Tensor:
    """Random valid blocks for a [*shape, cols] weight, as uint8 [*shape, row_bytes] on the GPU."""
    return torch.from_numpy(random_blocks(name, shape, cols, rng)).to(DEV)


def ref_dequant(packed: torch.Tensor, name: str) -> torch.Tensor:
    """fp32 reference: the project's pure-torch dequantizer, or gguf-py's numpy one."""
    try:
        from gguf_quant.ggml import dequantize
    except ImportError:
        dequantize = None
    if dequantize is not None:
        return dequantize(packed, qid(name), torch.float32).float()
    from gguf.quants import dequantize as np_dequant

    bs, ts = block_of(name)
    flat = packed.reshape(-1, packed.shape[-1]).cpu().numpy()
    out = np_dequant(flat, GGMLQuantizationType[name]).reshape(*packed.shape[:-1], packed.shape[-1] // ts * bs)
    return torch.from_numpy(np.ascontiguousarray(out, dtype=np.float32)).to(packed.device)


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.double(), ref.double()
    assert torch.isfinite(out).all(), "non-finite output"
    return ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def check_matmul(name: str, M: int, N: int, K: int, rng, dtype: torch.dtype = torch.bfloat16) -> None:
    """matmul of fresh random blocks [N, K] by x [M, K] against gguf-py's dequantization."""
    packed = random_packed(name, (N,), K, rng)
    x = torch.randn(M, K, device=DEV, dtype=dtype)
    err = rel_err(KMOD.matmul(x, packed, qid(name)), x.double() @ ref_dequant(packed, name).double().T)
    assert err <= TOL[dtype], f"{name} {dtype} M={M} N={N} K={K}: rel err {err:.2e}"


def k_for(name: str, odd: bool = False) -> int:
    """A K that is awkward for the kernel: not a multiple of its 512-element chunk; for 32-element
    blocks with `odd`, not even a multiple of 64."""
    bs, _ = block_of(name)
    if bs == 256:
        return 1280
    if bs == 64:  # NVFP4: 45 and 25 blocks, neither a whole 512-element chunk
        return 2880 if odd else 1600
    if name == "MXFP4" and not odd:
        return 2880
    return 1056 if odd else 1600


@pytest.fixture
def rng(request):
    seed = abs(hash(request.node.name)) % (2**32)
    return np.random.default_rng(seed)


# --- dequantize / get_rows --------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", TYPES)
def test_dequantize(name, dtype, rng):
    for K in sorted({k_for(name), k_for(name, odd=True)}):
        packed = random_packed(name, (37,), K, rng)
        ref = ref_dequant(packed, name)
        out = KMOD.dequantize(packed, qid(name), dtype)
        assert out.shape == (37, K) and out.dtype == dtype
        if dtype == torch.float32:
            torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-7)
        else:
            torch.testing.assert_close(out.float(), ref.to(dtype).float(), rtol=1e-2, atol=1e-6)


@pytest.mark.parametrize("idtype", [torch.int64, torch.int32], ids=str)
@pytest.mark.parametrize("name", TYPES)
def test_get_rows(name, idtype, rng):
    K = k_for(name)
    packed = random_packed(name, (50,), K, rng)
    ids = torch.from_numpy(rng.integers(0, 50, size=(3, 7))).to(DEV, idtype)
    ref = ref_dequant(packed, name)[ids.long()]
    out = KMOD.get_rows(packed, ids, qid(name), torch.bfloat16)
    assert out.shape == (3, 7, K)
    torch.testing.assert_close(out.float(), ref.to(torch.bfloat16).float(), rtol=1e-2, atol=1e-6)


def run_child(env: dict, target: str, select: str, expect: str) -> None:
    """pytest on `target` -k `select` in a child process with `env` added (the launch reads its knobs
    once a process): it must pass and print `expect`."""
    r = subprocess.run([sys.executable, "-m", "pytest", target, "-q", "-p", "no:cacheprovider", "-k", select],
                       env={**os.environ, **env}, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0 and expect in r.stdout, r.stdout[-3000:] + r.stderr[-2000:]


# --- matmul -----------------------------------------------------------------------------------

@pytest.mark.parametrize("M", [1, 3, 8, 13, 24, 40, 80])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", TYPES)
def test_matmul(name, dtype, M, rng):
    for K in sorted({k_for(name), k_for(name, odd=True)}):
        N = 1000  # not a multiple of the 16 rows a CTA owns
        packed = random_packed(name, (N,), K, rng)
        w = ref_dequant(packed, name).double()
        x = torch.randn(M, K, device=DEV, dtype=dtype)
        ref = x.double() @ w.T
        out = KMOD.matmul(x, packed, qid(name))
        assert out.shape == (M, N) and out.dtype == dtype
        err = rel_err(out, ref)
        assert err <= TOL[dtype], f"{name} {dtype} M={M} K={K}: rel err {err:.2e}"


@pytest.mark.parametrize("M", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("name", ["Q4_0", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS", "MXFP4"])
def test_matmul_stream(name, M, rng):
    """Rows of whole 16-byte pieces (the M <= 8 stream kernel's case, which test_matmul's K avoid):
    K = 2048 is 4 chunks of 512 (a short stage at M = 1); Q6_K's stages at M = 3..8 start 4, 8 or 12
    bytes past a 16-byte boundary; K = 6144 gives 12 chunks (two stages at M = 1, the second short)."""
    for K in (2048, 6144):
        check_matmul(name, M, 999, K, rng)


@pytest.mark.parametrize("name", ["Q4_0", "Q8_0", "Q4_K", "Q5_K", "IQ4_XS", "MXFP4"])
def test_matmul_stream_row_pairs(name, rng):
    """M = 1 on rows of whole 16-byte pieces with K of 13 and 15 chunks: on row pairs (where the rule
    takes them; test_matmul_stream_row_pairs_forced runs them there), whose lanes keep one product a
    pair of groups from row 0's chunk kap or row 1's chunk kap ^ 2 (v32), the last stage of 5 and 7
    chunks has lanes with one of those two chunks past it; N = 999 (a last unit of one row)."""
    ce = 512 if name in ("IQ4_XS", "MXFP4") else 256
    for K in (13 * ce, 15 * ce):
        check_matmul(name, 1, 999, K, rng)


def test_matmul_stream_row_pairs_forced():
    """test_matmul_stream_row_pairs and test_matmul_stream_one (K = 2816: a last stage of 3 chunks; a
    last unit of one row) with M = 1 on row pairs only (GGUF_KERNELS_FAST_ONE=0), in a child: with one
    kept value a lane (v32), and with the former epilogue (GGUF_KERNELS_FAST_ONE1=0), which MoE pairs on
    row pairs keep."""
    select = "test_matmul_stream_row_pairs and not forced or test_matmul_stream_one"
    run_child({"GGUF_KERNELS_FAST_ONE": "0"}, __file__, select, "13 passed")
    run_child({"GGUF_KERNELS_FAST_ONE": "0", "GGUF_KERNELS_FAST_ONE1": "0"}, __file__, select, "13 passed")


@pytest.mark.parametrize("M", [3, 4, 5, 6, 8])
@pytest.mark.parametrize("name", ["Q4_0", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS", "MXFP4"])
def test_matmul_stream_ksplit(name, M, rng):
    """M = 3..8 on the MT = 8 stream kernel with K split over a cluster of CTAs that meet in rank 0's shared
    memory (M < 8: the padded tokens' records are never built, their columns never stored): where 8 tokens'
    records of all of K do not fit a CTA (K = 14336: 4 slices of 14 chunks, over the grid 8 of 7 with 16 warps
    a CTA for Q4_0, Q4_K and Q5_K (v83); N = 4095, whose last unit is a row short) or leave a thread too many
    (N = 999, K = 4096: 8 slices of 1-2 chunks), and where they fit but a split doubles the warps (N = 14335,
    K = 4096: 2 slices, 14 warps a CTA; at M = 3, 4 only IQ4_XS and MXFP4 take it there). Q6_K's slices of
    420-byte chunks start 4-byte aligned: N = 999 in 8 slices of one chunk, 0, 4, 8 and 12 bytes past a
    16-byte boundary; its N = 4095 takes a 4-way split (213 KB, under the H200's 227 KB opt-in limit) and N =
    14335 the plain launch with 8 warps (212 KB; test_matmul_stream_smem_cap runs both under 200 KB). N = 4095
    with K = 14336 and 4096: Q6_K, MXFP4 and IQ4_XS take clusters of 2 with two warps a unit, each reading
    half the CTA's slice (v48; test_matmul_stream_ks_warps_a_unit runs every type both ways), and K = 512,
    where a slice can be one stage and the first warp of a unit then reads none. At K = 14336 every type but
    Q8_0 takes the split over a plain grid instead (v56, v70; test_matmul_stream_ks_grid runs every case both
    ways). fp16 activations once."""
    for N, K in ((4095, 14336), (999, 4096), (14335, 4096), (4095, 4096), (4095, 512)):
        check_matmul(name, M, N, K, rng)
    if M == 8:
        check_matmul(name, M, 999, 4096, rng, torch.float16)


def test_matmul_stream_without_ks():
    """The plain launches that the K split now precedes stay reachable with GGUF_KERNELS_FAST_KS=0, read
    once a process: in a child, test_matmul_stream's M = 5 and 8 (the plain M = 8 launch, 4096 ->
    14336) and test_matmul_stream_split's M = 3 and 4 (the MT = 4 launch with its stages split over
    warps)."""
    run_child({"GGUF_KERNELS_FAST_KS": "0"}, f"{__file__}::test_matmul_stream", "5] or 8]", "14 passed")
    # M = 3, 4 with few units: the split now precedes the MT = 4 launch whose stages split over warps
    run_child({"GGUF_KERNELS_FAST_KS": "0"}, f"{__file__}::test_matmul_stream_split", "3] or 4]", "12 passed")


@pytest.mark.parametrize("h", ["1", "2"])
def test_matmul_stream_ks_warps_a_unit(h):
    """GGUF_KERNELS_FAST_KS_H=h, in a child, test_matmul_stream_ksplit's M = 5 and 8: the K split's
    launches with one warp a unit for every type (clusters of 4 with 9 warps a CTA at N = 4095, as
    before v48), and with two for every type (by default only Q6_K, MXFP4 and IQ4_XS take two)."""
    env = {"GGUF_KERNELS_FAST_KS_H": h, "GGUF_KERNELS_FAST_KS_GRID": "0"}  # (the grid has one warp a unit)
    run_child(env, f"{__file__}::test_matmul_stream_ksplit", "5] or 8]", "14 passed")


@pytest.mark.cuda_graph  # (its child captures graphs: the caching allocator must be on under memcheck)
def test_matmul_stream_ks_grid():
    """The K split over a plain grid, its slices meeting at the grid barrier of a cooperative launch (v55:
    ranks 1 .. Z - 1 store their sums in a buffer of the call, rank 0 adds them after the barrier), taken
    by default where it wins (Q4_K, Q5_K from K = 8192 with N >= 4096, and from 12288; Q4_0, Q6_K, MXFP4 and
    IQ4_XS from 12288). In children: GGUF_KERNELS_FAST_KS_GRID=1 (the grid wherever it fits) on
    test_matmul_stream_ksplit (every type, M = 3..8, 2 to 8 slices, Q6_K's 4-byte aligned ones), the
    dependent-launch chain in a CUDA graph at M = 8 (replays of cooperative kernel nodes) and launches on two
    streams at once; then GGUF_KERNELS_FAST_KS_GRID=0 (clusters everywhere) on test_matmul_stream_ksplit."""
    run_child({"GGUF_KERNELS_FAST_KS_GRID": "1"}, __file__,
              "test_matmul_stream_ksplit or (test_matmul_dependent_launch_chain and 8]) or test_matmul_ks_two_streams",
              "41 passed")
    run_child({"GGUF_KERNELS_FAST_KS_GRID": "0"}, f"{__file__}::test_matmul_stream_ksplit", "", "35 passed")


@pytest.mark.parametrize("name", ["Q4_0", "Q8_0", "Q4_K", "Q5_K", "MXFP4", "IQ4_XS"])
def test_matmul_stream_ks_units_cases(name, rng):
    """8191 -> 8192 at M = 3, 5 and 8 (bf16; M = 8 fp16 too): under a 120 KB shared-memory cap
    (test_matmul_stream_ks_units runs them so) neither the plain launch nor a K split of one unit a warp takes
    them for Q4_K, Q5_K, Q8_0, MXFP4 and IQ4_XS at M = 5..8 (and Q4_K, Q5_K, Q8_0 at M = 3), and the grid's
    warps read two units each, the last unit a row short (v86); Q4_0 there takes the grid of one unit a warp
    in 4 slices, which its rule (from K = 12288) would not, where it fell to the 16-row tiles before. Without
    the cap: the launches the full shared memory gives."""
    for M in (3, 5, 8):
        check_matmul(name, M, 8191, 8192, rng)
    check_matmul(name, 8, 8191, 8192, rng, torch.float16)


def test_matmul_stream_ks_units(rng):
    """The grid K split with several units a warp (v86): Llama-70B's down projection at M = 4 (28672 -> 8191:
    512 units over 8 slices of 16 warps, two units a warp; every rank stores each unit's sums in the meeting
    buffer, rank 0 adds them after the barrier), where the plain launch's 4 tokens' records of K do not fit a
    CTA and one unit a warp does not fit a wave; then, in a child with GGUF_KERNELS_FAST_SMEM_KB=120, the
    smaller cases of test_matmul_stream_ks_units_cases."""
    for M in (2, 4):  # M = 2: the grid since v87 (the plain launch under GGUF_KERNELS_FAST_KS_PLAIN=1)
        check_matmul("Q4_K", M, 8191, 28672, rng)
    run_child({"GGUF_KERNELS_FAST_SMEM_KB": "120"}, f"{__file__}::test_matmul_stream_ks_units_cases", "", "6 passed")


@pytest.mark.parametrize("name", ["Q4_0", "Q4_K", "Q5_K", "Q8_0", "IQ4_XS", "MXFP4"])
def test_matmul_stream_ks_take(name, rng):
    """M = 3, 4 on Qwen2.5-7B's and Qwen3-14B's down projections (18944 -> 3583, the last unit a row short;
    17408 -> 5120), whose tokens' records of K the plain launch declines and where ks_first tries no cluster
    launch (too many units an SM) or none keeps 8 warps a CTA: on 17408 the grid (v88), one unit a warp, or for
    MXFP4 and IQ4_XS (34 chunks of 512) 4 slices of 9, 9, 8 and 8 chunks (v90; before, two slices of several units
    on 5 warps a CTA). On 18944 (74 chunks of 256, 37 of 512), where 8 tokens' records of half of K leave room for
    fewer than 5 warps: 8 slices of 10, 10, 9, ... chunks (MXFP4, IQ4_XS: 5, 5, 5, 5, 5, 4, 4, 4), one unit a warp
    (v90; the 16-row tiles before). The grid's kernel, by torch.profiler where CUPTI is free."""
    for M, N, K in ((3, 3583, 18944), (4, 5120, 17408)):
        packed = random_packed(name, (N,), K, rng)
        x = torch.randn(M, K, device=DEV, dtype=torch.bfloat16)
        names = check_launch(name, packed, x, ref_dequant(packed, name).double())
        if names:
            assert grid_ran(names), names


def uneven_on() -> bool:
    return os.environ.get("GGUF_KERNELS_FAST_KS_UNEVEN") != "0"


UNEVEN = [("MXFP4", 25600, 5120, (2, 4, 8)), ("IQ4_XS", 25600, 5120, (2, 8)), ("Q6_K", 17408, 5120, (2, 4)),
          ("Q6_K", 18944, 3584, (3,)), ("Q6_K", 3584, 18944, (8,)), ("Q4_K", 18944, 3584, (8,))]


@pytest.mark.parametrize("name, K, N, ms", UNEVEN)
def test_matmul_stream_ks_uneven(name, K, N, ms, rng):
    """The grid K split in slices of unequal chunk counts (v90; ranks below kx one chunk more), where no equal slices
    leave 8 warps a CTA: Qwen3-32B's down projection (25600 -> 5120: 50 chunks of 512, 4 slices of 13, 13, 12, 12)
    for MXFP4 and IQ4_XS, at M = 2 before the plain launch (from K = 12288); Q6_K's rows that are not 16-byte
    multiples (MR: each row's stage a 1-D copy from its own boundary, slices starting 4-byte aligned) in 8 slices of
    several units a warp (17408: 34 chunks, 5, 5, 4, ...; 18944: 37, 5, 5, 5, 5, 5, 4, 4, 4) and 3584 -> 18944 in 4
    of 2, 2, 2, 1 (1184 units); Q4_K 18944 -> 3584 in 8 slices of one unit a warp. Against gguf-py's dequantization,
    fp16 once; the launch is the grid's (GZ), by torch.profiler where CUPTI is free."""
    check_grid_launch(name, N, K, ms, uneven_on(), rng)


def test_matmul_stream_ks_uneven_off():
    """GGUF_KERNELS_FAST_KS_UNEVEN=0, in a child: test_matmul_stream_ks_uneven's cases on the launches they took
    before v90 (the plain launch, the 16-row tiles, gemv_mma_kernel; none of them the grid) stay right."""
    run_child({"GGUF_KERNELS_FAST_KS_UNEVEN": "0"}, f"{__file__}::test_matmul_stream_ks_uneven", "",
              f"{len(UNEVEN)} passed")


GRID_FIRST = [("Q6_K", 11007, 4096, (2, 3, 4)), ("Q6_K", 8192, 8192, (2,)), ("Q8_0", 5120, 17408, (2,)),
              ("Q5_K", 11008, 4096, (4,)), ("IQ4_XS", 28672, 8192, (3,)), ("Q6_K", 7168, 5120, (2,))]


@pytest.mark.parametrize("name, N, K, ms", GRID_FIRST)
def test_matmul_stream_grid_first(name, N, K, ms, rng):
    """The grid K split before a plain launch that takes the case (v92): Q6_K from 2^25 elements at M = 2..4 (at M = 2
    up to 2^26; 4096 -> 11007, the last unit a row short; 8192 -> 8192), and at M = 2 where the plain launch leaves
    SMs without a CTA (stream_plain_idle: Q8_0 17408 -> 5120, two rounds of 8 warps on 80 CTAs; Q5_K 4096 -> 11008 and
    Q4_K 2560 -> 9727 since v107 on MT = 4, test_matmul_stream_m2_mt), Q5_K at M = 4 from 2^25 elements where K >= 4096
    and N >= 8192 (v100), and IQ4_XS at M = 3 on 8192 -> 28672 (v87; session 68, H200: 61.9 us against the plain
    launch's 64.1), Q6_K at M = 2 on rows that are not 16-byte multiples from 2^24 elements where K >= 4096 (v104: 5120
    -> 7168). Against gguf-py's
    dequantization, fp16 at the last M; the launch is the grid's (GZ) by torch.profiler where CUPTI is free, and not
    under GGUF_KERNELS_FAST_KS_PLAIN=1 (test_matmul_stream_grid_first_off)."""
    check_grid_launch(name, N, K, ms, os.environ.get("GGUF_KERNELS_FAST_KS_PLAIN") != "1", rng)


@pytest.mark.parametrize("name, N, K, ms", [("MXFP4", 28672, 8192, (2, 3, 4)), ("IQ4_XS", 28672, 8192, (2,)),
                                             ("IQ4_XS", 128256, 2048, (3,)), ("MXFP4", 36864, 12288, (2,))])
def test_matmul_stream_units_plain(name, N, K, ms, rng):
    """MXFP4 and IQ4_XS above 2^26 elements keep the plain launch where the grid's plan gives a warp more than 4 units of
    16 rows (v103: 8192 -> 28672, 7 units; IQ4_XS at M = 3, 4 from 8: 2048 -> 128256), where session 69 timed the plain
    launch 4-17% faster; from K = 12288 at M = 2 only (v106: 12288 -> 36864, 9 units). Against gguf-py's
    dequantization; the launch is not the grid's (torch.profiler, where CUPTI is free), and is under
    GGUF_KERNELS_FAST_KS_PLAIN=0."""
    check_grid_launch(name, N, K, ms, os.environ.get("GGUF_KERNELS_FAST_KS_PLAIN") == "0", rng)


@pytest.mark.parametrize("N, K", [(16384, 3072), (7168, 5120)])
def test_matmul_stream_q5k_m4_plain(N, K, rng):
    """Q5_K at M = 4 above 2^25 elements keeps the plain launch where session 66 timed it faster than the grid (3072 ->
    16384: K under 4096; 5120 -> 7168: N under 8192). Against gguf-py's dequantization; the launch is not the grid's."""
    check_grid_launch("Q5_K", N, K, (4,), False, rng)


def test_matmul_stream_grid_first_off():
    """GGUF_KERNELS_FAST_KS_PLAIN=1, in a child: test_matmul_stream_grid_first's cases on the plain launch (as before
    v92)."""
    run_child({"GGUF_KERNELS_FAST_KS_PLAIN": "1"}, f"{__file__}::test_matmul_stream_grid_first", "",
              f"{len(GRID_FIRST)} passed")


@pytest.mark.parametrize("name, mt", [("Q4_0", "8"), ("Q8_0", "8"), ("MXFP4", "8"), ("IQ4_XS", "8"), ("Q4_K", None)])
def test_matmul_stream_m34_mt8(name, mt, rng):
    """M = 3, 4 on Qwen2.5-7B's gate / up (3584 -> 18943, the last unit a row short), where the plain MT = 8 launch gives
    the busiest SM 0.49-0.56 of the MT = 4 launch's stages (v91): the MT = 8 kernel with M tokens' records, their
    columns stored (mt: the launched kernel's MT, by torch.profiler where CUPTI is free; Q4_K takes the grid K split
    there, v87). Under GGUF_KERNELS_FAST_M34_MT8=0 (test_matmul_stream_m34_mt8_off) the MT = 4 kernel."""
    packed = random_packed(name, (18943,), 3584, rng)
    w = ref_dequant(packed, name).double()
    off = os.environ.get("GGUF_KERNELS_FAST_M34_MT8") == "0"
    for M in (3, 4):
        names = check_launch(name, packed, torch.randn(M, 3584, device=DEV, dtype=torch.bfloat16), w)
        if names and mt:
            assert stream_mts(names) == ["4" if off else mt], names


def test_matmul_stream_m34_mt8_off():
    """GGUF_KERNELS_FAST_M34_MT8=0, in a child: test_matmul_stream_m34_mt8's cases on the MT = 4 launch (before v91)."""
    run_child({"GGUF_KERNELS_FAST_M34_MT8": "0"}, f"{__file__}::test_matmul_stream_m34_mt8", "", "5 passed")


M34_WIDE8 = [("MXFP4", 8959, 1536, "8"), ("MXFP4", 9728, 2560, "8"), ("IQ4_XS", 8960, 1536, "8"),
             ("IQ4_XS", 9728, 2560, "4")]


@pytest.mark.parametrize("name, N, K, mt", M34_WIDE8)
def test_matmul_stream_m34_wide8(name, N, K, mt, rng):
    """v122: M = 3, 4 for MXFP4 on the MT = 8 kernel where it gives the busiest SM at most 0.85 of MT = 4's stages
    (2560 -> 9728: 25 against 30; 1536 -> 8959, the last unit a row short: 15 against 18), where v91's bar is 0.6; for
    IQ4_XS only where MT = 4's stages leave a quarter of their chunk slots idle (K = 1536, 3 chunks; at 2560 it lost
    2-4% on the H100). Against gguf-py's dequantization; the launched kernel's MT by torch.profiler where CUPTI is
    free, MT = 4 under GGUF_KERNELS_FAST_M34_WIDE8=0 (test_matmul_stream_m34_wide8_off)."""
    packed = random_packed(name, (N,), K, rng)
    w = ref_dequant(packed, name).double()
    want = "4" if os.environ.get("GGUF_KERNELS_FAST_M34_WIDE8") == "0" else mt
    for M in (3, 4):
        names = check_launch(name, packed, torch.randn(M, K, device=DEV, dtype=torch.bfloat16), w)
        if names:
            assert stream_mts(names) == [want] and not grid_ran(names), names


def test_matmul_stream_m34_wide8_off():
    """GGUF_KERNELS_FAST_M34_WIDE8=0, in a child: test_matmul_stream_m34_wide8's cases on the MT = 4 kernel (v91's
    bar)."""
    run_child({"GGUF_KERNELS_FAST_M34_WIDE8": "0"}, f"{__file__}::test_matmul_stream_m34_wide8", "",
              f"{len(M34_WIDE8)} passed")


M2_MT = [("Q4_K", 9728, 2560, "4"), ("IQ4_XS", 11008, 4096, "2"), ("Q4_0", 9728, 2560, "4"), ("MXFP4", 8192, 3072, "4"),
         ("Q4_0", 8192, 3072, "2"), ("Q4_0", 11008, 4096, "2"), ("MXFP4", 18944, 3584, "2"), ("Q8_0", 14336, 4096, "2"),
         ("IQ4_XS", 5120, 5120, "2"), ("Q5_K", 2560, 9728, "2")]


@pytest.mark.parametrize("name, N, K, mt", M2_MT)
def test_matmul_stream_m2_mt(name, N, K, mt, rng):
    """M = 2 on the plain launch's MT = 4 or 8 kernel, 2 tokens padded, where MT = 2's stages of 4 chunks leave lanes
    idle or its units round badly (v107: 2560 -> 9728, 5 or 10 chunks, where Q4_K took the grid before, since MT = 2
    left 56 SMs idle; 3072 -> 8192, 6 chunks of 512); MT = 2 at equal stages (Q4_0 3072 -> 8192, 12 chunks of 256;
    Q8_0 4096 -> 14336), Q4_0 above 0.6 of them (4096 -> 11008), IQ4_XS 4096 -> 11008 and MXFP4 3584 -> 18944 where
    MT = 2 counted on 12 warps gives the busiest SM fewer stages (v140; MT = 4 and 8 before), fewer than 8 warps a CTA
    on MT = 4 (IQ4_XS 5120 -> 5120) or MT = 4's units split over each CTA's warps (Q5_K 9728 -> 2560). v121's cases:
    test_matmul_stream_m2_wide8.
    Against gguf-py's dequantization; mt: the launched kernel's MT (torch.profiler, where CUPTI is free), every case
    MT = 2 or the grid under GGUF_KERNELS_FAST_M2_MT=2 (test_matmul_stream_m2_mt_knob)."""
    packed = random_packed(name, (N,), K, rng)
    x = torch.randn(2, K, device=DEV, dtype=torch.bfloat16)
    names = check_launch(name, packed, x, ref_dequant(packed, name).double())
    if names:
        args = [stream_args(n) for n in names if stream_args(n)]
        if os.environ.get("GGUF_KERNELS_FAST_M2_MT") == "2":  # or the grid, where MT = 2 leaves SMs idle (v92)
            assert all(a["MT"] == "2" or a["GZ"] == "true" for a in args), names
        else:
            assert stream_mts(names) == [mt] and not grid_ran(names), names


def test_matmul_stream_m2_mt_knob():
    """GGUF_KERNELS_FAST_M2_MT=2, in a child: test_matmul_stream_m2_mt's cases on the MT = 2 kernel or the grid (before
    v107)."""
    run_child({"GGUF_KERNELS_FAST_M2_MT": "2"}, f"{__file__}::test_matmul_stream_m2_mt", "", f"{len(M2_MT)} passed")


# (type, N, K, MT since v121, MT before)
M2_WIDE8 = [("IQ4_XS", 9728, 2560, "8", "4"), ("MXFP4", 8960, 1536, "8", "4"), ("Q5_K", 18944, 3584, "8", "2"),
            ("Q8_0", 18944, 3584, "8", "2"), ("Q4_0", 18944, 3584, "2", "2")]


@pytest.mark.parametrize("name, N, K, mt, mt_before", M2_WIDE8)
def test_matmul_stream_m2_wide8(name, N, K, mt, mt_before, rng):
    """v121: M = 2 on the MT = 8 kernel, 2 tokens padded, also for Q4_K, Q5_K and Q8_0 at 2 / 3 of MT = 2's busiest
    SM's stages (3584 -> 18944; not Q4_0), and for MXFP4 / IQ4_XS with 5 warps a CTA at 0.85 of the kernel taken
    otherwise (1536 -> 8960, 2560 -> 9728: MT = 4 before). Against gguf-py's dequantization; mt: the launched kernel's
    MT (torch.profiler, where CUPTI is free), mt_before under GGUF_KERNELS_FAST_M2_WIDE8=0 (v107's rule alone)."""
    packed = random_packed(name, (N,), K, rng)
    x = torch.randn(2, K, device=DEV, dtype=torch.bfloat16)
    names = check_launch(name, packed, x, ref_dequant(packed, name).double())
    if names:
        want = mt_before if os.environ.get("GGUF_KERNELS_FAST_M2_WIDE8") == "0" else mt
        assert stream_mts(names) == [want] and not grid_ran(names), names


def test_matmul_stream_m2_wide8_off():
    """GGUF_KERNELS_FAST_M2_WIDE8=0, in a child: test_matmul_stream_m2_wide8's cases on v107's choice."""
    run_child({"GGUF_KERNELS_FAST_M2_WIDE8": "0"}, f"{__file__}::test_matmul_stream_m2_wide8", "",
              f"{len(M2_WIDE8)} passed")


def test_matmul_ks_two_streams(rng):
    """M = 8 matmuls of the K split (14336 -> 4095: four slices; Q4_K: over the grid) on two streams at once, each stream's
    calls back to back: every output matches its reference (each call's meeting buffer is its own)."""
    name, N, K = "Q4_K", 4095, 14336
    w = [random_packed(name, (N,), K, rng) for _ in range(2)]
    d = [ref_dequant(p, name).double() for p in w]
    xs = [[torch.randn(8, K, device=DEV, dtype=torch.bfloat16) for _ in range(6)] for _ in range(2)]
    streams = [torch.cuda.Stream(DEV) for _ in range(2)]
    KMOD.matmul(xs[0][0], w[0], qid(name))  # launch attributes before the race
    torch.cuda.synchronize()
    outs = [[], []]
    for i in range(6):
        for s in range(2):
            with torch.cuda.stream(streams[s]):
                outs[s].append(KMOD.matmul(xs[s][i], w[s], qid(name)))
    torch.cuda.synchronize()
    for s in range(2):
        for i in range(6):
            assert rel_err(outs[s][i], xs[s][i].double() @ d[s].T) <= TOL[torch.bfloat16], (s, i)


def test_matmul_stream_smem_cap():
    """GGUF_KERNELS_FAST_SMEM_KB=200 (the cap before v23; the default is the device's opt-in limit, 227 KB
    on the H200), in a child: Q6_K's 8 tokens then no longer fit the plain M = 8 launch with 8 warps
    (N = 14335, K = 4096) nor the 4-way K split (N = 4095, K = 14336), and take the launches they took
    before; the K-split cases of every type and M = 5, 8 of the stream tests under the smaller cap."""
    run_child({"GGUF_KERNELS_FAST_SMEM_KB": "200"}, f"{__file__}::test_matmul_stream_ksplit", "ksplit", "35 passed")
    run_child({"GGUF_KERNELS_FAST_SMEM_KB": "200"}, f"{__file__}::test_matmul_stream", "5] or 8]", "14 passed")


@pytest.mark.parametrize("M", [2, 3, 4])
@pytest.mark.parametrize("name", ["Q4_0", "Q8_0", "Q4_K", "Q6_K", "IQ4_XS", "MXFP4"])
def test_matmul_stream_split(name, M, rng):
    """M = 2..4 with few units for the GPU: the stream kernel splits each CTA's stages over its warps,
    and the warps that share a unit add into shared memory, the last one storing it (N = 199, K = 8192:
    two to four warps a unit, the last unit one row short; N = 999, K = 4096: up to eight warps of one
    stage each). At M = 3, 4 the K split over a cluster takes these shapes first (Q6_K excepted), so
    test_matmul_stream_without_ks also runs them with the split off."""
    for N, K in ((199, 8192), (999, 4096)):
        check_matmul(name, M, N, K, rng)


@pytest.mark.parametrize("name", ["Q4_0", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS", "MXFP4"])
def test_matmul_stream_one(name, rng):
    """M = 1 with enough rows for the stream kernel's 4-row form (one kept value a lane, each lane
    reading its own scales): a last unit of 3 rows (N = 14335), and K = 2816 (11 chunks of 256: a short
    last stage) for the 256-element types, K = 6144 for the others."""
    for N, K in ((14335, 4096), (14336, 6144 if name in ("Q6_K", "IQ4_XS", "MXFP4") else 2816)):
        check_matmul(name, 1, N, K, rng)


def test_matmul_stream_q5k_ties(rng):
    """Q5_K at M = 1 where its row pairs and the 4-row form give the busiest SM as many stages (on the H200's 132
    SMs): 8192 -> 8192, 16 warps a CTA either way, and 4096 -> 4096, 8 warps of 4 stages, which take the 4-row form
    since v79 and v80."""
    for N, K in ((8192, 8192), (4096, 4096)):
        check_matmul("Q5_K", 1, N, K, rng)


def test_matmul_stream_q6k_full_sm(rng):
    """Q6_K at M = 1 on 4096 -> 4096, where (on the H200's 132 SMs) its row pairs run 16 warps a CTA and so
    convert their first x group before asking for their stages (v62); the shapes above run fewer warps."""
    check_matmul("Q6_K", 1, 4096, 4096, rng)


RECORDS_SEVERAL = [("Q6_K", 4096, 14336), ("Q6_K", 1024, 4096), ("Q6_K", 1000, 8192), ("IQ4_XS", 4096, 14336),
                   ("MXFP4", 4096, 14336), ("Q4_K", 1000, 28672), ("IQ4_XS", 1000, 28672)]


@pytest.mark.parametrize("name, N, K", RECORDS_SEVERAL, ids=[f"{c[0]}-{c[2]}-{c[1]}" for c in RECORDS_SEVERAL])
def test_matmul_stream_records_several(name, N, K, rng):
    """v123: M = 1 where each thread of the stream kernel builds several x groups' records, the first ones loaded
    together before the stages (on 132 SMs: Q6_K 14336 -> 4096's 4-row units on 8 warps, 3.5 groups a thread; Q6_K
    4096 -> 1024's row pairs on 4, 2, and 8192 -> 1000's 4; IQ4_XS and MXFP4 14336 -> 4096 on 8, 2; Q4_K and IQ4_XS
    28672 -> 1000 on 4, 7: more than those loaded together), and M = 2 on the same shapes (one group at a time there),
    against gguf-py's dequantization."""
    for M in (1, 2):
        check_matmul(name, M, N, K, rng)


M1_SPREAD = [("IQ4_XS", 9727, 2560), ("MXFP4", 8959, 1536), ("Q8_0", 8960, 1536), ("Q6_K", 9728, 2560),
             ("Q5_K", 17407, 5120)]


@pytest.mark.parametrize("name, N, K", M1_SPREAD, ids=[c[0] for c in M1_SPREAD])
def test_matmul_stream_m1_spread(name, N, K, rng):
    """v120: M = 1 whose units the launch packed in two rounds and more on fewer CTAs than SMs (on 132 SMs: IQ4_XS
    2560 -> 9727's 4-row units on 102 CTAs of 12 warps (v137), MXFP4 1536 -> 8959's on 94, Q8_0 1536 -> 8960's row
    pairs on 125 of 12 (v138), Q6_K 2560 -> 9728's 4-row units of rows that are not 16-byte multiples, Q5_K 5120 ->
    17407's on 115), now a CTA on every SM with the units dealt warp-major; odd N leaves a short last unit. Against
    gguf-py's dequantization; the launch is the stream kernel's plain form (no K split)."""
    packed = random_packed(name, (N,), K, rng)
    w = ref_dequant(packed, name).double()
    names = check_launch(name, packed, torch.randn(1, K, device=DEV, dtype=torch.bfloat16), w)
    if names:
        assert [stream_args(n).get("KS") for n in names if stream_args(n)] == ["false"], names


# Launches whose warps a CTA the host counts (gemv_fast_launch.cuh: choose_stream, choose_one_or_old), each case
# (M, type, N, K) under the tag its ids carry (-k m1_twelve, m1_count12, m2_count12); on 132 SMs:
# - m1_twelve (v137): IQ4_XS and MXFP4 at M = 1 with at least 48 rows an SM, on 12 warps a CTA: 4096 -> 8190's row
#   pairs in 3 rounds, 1024 -> 12289's 4-row units with a short last one on 129 CTAs.
# - m1_count12 (v138): Q6_K and Q8_0 at M = 1 on 12 warps where that gives the busiest SM fewer stages: Q6_K 1536 ->
#   8960's 4-row units of rows that are not 16-byte multiples, Q8_0's row pairs there, Q6_K 4096 -> 9000's row pairs
#   in 3 rounds, Q8_0 2560 -> 9728's 4-row units; Q6_K 8192 -> 3072, whose row pairs on 12 warps tie ONE's stages
#   and ONE takes; v141: Q6_K 4096 -> 4096, the pairs' 16 warps tied by ONE's 8, which ONE takes.
# - m2_count12 (v140): IQ4_XS and MXFP4 at M = 2 on the MT = 2 kernel with 12 warps where 16 take two rounds and 12
#   give the busiest SM fewer stages: 2048 -> 12000's 3000 units in two rounds of 12 warps on 125 CTAs, which the M =
#   4 kernel's tie leaves to MT = 2.
COUNTED_WARPS = {
    "m1_twelve": [(1, "IQ4_XS", 8190, 4096), (1, "MXFP4", 8190, 4096), (1, "IQ4_XS", 12289, 1024),
                  (1, "MXFP4", 12289, 1024)],
    "m1_count12": [(1, "Q6_K", 8960, 1536), (1, "Q8_0", 8960, 1536), (1, "Q6_K", 9000, 4096), (1, "Q6_K", 3072, 8192),
                   (1, "Q8_0", 9728, 2560), (1, "Q6_K", 4096, 4096)],
    "m2_count12": [(2, "IQ4_XS", 12000, 2048), (2, "MXFP4", 12000, 2048)],
}
COUNTED_CASES = [(tag, *case) for tag, cases in COUNTED_WARPS.items() for case in cases]
COUNTED_IDS = [f"{tag}-{name}-{K}-{N}" for tag, _, name, N, K in COUNTED_CASES]


@pytest.mark.parametrize("tag, M, name, N, K", COUNTED_CASES, ids=COUNTED_IDS)
def test_matmul_stream_counted_warps(tag, M, name, N, K, rng):
    """The launches listed above COUNTED_WARPS, bf16 and fp16 x, against gguf-py's dequantization."""
    for dtype in (torch.bfloat16, torch.float16):
        check_matmul(name, M, N, K, rng, dtype)


def test_matmul_stream_m1_spread_off():
    """GGUF_KERNELS_FAST_SPREAD=0, in a child: test_matmul_stream_m1_spread's cases packed on fewer CTAs (before
    v120), the units dealt CTA-major (v120b)."""
    run_child({"GGUF_KERNELS_FAST_SPREAD": "0"}, f"{__file__}::test_matmul_stream_m1_spread", "",
              f"{len(M1_SPREAD)} passed")


@pytest.mark.parametrize("M", [1, 2, 4, 8, 16])
def test_matmul_iq4xs_block_sums_extremes(M, rng):
    """IQ4_XS's integer sums of a 256-weight block (NOTES.md v109) at their bounds: every block's codes all -127 or
    all 113 and its sub-block scales all -32 or 31, every activation its block's largest (3.984375: x / sigma =
    32640, the high byte 127, no rounding), through the form each M takes (ONE at 1, the plain launches and the K
    split at 2..8, the tile kernel at 16), against the dequantized weights: a sum past int32 would show as O(1)."""
    N, K = 4096, 4096
    blocks = random_blocks("IQ4_XS", (N,), K, rng).reshape(N, K // 256, 136)
    pick = rng.choice(np.array([0x00, 0xFF], np.uint8), size=(N, K // 256, 2))
    blocks[:, :, 2:8] = pick[:, :, :1]  # scales_h (2 bits a sub-block), scales_l (4)
    blocks[:, :, 8:] = pick[:, :, 1:]  # every nibble 0 or 15
    packed = torch.from_numpy(np.ascontiguousarray(blocks.reshape(N, -1))).to(DEV)
    x = torch.full((M, K), 3.984375, device=DEV, dtype=torch.bfloat16)
    err = rel_err(KMOD.matmul(x, packed, qid("IQ4_XS")), x.double() @ ref_dequant(packed, "IQ4_XS").double().T)
    assert err <= TOL[torch.bfloat16], f"M={M}: rel err {err:.2e}"


@pytest.mark.parametrize("M", [9, 16, 17, 32])
@pytest.mark.parametrize("name", ["Q4_0", "IQ4_XS", "MXFP4"])
def test_matmul_tile_small_m(name, M, rng):
    """M = 9..32 on the tile kernel (Q4_0 since v31; IQ4_XS and MXFP4 since v136, which removed tile_fast_kernel): tiles
    of 16 tokens, partial at 9, full at 16, then of 32, partial at 17; bf16 and fp16 x: N = 14335 with K = 2048 (a
    last tile past N), N = 4000 with K = 9728 (few row tiles, so K split over CTAs where the launch splits it)."""
    for N, K in ((14335, 2048), (4000, 9728)):
        for dtype in (torch.bfloat16, torch.float16):
            check_matmul(name, M, N, K, rng, dtype)


@pytest.mark.cuda_graph
@pytest.mark.parametrize("M", [1, 4, 8])
@pytest.mark.parametrize("name", ["Q4_0", "Q4_K", "Q6_K", "IQ4_XS", "MXFP4"])
def test_matmul_dependent_launch_chain(name, M, rng):
    """The stream kernel starts as a programmatic dependent launch of the kernel before it, and must
    wait for it before reading x: in a CUDA graph, x is written by an elementwise kernel and a matmul
    reads it at once, and a second matmul reads the first one's output (a dependent launch; M = 8: the
    K split over a cluster, Q6_K's slices 4-byte aligned). Replayed on fresh x, each output must match
    the reference from its own input. The capture stream is made on DEV's device (torch.cuda.graph's
    default one is made once, on the device current at its first use)."""
    w1, w2 = random_packed(name, (2048,), 4096, rng), random_packed(name, (4096,), 2048, rng)
    d1, d2 = ref_dequant(w1, name).double(), ref_dequant(w2, name).double()
    src = torch.empty(M, 4096, device=DEV, dtype=torch.bfloat16)
    x = torch.empty_like(src)

    def step():
        x.copy_(src * 2)
        y1 = KMOD.matmul(x, w1, qid(name))
        return y1, KMOD.matmul(y1, w2, qid(name))

    src.normal_()
    step()  # module load and launch attributes outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=torch.cuda.Stream(DEV)):
        y1, y2 = step()
    for _ in range(3):
        src.normal_()
        g.replay()
        torch.cuda.synchronize()
        assert rel_err(y1, (src.double() * 2) @ d1.T) <= TOL[torch.bfloat16]
        assert rel_err(y2, y1.double() @ d2.T) <= TOL[torch.bfloat16]


RAGGED = [("Q4_0", 1600), ("Q4_0", 2880), ("Q8_0", 2880), ("IQ4_XS", 2816), ("Q6_K", 3072), ("MXFP4", 1600),
          ("MXFP4", 2880), ("MXFP4", 768)]  # MXFP4 768: rows of 4k bytes, which the stream kernel declines


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("name, K", RAGGED)
def test_stream_ragged_rows(name, K, dtype, rng):
    """M = 1 and few MoE pairs on rows that are not a multiple of 16 bytes (each row's stage copied at
    its own offset; MXFP4 K = 2880 is gpt-oss's 1530-byte rows, odd rows 2 bytes off 4-byte alignment)
    with K not a multiple of the kernel's 512-element chunk (a zero-filled short last chunk): odd N
    (the last row pair has one row), and MoE with unroutable ids; N = 75 experts of 4k + 2 bytes
    (MXFP4), and MXFP4 rows of 4k bytes (K = 768), are declined to the older kernels."""
    for N in (999, 1000):
        check_matmul(name, 1, N, K, rng, dtype)
    for N in (76, 75):
        E, T, top_k = 6, 5, 3
        packed = random_packed(name, (E, N), K, rng)
        ids = torch.from_numpy(rng.integers(0, E, (T, top_k))).to(DEV)
        ids[1, 2], ids[3, 0] = -1, E
        x = torch.randn(T, K, device=DEV, dtype=dtype)
        check_moe_with_unroutable(x, packed, ref_dequant(packed, name).double(), ids, name, TOL[dtype])


def kernels_launched(fn) -> list[str]:
    """The names of the CUDA kernels fn() launches (torch.profiler; none where CUPTI is taken, as under
    compute-sanitizer)."""
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.key for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]


def check_launch(name: str, packed: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> list[str]:
    """matmul of x by packed against w (its float64 dequantization), within x's dtype's tolerance; the names of the
    kernels it launched (kernels_launched)."""
    out = []
    names = kernels_launched(lambda: out.append(KMOD.matmul(x, packed, qid(name))))
    err = rel_err(out[0], x.double() @ w.T)
    M, K = x.shape
    assert err <= TOL[x.dtype], f"{name} {x.dtype} M={M} N={packed.shape[0]} K={K}: rel err {err:.2e}"
    return names


STREAM_ARGS = ("T", "XT", "MOE", "MT", "RAG", "ONE", "KS", "GZ", "GU", "MR")


def stream_args(name: str) -> dict[str, str]:
    """gemv_stream_kernel's template arguments in a launched kernel's (demangled) name; {} for other kernels."""
    if "gemv_stream_kernel<" not in name:
        return {}
    args = name.split("gemv_stream_kernel<", 1)[1].split(">", 1)[0].split(",")
    return {k: v.strip() for k, v in zip(STREAM_ARGS, args)}


def stream_mts(names: list[str]) -> list[str]:
    """The MT template argument of each gemv_stream_kernel among the launched kernels, in launch order."""
    return [a["MT"] for a in map(stream_args, names) if a]


def grid_ran(names: list[str]) -> bool:
    """Whether the grid K split (gemv_stream_kernel with GZ) is among the launched kernels."""
    return any(stream_args(n).get("GZ") == "true" for n in names)


def check_grid_launch(name: str, N: int, K: int, ms: tuple, grid: bool, rng) -> None:
    """check_launch on random N x K blocks of name at each M of ms (bf16, and fp16 at the last M), the grid K split
    among the launched kernels exactly where `grid` (where CUPTI is free)."""
    packed = random_packed(name, (N,), K, rng)
    w = ref_dequant(packed, name).double()
    for M in ms:
        for dtype in (torch.bfloat16,) + ((torch.float16,) if M == ms[-1] else ()):
            names = check_launch(name, packed, torch.randn(M, K, device=DEV, dtype=dtype), w)
            if names:
                assert grid_ran(names) == grid, names


@pytest.mark.parametrize("M", [1, 2, 3, 8])
@pytest.mark.parametrize("N, K, stream_ms", [(4096, 5120, (1, 2, 3, 8)), (5120, 5120, (1, 2, 3, 8)), (1024, 5120, (1, 2)),
                                             (1020, 3584, (1, 2)), (4096, 17408, (1, 2, 3, 8)),
                                             (4088, 5120, (1, 2, 3, 8))])
def test_matmul_q6k_rows_mis(N, K, stream_ms, M, rng):
    """Q6_K rows that are a multiple of 4 bytes but not of 16 (K a multiple of 512, not of 2048): K = 5120 (Qwen3-14B's
    hidden size: rows of 4200 bytes, every other one 8 past a 16-byte boundary), 3584 (Qwen2.5-7B's: 2940, 4 past each
    row further; N = 1020), 17408 (Qwen3-14B's down projection: 34 chunks, ONE's last stage 2 of 4). M = 1 runs ONE,
    its stages a 1-D bulk copy a row (1024 x 5120: too few units, the ragged row pairs as before); M = 2 the plain
    MT = 2 launch, each row's pieces from its own 16-byte boundary; M = 3, 8 the K split where a plan fits and there
    are as many units as SMs (4096 x 5120: clusters of 2; 5120 x 5120 M = 3: the grid; 1024 x 5120 and 1020 x 3584:
    64 units, declined). 17408's 34 chunks take the grid in 8 unequal slices at M = 2..8 (v90; before: the plain
    launch at M = 2 with 9 groups of records a thread, gemv_mma_kernel at M = 3, 8). Against gguf-py's dequantization; the
    launch is the stream kernel's in stream_ms, gemv_mma_kernel's elsewhere (before: gemv_mma_kernel at M >= 2, the
    ragged row pairs at M = 1). The K split on rows of 16k + 8 bytes (5120, 17408) copies its stages by two boxes of
    row pairs (v133; 4088 rows: the last unit's 8 rows past N from the map's zero fill)."""
    packed = random_packed("Q6_K", (N,), K, rng)
    x = torch.randn(M, K, device=DEV, dtype=torch.bfloat16)
    names = check_launch("Q6_K", packed, x, ref_dequant(packed, "Q6_K").double())
    if names:
        assert any("gemv_stream_kernel" in n for n in names) == (M in stream_ms), names


@pytest.mark.parametrize("M", [17, 24, 32])
@pytest.mark.parametrize("name", ["Q4_0", "Q4_K", "Q6_K", "MXFP4", "Q8_0", "IQ4_NL"])
def test_matmul_split_k(name, M, rng):
    """Few rows, long rows: the tile kernel splits K over 8 CTAs (fp32 partial sums, then a reduce);
    35 chunks of 256 leave the last split empty, and for the 32-element types the last chunk is
    a half unit (K % 64 == 32)."""
    check_matmul(name, M, 300, 8704 if name.endswith("_K") else 8736, rng)


def test_matmul_batched_leading_dims(rng):
    packed = random_packed("Q4_K", (64,), 512, rng)
    x = torch.randn(2, 3, 512, device=DEV, dtype=torch.bfloat16)
    out = KMOD.matmul(x, packed, qid("Q4_K"))
    ref = x.double() @ ref_dequant(packed, "Q4_K").double().T
    assert out.shape == (2, 3, 64)
    assert rel_err(out, ref) <= 1e-2


def test_matmul_unaligned_inputs(rng):
    """Views whose data pointer is not 16-byte aligned are copied, not misread."""
    K = 2880
    base = random_packed("MXFP4", (33,), K, rng)
    flat = torch.cat([torch.zeros(1, dtype=torch.uint8, device=DEV), base.reshape(-1)])
    packed = flat[1:].view(33, -1)
    xbase = torch.randn(2 * K + 1, device=DEV, dtype=torch.bfloat16)
    x = xbase[1:].view(2, K)
    out = KMOD.matmul(x, packed, qid("MXFP4"))
    ref = x.double() @ ref_dequant(base, "MXFP4").double().T
    assert rel_err(out, ref) <= 1e-2


# --- moe_matmul -------------------------------------------------------------------------------

def check_moe_with_unroutable(x, packed, w, ids, name, tol):
    """moe_matmul against moe_reference: rows of ids outside [0, E) are zeros, the others within tol."""
    E = w.shape[0]
    bad = (ids < 0) | (ids >= E)
    out = KMOD.moe_matmul(x, packed, ids, qid(name))
    ref = moe_reference(x, w, ids.clamp(0, E - 1))
    assert torch.all(out[bad] == 0)
    err = rel_err(out[~bad], ref[~bad])
    assert err <= tol, f"rel err {err:.2e}"


@pytest.mark.parametrize("T", [1, 3, 9, 40])
@pytest.mark.parametrize("x3d", [False, True])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", ["Q4_0", "Q8_0", "Q4_K", "Q6_K", "IQ4_XS", "MXFP4", "NVFP4", "IQ2_XXS", "IQ3_S",
                                  "IQ1_M", "Q2_K", "Q5_1"])
def test_moe_matmul(name, dtype, x3d, T, rng):
    E, N, top_k = 8, 200, 4
    K = k_for(name)
    packed = random_packed(name, (E, N), K, rng)
    w = ref_dequant(packed, name).double()
    ids = torch.from_numpy(np.argsort(rng.random((T, E)), axis=1)[:, :top_k].copy()).to(DEV)
    if T == 9:
        ids = ids.int()
    x = torch.randn((T, top_k, K) if x3d else (T, K), device=DEV, dtype=dtype)
    out = KMOD.moe_matmul(x, packed, ids, qid(name))
    assert out.shape == (T, top_k, N) and out.dtype == dtype
    err = rel_err(out, moe_reference(x, w, ids))
    assert err <= TOL[dtype], f"rel err {err:.2e}"


@pytest.mark.parametrize("x3d", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("name", ["Q4_0", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS", "MXFP4"])
def test_moe_matmul_fast_pairs(name, dtype, x3d, rng):
    """Few pairs with K a multiple of the fast path's chunk and rows of whole 16-byte pieces (the stream
    kernel over all pairs): 3-4 chunks (stages of 4 chunks, the MT = 2 mapping) and 8-16 (stages of 8
    rows' chunks, MT = 1); odd N, repeated experts, and unroutable ids (-1, E) whose rows must be zeros."""
    E, N, T, top_k = 6, 75, 5, 3
    ks = {"Q6_K": (2048, 6144), "IQ4_XS": (1536, 4096), "MXFP4": (1536, 4096)}.get(name, (768, 4096))
    for K in ks:
        packed = random_packed(name, (E, N), K, rng)
        w = ref_dequant(packed, name).double()
        ids = torch.from_numpy(rng.integers(0, E, (T, top_k))).to(DEV)
        ids[1, 2], ids[3, 0] = -1, E
        x = torch.randn((T, top_k, K) if x3d else (T, K), device=DEV, dtype=dtype)
        check_moe_with_unroutable(x, packed, w, ids, name, TOL[dtype])


@pytest.mark.parametrize("x3d", [False, True])
@pytest.mark.parametrize("name", ["Q4_0", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS", "MXFP4"])
def test_moe_matmul_pairs_local(name, x3d, rng):
    """24 and 64 pairs of 2048 rows (Qwen3-30B-A3B's down shape, K = 768: 3-chunk rows, Q6_K's,
    IQ4_XS's and MXFP4's not whole 16-byte pieces: Q6_K's on flat items, IQ4_XS's on ragged ones (v111; of
    one block each, v112), MXFP4's grouped by expert at 64 pairs):
    each CTA's range of units spans a pair or two, whose x rows alone it turns into records (x3d: a
    row a pair; else a row every 8 pairs); an unroutable id's rows zero."""
    E, N, top_k, K = 16, 2048, 8, 768
    packed = random_packed(name, (E, N), K, rng)
    w = ref_dequant(packed, name).double()
    for T in (3, 8):
        ids = torch.from_numpy(np.argsort(rng.random((T, E)), axis=1)[:, :top_k].copy()).to(DEV)
        ids[1, 5] = -1
        x = torch.randn((T, top_k, K) if x3d else (T, K), device=DEV, dtype=torch.bfloat16)
        check_moe_with_unroutable(x, packed, w, ids, name, TOL[torch.bfloat16])


def test_moe_matmul_pairs_without_local():
    """Every CTA turning all the pairs' x rows into records (before the CTAs' own ranges of units):
    GGUF_KERNELS_FAST_LOCAL=0, read once a process, on the fast-pairs and local cases in a child."""
    run_child({"GGUF_KERNELS_FAST_LOCAL": "0"}, __file__, "(fast_pairs and bfloat16) or pairs_local", " passed")


def test_moe_matmul_pairs_without_one():
    """The stream kernel's MoE forms that its 4-row form (ONE) now replaces where K is at most 8 chunks
    (the MT = 1 row pairs; the MT = 2 mapping for K of at most 4 chunks) stay reachable with
    GGUF_KERNELS_FAST_ONE=0, which the launch reads once a process: the fast-pairs cases in a child."""
    run_child({"GGUF_KERNELS_FAST_ONE": "0"}, __file__, "fast_pairs and bfloat16", " passed")


@pytest.mark.parametrize("x3d", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("name", ["Q4_0", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS", "MXFP4"])
def test_moe_matmul_flat_items(name, dtype, x3d, rng):
    """K of 1, 2 and 3 items (chunks of 256 elements; IQ4_XS, MXFP4 512; Q6_K's super-blocks, rows of
    210, 420 and 630 bytes) with N a multiple of the flat units' rows (16, 8, 16): the stream kernel's
    units of flat (row, item) items, which keep every product slot busy where K has fewer than 4 chunks;
    T = 1 and 8, repeated experts, unroutable ids (-1, E) whose rows must be zeros. (4 items: flat for IQ4_XS, whose
    default GGUF_KERNELS_FAST_FLAT is 4 up to 64 pairs, other forms for the rest unless it is set to 4.)"""
    ce = 512 if name in ("IQ4_XS", "MXFP4") else 256
    E, top_k = 12, 4
    for n, N, T in [(1, 48, 8), (2, 40, 5), (3, 32, 1), (3, 2048, 8), (4, 36, 3)]:
        packed = random_packed(name, (E, N), n * ce, rng)
        w = ref_dequant(packed, name).double()
        ids = torch.from_numpy(rng.integers(0, E, (T, top_k))).to(DEV)
        ids[0, 1] = -1
        if T > 1:
            ids[T - 1, 2] = E
        x = torch.randn((T, top_k, n * ce) if x3d else (T, n * ce), device=DEV, dtype=dtype)
        check_moe_with_unroutable(x, packed, w, ids, name, TOL[dtype])


@pytest.mark.parametrize("x3d", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_moe_matmul_flat_ragged(dtype, x3d, rng):
    """MXFP4 rows of 4k + 2 bytes at T = 1 (gpt-oss, K = 2880: 6 chunks, the last 10 of 16 blocks) on
    ragged flat items: units of 8 rows (K = 2880), 16 (1088: 3 chunks), 4 (1600: 4), 2 (3904: 8) and 16
    (64: one short chunk), A rows the even and odd rows of (row pair, chunk) slots at their own offsets;
    an expert twice, an unroutable id; x a row a token or a row a pair. N not a multiple of the unit's
    rows (2003) keeps the row pairs, and so do rows of 16 chunks (K = 7744), whose units of one row the
    slots' row pairs do not fit (flat_rag_fits; before it, half their items were never summed)."""
    E, top_k = 32, 4
    for K, N in [(2880, 2880), (2880, 40), (1088, 48), (1600, 20), (3904, 6), (64, 32), (2880, 2003), (7744, 16)]:
        packed = random_packed("MXFP4", (E, N), K, rng)
        w = ref_dequant(packed, "MXFP4").double()
        ids = torch.from_numpy(np.argsort(rng.random((1, E)), axis=1)[:, :top_k].copy()).to(DEV)
        ids[0, 1] = ids[0, 0]
        ids[0, 3] = -1
        x = torch.randn((1, top_k, K) if x3d else (1, K), device=DEV, dtype=dtype)
        check_moe_with_unroutable(x, packed, w, ids, "MXFP4", TOL[dtype])


@pytest.mark.parametrize("x3d", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_moe_matmul_flat_ragged_iq4xs(dtype, x3d, rng):
    """IQ4_XS rows that are not whole 16-byte pieces (136-byte blocks; v111): K = 768 (Qwen3-30B-A3B's down projection,
    rows of 408 bytes: 3 blocks), 256, 1280, 1792 and 3840 (15 blocks: the most the item sums hold) on ragged flat
    items of one block each (v112; units of 16 rows, a stage per block of a row), each item at its own offset, at
    T = 1 and 8 (64 pairs: past moe_group_min, where these rows went to the tile kernel grouped by expert); an expert
    twice, unroutable ids (-1, E). N not a multiple of 16 (40, 20, 6, 2003) keeps the row pairs or the tile kernel.
    The launch, where CUPTI is free: the ragged flat form (gemv_stream_kernel with MOE, RAG and ONE) exactly there
    and where GGUF_KERNELS_FAST_FLAT is not 0 (benchmarks/moe_flat_probe.cu: the host's choice for these cases); at
    K = 256 and 768 (at most 4 blocks a row) its one-run form in its place (v113: MOE, ONE and MR, not RAG)."""
    E, top_k = 16, 8
    flat_on = os.environ.get("GGUF_KERNELS_FAST_FLAT") != "0"
    for K, N, T in [(768, 2048, 1), (768, 2048, 8), (768, 48, 3), (768, 40, 3), (256, 48, 8), (1280, 32, 1),
                    (1792, 32, 8), (1792, 20, 8), (3840, 64, 1), (3840, 6, 1), (768, 2003, 1), (768, 2003, 8)]:
        packed = random_packed("IQ4_XS", (E, N), K, rng)
        w = ref_dequant(packed, "IQ4_XS").double()
        ids = torch.from_numpy(np.argsort(rng.random((T, E)), axis=1)[:, :top_k].copy()).to(DEV)
        ids[0, 1] = ids[0, 0]
        ids[0, 3] = -1
        ids[T - 1, 5] = E
        x = torch.randn((T, top_k, K) if x3d else (T, K), device=DEV, dtype=dtype)
        names = kernels_launched(lambda: check_moe_with_unroutable(x, packed, w, ids, "IQ4_XS", TOL[dtype]))
        if names:
            args = [a for a in map(stream_args, names) if a.get("MOE") == "true" and a.get("ONE") == "true"]
            rflat = any(a.get("RAG") == "true" for a in args)
            brun = any(a.get("RAG") == "false" and a.get("MR") == "true" for a in args)
            flat = flat_on and N % 16 == 0
            assert (rflat, brun) == (flat and K > 1024, flat and K <= 1024), (K, N, T, names)


def tile_nt(names: list[str]) -> set[int]:
    """The NT template argument (token groups of 8 a tile) of each tile_kernel among the launched kernels."""
    return {int(n.split("tile_kernel<", 1)[1].split(",")[1]) for n in names if "tile_kernel<" in n}


def tile_maps(names: list[str]) -> set[bool]:
    """Whether each tile_kernel among the launched kernels copies its weights by tensor map (its MAP argument)."""
    return {n.split("tile_kernel<", 1)[1].split(">", 1)[0].split(",")[-1].strip() == "true"
            for n in names if "tile_kernel<" in n}


def tile_map_expected(row_bytes: int, N: int) -> bool:
    """Whether tiles over N rows of row_bytes copy by tensor map in this process (GGUF_KERNELS_TILE_MAP): the
    launch's rule for G, super-rows of the fewest G <= 8 rows whose bytes are a multiple of 16, where G divides N (its
    other conditions, a 16-byte aligned base, 128 rows and super-rows of at least a stage's row slot, hold for every
    shape these tests take)."""
    if os.environ.get("GGUF_KERNELS_TILE_MAP", "1") == "0":
        return False
    return any((G * row_bytes) % 16 == 0 and N % G == 0 for G in (1, 2, 4, 8))


@pytest.mark.parametrize("x3d", [False, True])
def test_moe_matmul_many_pairs_grouped(x3d, rng):
    """Past 64 pairs every type groups them by expert onto the tile kernel (IQ4_XS too since v125's decode; v115 had
    kept its 256 as pairs), in tiles of the mean pairs per expert, and of twice that for Q4_K and IQ4_XS from a mean of
    32: Qwen3-30B-A3B's gate (K = 2048, x a row a token) and down (K = 768, rows of 408 bytes for IQ4_XS; x a row a
    pair) at T = 16 and 32 of top 8 over 16 experts (means 8 and 16: tiles of 8 and 16 tokens, NT = 1, 2) and over 8
    experts at T = 32 (mean 32: NT = 8 for Q4_K and IQ4_XS, 4 for Q8_0); and tiles of 8 over 32 experts of 1500 rows
    (12 row tiles, the last of 92 rows) at T = 32, as Qwen3-30B-A3B's T = 32 on more CTAs than the GPU holds at once.
    Tiles copy by tensor map (v130, v132; IQ4_XS's 408-byte rows over super-rows of 2). An expert
    twice and unroutable ids (-1, E), against gguf-py's dequantized weights. The launch is checked where CUPTI is
    free."""
    top_k = 8
    cases = [("IQ4_XS", 2048, 768, 16, 16, 1), ("IQ4_XS", 2048, 768, 16, 32, 2), ("IQ4_XS", 768, 2048, 16, 16, 1),
             ("IQ4_XS", 768, 2048, 16, 32, 2), ("Q4_K", 768, 2048, 16, 32, 2), ("Q4_K", 768, 2048, 8, 32, 8),
             ("IQ4_XS", 2048, 768, 8, 32, 8), ("Q8_0", 2048, 768, 8, 32, 4), ("IQ4_XS", 2048, 1500, 32, 32, 1),
             ("Q4_K", 768, 1500, 32, 32, 1), ("Q8_0", 512, 1500, 32, 32, 1)]
    for name, K, N, E, T, nt in cases:
        packed = random_packed(name, (E, N), K, rng)
        w = ref_dequant(packed, name).double()
        ids = torch.from_numpy(np.argsort(rng.random((T, E)), axis=1)[:, :top_k].copy()).to(DEV)
        ids[0, 1] = ids[0, 0]
        ids[1, 3] = -1
        ids[T - 1, 5] = E
        x = torch.randn((T, top_k, K) if x3d else (T, K), device=DEV, dtype=torch.bfloat16)
        names = kernels_launched(lambda: check_moe_with_unroutable(x, packed, w, ids, name, TOL[torch.bfloat16]))
        if names:
            pairs = any(stream_args(n).get("MOE") == "true" for n in names)
            assert (pairs, tile_nt(names)) == (False, {nt}), (name, K, N, E, T, names)
            assert tile_maps(names) == {tile_map_expected(packed.shape[-1], N)}, (name, K, N, E, names)


@pytest.mark.parametrize("flat", ["0", "3", "4"])
def test_moe_matmul_flat_knob(flat):
    """GGUF_KERNELS_FAST_FLAT (read once a process, for every type): 0 keeps the 4-row form (ONE) on the flat cases
    and the Qwen3 down shapes, and the row pairs on the ragged ones; 3 keeps K of 4 chunks off the flat items for
    IQ4_XS too (its default is 4 up to 64 pairs); 4 takes K of 4 chunks flat for every type (units of 4 rows, one
    stage): in a child."""
    run_child({"GGUF_KERNELS_FAST_FLAT": flat}, __file__,
              "(flat_items and bfloat16) or (flat_ragged and bfloat16) or (pairs_local and not True) or stream_one",
              " passed")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("T, top_k", [(1, 4), (2, 4), (4, 4), (5, 4), (8, 4), (8, 8)])
def test_moe_matmul_hit_experts(T, top_k, dtype, rng):
    """MXFP4 rows of 4k + 2 bytes (gpt-oss, K = 2880) with one x row a token, T = 2..8: the stream kernel
    over 16-row units of each expert the pairs hit, every token's products, stored to the pairs that
    chose it (T = 1 only with 8 units an SM: 4 experts of 5760 rows, the fused gate_up; fewer keep the
    row pairs). N = 2880, 2003 (a last unit of 3 rows), 17 (of 1: its odd rows read the row before) and
    2; an expert twice in one token's choice (both slots), unroutable ids (-1, E: zero rows, their own
    hit), up to 33 hits (T = 8, top 8 of 32); each stage's rows copied 16 lanes a row, the pieces past 256 bytes by
    lane pairs (v142). On 132 SMs, N = 2880 at T = 4, 5 and 8 runs 16 warps a CTA (v139's 8 undone by v142); T = 2
    top 4 keeps 11 warps."""
    K = 2880
    for E, N in [(32, 2880), (32, 2003), (32, 17), (32, 2)] + ([(4, 5760)] if T == 1 else []):
        packed = random_packed("MXFP4", (E, N), K, rng)
        w = ref_dequant(packed, "MXFP4").double()
        ids = torch.from_numpy(np.argsort(rng.random((T, E)), axis=1)[:, :top_k].copy()).to(DEV)
        ids[0, 1] = ids[0, 0]
        ids[T - 1, top_k - 1] = -1
        if T > 2:
            ids[1, 2] = E
        x = torch.randn(T, K, device=DEV, dtype=dtype)
        check_moe_with_unroutable(x, packed, w, ids, "MXFP4", TOL[dtype])


def test_moe_matmul_without_hit_experts():
    """The paths the hit-expert units replace (MXFP4 K = 2880, x rows shared by a token's pairs, at most
    8 tokens: row pairs of ragged rows, or grouped by expert) with GGUF_KERNELS_FAST_EXP_MIN_T=9, in a
    child: test_moe_matmul's and test_moe_matmul_tile's MXFP4 cases."""
    run_child({"GGUF_KERNELS_FAST_EXP_MIN_T": "9"}, __file__,
              "(test_moe_matmul[ and MXFP4 and bfloat16 and not True) or (moe_matmul_tile and MXFP4)", " passed")


@pytest.mark.parametrize("name", ["Q4_0", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS", "MXFP4"])
def test_moe_matmul_stream_one(name, rng):
    """One token through 8 experts with enough rows for the stream kernel's 4-row form (Qwen3-30B-A3B's
    gate and down shapes, K = 2048 and the shortest K the type allows), an unroutable id's rows zero."""
    E, top_k = 16, 8
    for N, K in ((768, 2048), (2048, 2048 if name in ("Q6_K", "IQ4_XS", "MXFP4") else 768)):
        packed = random_packed(name, (E, N), K, rng)
        w = ref_dequant(packed, name).double()
        ids = torch.from_numpy(rng.permutation(E)[:top_k].reshape(1, top_k).copy()).to(DEV)
        ids[0, 3] = -1
        x = torch.randn(1, K, device=DEV, dtype=torch.bfloat16)
        check_moe_with_unroutable(x, packed, w, ids, name, TOL[torch.bfloat16])


@pytest.mark.parametrize("E, T", [(64, 1), (64, 40), (64, 400), (8, 120), (4, 150)])
@pytest.mark.parametrize("name, K", [("Q4_0", 2880), ("Q8_0", 2880), ("MXFP4", 2880), ("Q6_K", 768), ("Q4_K", 768),
                                     ("IQ4_XS", 768)])
def test_moe_matmul_tile(name, K, E, T, rng):
    """Rows not a multiple of 16 bytes (K = 2880), N = 200 (not a multiple of a tile's 128 rows), unroutable ids
    (-1, E) giving zero rows: few pairs (T = 1, the pairs kernels), then more than 64 pairs on the tile kernel in tiles
    of the mean pairs per expert: 8 (64 experts, T = 40), 16 (T = 400), 32 (8 experts, T = 120) and 64
    tokens (4 experts, T = 150; K = 2880 split over two CTAs). IQ4_XS's tiles decode through its bf16
    byte tables (v125)."""
    N, top_k = 200, 2
    packed = random_packed(name, (E, N), K, rng)
    w = ref_dequant(packed, name).double()
    ids = torch.from_numpy(np.argsort(rng.random((T, E)), axis=1)[:, :top_k].copy()).to(DEV)
    ids[0, 1] = -1
    if T > 1:
        ids[T // 2, 0] = E
    x = torch.randn(T, K, device=DEV, dtype=torch.bfloat16)
    check_moe_with_unroutable(x, packed, w, ids, name, TOL[torch.bfloat16])


@pytest.mark.parametrize("name, K, N", [("Q4_0", 2048, 200), ("Q8_0", 2048, 200), ("MXFP4", 2048, 200),
                                        ("Q2_K", 2048, 200), ("Q4_K", 768, 200), ("Q6_K", 2048, 200),
                                        ("IQ4_NL", 2048, 200), ("IQ4_XS", 2048, 200), ("IQ4_XS", 768, 200),
                                        ("Q6_K", 768, 200), ("Q4_0", 2880, 200), ("Q8_0", 2880, 200),
                                        ("MXFP4", 2880, 200), ("MXFP4", 2080, 200), ("IQ4_XS", 768, 201)])
@pytest.mark.parametrize("E, T, nt", [(64, 40, {1}), (4, 150, {4, 8})])
def test_moe_matmul_tile_map(name, K, N, E, T, nt, rng):
    """v130, v132: tiles copy each stage's weights by boxes of a tensor map over super-rows of G rows, G the fewest
    whose bytes are a multiple of 16: G = 1 (rows of 16-byte multiples at K = 2048, Q4_K's at 768), 2 (IQ4_XS's 408
    bytes), 4 (Q4_0's 1620, Q8_0's 3060), 8 (Q6_K's 630, MXFP4's 1530 at K = 2880); MXFP4 at K = 2080 (1105 bytes,
    no G) and IQ4_XS's 408-byte rows over 201 rows (G = 2 does not divide N) keep cp.async (tiles of 8) or bulk copies.
    Experts of 200 rows (a row tile's last 56 rows past N, which the boxes take from the next expert, and past the last
    expert, routed here, from the map's zero fill), each chunk's box running into the next row or past the super-row's
    end; 64 experts at T = 40 of top 2 (tiles of 8), 4 at T = 150 (tiles of 32 or 64, K = 2880 split over two CTAs),
    unroutable ids; bf16 and fp16 against gguf-py's dequantized weights, the form launched checked where CUPTI is free.
    GGUF_KERNELS_TILE_MAP=0 keeps the cp.async and bulk forms (test_moe_matmul_tile_map_off)."""
    top_k = 2
    packed = random_packed(name, (E, N), K, rng)
    fits = K != 2080 and N == 200
    assert tile_map_expected(packed.shape[-1], N) == (os.environ.get("GGUF_KERNELS_TILE_MAP") != "0" and fits)
    w = ref_dequant(packed, name).double()
    ids = torch.from_numpy(np.argsort(rng.random((T, E)), axis=1)[:, :top_k].copy()).to(DEV)
    ids[0, 1] = -1
    ids[1, 0] = E - 1
    ids[T // 2, 0] = E
    for dtype in (torch.bfloat16, torch.float16):
        x = torch.randn(T, K, device=DEV, dtype=dtype)
        names = kernels_launched(lambda: check_moe_with_unroutable(x, packed, w, ids, name, TOL[dtype]))
        if names:
            assert tile_nt(names) <= nt and tile_maps(names) == {tile_map_expected(packed.shape[-1], N)}, (name, names)


@pytest.mark.parametrize("name, K", [("Q4_K", 2048), ("IQ4_XS", 768), ("Q4_0", 2880), ("Q8_0", 2880), ("Q6_K", 768),
                                     ("MXFP4", 2880), ("MXFP4", 2080)])
@pytest.mark.parametrize("M", [24, 64])
def test_matmul_tile_map(name, K, M, rng):
    """v132: dense tiles copy their weights by tensor map as MoE's do (G = 1, 2, 4, 8 as in test_moe_matmul_tile_map;
    MXFP4 at K = 2080 without), over N = 200 rows (the last row tile's 56 rows past the map's end, its zero fill) and 201
    (G does not divide N: bulk copies), K split over CTAs (few row tiles), bf16 and fp16 against gguf-py's dequantized
    weights; the form launched checked where CUPTI is free."""
    bs, ts = block_of(name)
    row_bytes = K // bs * ts
    for N in (200, 201):
        for dtype in (torch.bfloat16, torch.float16):
            names = kernels_launched(lambda: check_matmul(name, M, N, K, rng, dtype))
            if names:
                assert tile_maps(names) == {tile_map_expected(row_bytes, N)}, (name, K, N, M, names)


def test_moe_matmul_tile_map_off():
    """GGUF_KERNELS_TILE_MAP=0 (read once a process): tiles copy their weights by cp.async pieces (tiles of 8) or bulk
    copies wherever the map would take them, in a child: the tensor-map cases and the grouped ones, checked the same
    way."""
    run_child({"GGUF_KERNELS_TILE_MAP": "0"}, __file__, "(tile_map and not map_off) or many_pairs_grouped", " passed")


@pytest.mark.parametrize("T", [6, 40])
@pytest.mark.parametrize("dtype, e8m0", [(torch.bfloat16, (20, 253)), (torch.float16, (114, 141))], ids=["bf16", "f16"])
def test_moe_matmul_mxfp4_one_hot_exact(dtype, e8m0, T, rng):
    """One-hot activations return each hit expert's weight column exactly, over the E8M0 exponents whose
    values the activation type holds as normal numbers: MXFP4's e2m1 codes go straight into bf16 / fp16
    pairs, where 0.5 is subnormal, then through two products (2^(bias-1), the block's 2^(e-127)), so a
    flushed subnormal or an overflowed scale would change elements by whole codes. T = 6: the pairs
    kernels; T = 40 (160 pairs): the tile kernel."""
    E, N, K, top_k = 4, 96, 2880, 4
    packed = torch.from_numpy(random_blocks("MXFP4", (E, N), K, rng, e8m0=e8m0)).to(DEV)
    w = ref_dequant(packed, "MXFP4")
    ids = torch.from_numpy(np.argsort(rng.random((T, E)), axis=1)[:, :top_k].copy()).to(DEV)
    cols = torch.from_numpy(rng.integers(0, K, T)).to(DEV)
    x = torch.zeros(T, K, device=DEV, dtype=dtype)
    x[torch.arange(T, device=DEV), cols] = 1
    out = KMOD.moe_matmul(x, packed, ids, qid("MXFP4"))
    ref = w[ids, :, cols[:, None]].to(dtype)  # [T, top_k, N]: w[ids[t, s], n, cols[t]]
    bad = (out != ref).sum().item()
    assert bad == 0, f"{bad} of {out.numel()} elements differ, e.g. {out[out != ref][:4].tolist()} for {ref[out != ref][:4].tolist()}"


def test_moe_matmul_skewed_routing(rng):
    """Every token on the same experts: chunks of 8 pairs, many per expert."""
    E, N, K, T = 16, 96, 512, 70
    packed = random_packed("Q4_K", (E, N), K, rng)
    ids = torch.tensor([[3, 11]] * T, device=DEV)
    x = torch.randn(T, K, device=DEV, dtype=torch.bfloat16)
    out = KMOD.moe_matmul(x, packed, ids, qid("Q4_K"))
    assert rel_err(out, moe_reference(x, ref_dequant(packed, "Q4_K").double(), ids)) <= 1e-2


# --- several GPUs -------------------------------------------------------------------------------

@pytest.mark.cuda_graph
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_second_device(rng):
    """A model split over two GPUs (device_map="auto") runs its layers on both from one process. A
    kernel's shared-memory limit holds on the device that was current when it was raised, so each launch
    site raises it once a device: here every launch path runs on cuda:0 and then on cuda:1, through
    this module's own tests with DEV switched (stream kernel in all its forms, K split, the tile kernel,
    gemv_mma, dequantize + cuBLAS, MoE pairs, hit experts and grouped tiles, a CUDA graph of dependent
    launches). Without GGUF_KERNELS_FAST_STREAM_MAX_M, a child runs it again with the
    stream kernel off, so that M <= 8 takes gemv_fast_kernel."""
    for dev in ("cuda:0", "cuda:1"):
        globals()["DEV"] = torch.device(dev)
        try:
            with torch.cuda.device(dev):
                test_matmul_stream_one("Q4_0", rng)
                test_matmul_stream_one("Q6_K", rng)
                for name in ("Q5_K", "Q6_K", "MXFP4"):
                    test_matmul_stream_ksplit(name, 8, rng)
                test_matmul_stream_split("Q4_K", 2, rng)
                test_matmul_tile_small_m("MXFP4", 12, rng)
                for name, M in (("Q4_K", 13), ("Q4_K", 40), ("Q8_0", 80), ("IQ4_XS", 3)):
                    test_matmul(name, torch.bfloat16, M, rng)
                check_matmul("Q4_K", 600, 1000, 1280, rng)
                test_moe_matmul_stream_one("Q4_K", rng)
                test_moe_matmul_hit_experts(8, 4, torch.bfloat16, rng)
                test_moe_matmul_tile("Q4_0", 2880, 64, 40, rng)
                test_matmul_dependent_launch_chain("Q4_0", 1, rng)
                torch.cuda.synchronize()
        finally:
            globals()["DEV"] = torch.device("cuda")
    if "GGUF_KERNELS_FAST_STREAM_MAX_M" not in os.environ:
        run_child({"GGUF_KERNELS_FAST_STREAM_MAX_M": "0"}, f"{__file__}::test_second_device", "", "1 passed")


# --- torch.library contracts, compile, CUDA graphs --------------------------------------------

def test_opcheck(rng):
    packed = random_packed("Q4_K", (48,), 512, rng)
    moe = random_packed("Q8_0", (4, 48), 512, rng)
    x = torch.randn(3, 512, device=DEV, dtype=torch.bfloat16)
    ids = torch.tensor([[0, 2], [1, 3], [3, 0]], device=DEV)
    q4k, q80 = qid("Q4_K"), qid("Q8_0")
    torch.library.opcheck(KMOD.ops.dequantize, (packed, q4k, torch.bfloat16))
    torch.library.opcheck(KMOD.ops.get_rows, (packed, ids, q4k, torch.float32))
    torch.library.opcheck(KMOD.ops.matmul, (x, packed, q4k))
    torch.library.opcheck(KMOD.ops.moe_matmul, (x, moe, ids, q80))


def test_kernel_op_table():
    assert kernel_loader.kernel_op("matmul", qid("Q4_K"), DEV) is not None
    assert kernel_loader.kernel_op("matmul", qid("Q4_K"), torch.device("cpu")) is None
    assert kernel_loader.kernel_op("matmul", int(GGMLQuantizationType.TQ1_0), DEV) is None
    assert kernel_loader.kernel_op("quantize", qid("Q4_K"), DEV) is not None
    assert kernel_loader.kernel_op("quantize", int(GGMLQuantizationType.IQ2_XXS), DEV) is None  # no quantizer
    for name in ("NVFP4", "IQ2_XXS", "IQ1_M"):  # read, not written
        assert kernel_loader.kernel_op("matmul", qid(name), DEV) is not None
        assert kernel_loader.kernel_op("quantize", qid(name), DEV) is None
    assert kernel_loader.kernel_op("no_such_op", qid("Q4_K"), DEV) is None


@pytest.fixture
def gq_ops():
    return pytest.importorskip("gguf_quant.ops")


def test_compile_fullgraph_through_gguf_ops(gq_ops, rng):
    packed = random_packed("Q4_K", (256,), 1024, rng)
    moe = random_packed("Q6_K", (8, 128), 256, rng)
    q4k, q6k = qid("Q4_K"), qid("Q6_K")

    def f(x, ids):
        h = gq_ops.matmul(x, packed, q4k)
        e = gq_ops.moe_matmul(h[:, :256].contiguous(), moe, ids, q6k)
        return h.sum() + e.float().sum(), gq_ops.get_rows(packed, ids, q4k, torch.bfloat16)

    cf = torch.compile(f, fullgraph=True)
    for T in (1, 5):
        x = torch.randn(T, 1024, device=DEV, dtype=torch.bfloat16)
        ids = torch.from_numpy(np.argsort(rng.random((T, 8)), axis=1)[:, :2].copy()).to(DEV)
        a, b = f(x, ids), cf(x, ids)
        torch.testing.assert_close(a[0].float(), b[0].float(), rtol=1e-2, atol=1e-1)
        torch.testing.assert_close(a[1], b[1])


@pytest.mark.cuda_graph
def test_compile_reduce_overhead_replays_fresh_inputs(gq_ops, rng):
    packed = random_packed("Q4_0", (512,), 2048, rng)
    moe = random_packed("MXFP4", (16, 64), 2048, rng)
    q40, fp4 = qid("Q4_0"), qid("MXFP4")

    def f(x, ids):
        return gq_ops.matmul(x, packed, q40), gq_ops.moe_matmul(x, moe, ids, fp4)

    cf = torch.compile(f, mode="reduce-overhead", fullgraph=True)
    for _ in range(5):  # warm-up, record, then replays: each on new data
        x = torch.randn(4, 2048, device=DEV, dtype=torch.bfloat16)
        ids = torch.from_numpy(np.argsort(rng.random((4, 16)), axis=1)[:, :4].copy()).to(DEV)
        ref = f(x, ids)
        got = cf(x, ids)
        for r, g in zip(ref, got):
            assert rel_err(g, r.double()) <= 1e-3
