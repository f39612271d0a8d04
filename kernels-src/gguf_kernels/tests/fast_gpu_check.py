"""GPU check of the fast small-M matmul (M <= 8, rows a multiple of 16 bytes) against the exact product.

    GGUF_QUANT_KERNELS=<build> python kernels-src/gguf_kernels/tests/fast_gpu_check.py

tests/test_kernels.py draws K values that mostly leave rows unaligned (the older kernel's case);
this covers the aligned shapes the fast path takes, for each of its types, M = 1..8, bf16 and fp16,
fresh random blocks, N not a multiple of 16, plus replay inside a CUDA graph (the matmul is a
programmatic dependent launch of its prep kernel). Exits non-zero on any failure. Q6_K at K = 6144 and
M = 5..8 has records too large for the stream kernel and checks gemv_mma_kernel (gemv_fast_kernel with
GGUF_KERNELS_FAST_Q6K=1); GGUF_KERNELS_FAST_TILE=1 skips the stream kernel, GGUF_KERNELS_FAST_U / _W / _S
force the stage layout.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "src"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "tests"))
from gguf.constants import GGMLQuantizationType as QT  # noqa: E402

from gguf_quant import kernel_loader  # noqa: E402
from random_blocks import random_blocks  # noqa: E402

DEV = torch.device("cuda")
KS = {"Q4_0": [768, 4096], "Q8_0": [768, 4096], "Q4_K": [768, 4096], "Q5_K": [256, 4096], "Q6_K": [2048, 6144],
      "IQ4_XS": [1024, 4096], "MXFP4": [512, 4096]}


def random_packed(name, rows, cols, rng):
    return torch.from_numpy(random_blocks(name, (rows,), cols, rng)).to(DEV)


def ref_w(packed, name):
    from gguf_quant.ggml import dequantize
    return dequantize(packed, int(QT[name]), torch.float32).double()


def rel(out, ref):
    out = out.double()
    if not torch.isfinite(out).all():
        return float("inf")
    return ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def main():
    kmod = kernel_loader.kernel_module()
    if kmod is None:
        print("no kernel build")
        return 2
    gen = torch.Generator(device=DEV)
    gen.manual_seed(int(os.environ.get("SEED", "0")))
    rng = np.random.default_rng(int(os.environ.get("SEED", "0")))  # the weights' blocks
    bad = 0
    for name, ks in KS.items():
        worst = 0.0
        for K in ks:
            for N in (1000, 999, 48):
                packed = random_packed(name, N, K, rng)
                w = ref_w(packed, name)
                for dtype in (torch.bfloat16, torch.float16):
                    for M in (1, 2, 3, 4, 5, 8):
                        x = torch.randn(M, K, device=DEV, dtype=dtype, generator=gen)
                        out = kmod.matmul(x, packed, int(QT[name]))
                        torch.cuda.synchronize()
                        err = rel(out, x.double() @ w.T)
                        worst = max(worst, err)
                        if not err <= 1e-2:
                            bad += 1
                            print(f"FAIL {name} K={K} N={N} {dtype} M={M}: rel err {err:.3e}")
        print(f"{name:7s} worst rel err {worst:.2e}")
    # CUDA graph: capture once, replay on new inputs
    for name in ("Q4_K", "Q4_0"):
        K, N, M = 4096, 512, 1
        packed = random_packed(name, N, K, rng)
        w = ref_w(packed, name)
        x = torch.randn(M, K, device=DEV, dtype=torch.bfloat16, generator=gen)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            kmod.matmul(x, packed, int(QT[name]))
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            y = kmod.matmul(x, packed, int(QT[name]))
        for _ in range(3):
            x.copy_(torch.randn(M, K, device=DEV, dtype=torch.bfloat16, generator=gen))
            g.replay()
            torch.cuda.synchronize()
            err = rel(y, x.double() @ w.T)
            if not err <= 1e-2:
                bad += 1
                print(f"FAIL graph replay {name}: rel err {err:.3e}")
        print(f"graph replay {name} ok" if err <= 1e-2 else "")
    print("fast gpu check:", "FAILED" if bad else "all ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
