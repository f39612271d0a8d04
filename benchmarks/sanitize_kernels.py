"""Every kernel once per type on small awkward shapes: run under compute-sanitizer on the GPU machine."""
import sys, torch
sys.path.insert(0, __import__("os").path.join(__import__("os").path.dirname(__file__), "..", "tests"))
from gguf_quant import kernel_loader
import numpy as np
from test_kernels import random_packed, TYPES, qid, k_for, RAGGED
k = kernel_loader.kernel_module(); rng = np.random.default_rng(0); dev = "cuda"
for name in TYPES:
    q = qid(name)
    # 2560, 2048 and 768: rows the stream kernel takes (2048 for Q6_K, whose stages start 0-12 bytes past a 16-byte
    # boundary; 768: MoE pairs in stages of 4 chunks)
    for K in sorted({k_for(name), k_for(name, odd=True), 2560, 2048, 768}):
        print(name, K, flush=True)  # where the first error report falls
        w = random_packed(name, (37,), K, rng)
        k.dequantize(w, q, torch.bfloat16); k.get_rows(w, torch.tensor([[0, 36], [5, 7]], device=dev), q, torch.float32)
        for M in (1, 3, 8, 20, 70):
            k.matmul(torch.randn(M, K, device=dev, dtype=torch.float16), w, q)
        e = random_packed(name, (5, 37), K, rng)
        for T in (2, 11):
            ids = torch.randint(0, 5, (T, 2), device=dev)
            ids[0, 1] = -1 if T == 2 else 5  # unroutable: zero rows
            k.moe_matmul(torch.randn(T, K, device=dev, dtype=torch.bfloat16), e, ids, q)
            k.moe_matmul(torch.randn(T, 2, K, device=dev, dtype=torch.float32), e, ids, q)
        k.matmul(torch.randn(20, 8192, device=dev, dtype=torch.bfloat16), random_packed(name, (37,), 8192, rng), q)  # split K
        e = random_packed(name, (40, 37), K, rng)  # 2 pairs on 40 experts, one unroutable
        k.moe_matmul(torch.randn(1, K, device=dev, dtype=torch.bfloat16), e, torch.tensor([[3, -1]], device=dev), q)
    for M in (12, 24):  # the tile kernel, tiles of 16 and 32 tokens; few row tiles at N = 4000 (K split)
        for N, K in ((14335, 2048), (4000, 9728)):
            k.matmul(torch.randn(M, K, device=dev, dtype=torch.bfloat16), random_packed(name, (N,), K, rng), q)
    # M = 3..8, K split over a cluster (4, 8, 2 slices; M = 4 on 14335 rows: IQ4_XS and MXFP4 only)
    for M, N, K in ((5, 4095, 14336), (8, 999, 4096), (6, 14335, 4096), (3, 4095, 14336), (4, 14335, 4096)):
        k.matmul(torch.randn(M, K, device=dev, dtype=torch.bfloat16), random_packed(name, (N,), K, rng), q)
    for M in (2, 4):  # the stream kernel's stages split over a CTA's warps (M = 4: the K split first)
        k.matmul(torch.randn(M, 8192, device=dev, dtype=torch.bfloat16), random_packed(name, (199,), 8192, rng), q)
    # the stream kernel's 4-row form (one kept value a lane): M = 1 with many rows, a 3-row last unit;
    # MoE pairs of one token through 8 of 16 experts, one unroutable
    k.matmul(torch.randn(1, 4096, device=dev, dtype=torch.bfloat16), random_packed(name, (14335,), 4096, rng), q)
    ids = torch.tensor([[0, 3, 5, 7, 9, -1, 12, 15]], device=dev)
    k.moe_matmul(torch.randn(1, 2048, device=dev, dtype=torch.bfloat16), random_packed(name, (16, 768), 2048, rng), ids, q)
    # MoE pairs whose CTAs each turn only their own pairs' x rows into records: 24 pairs of 2003 rows
    e = random_packed(name, (16, 2003), 768, rng)
    ids = torch.randint(0, 16, (3, 8), device=dev)
    ids[1, 5] = -1
    k.moe_matmul(torch.randn(3, 8, 768, device=dev, dtype=torch.bfloat16), e, ids, q)
    k.moe_matmul(torch.randn(3, 768, device=dev, dtype=torch.bfloat16), e, ids, q)
    torch.cuda.synchronize()
for name, K in RAGGED:  # the stream kernel's ragged rows: M = 1 (odd N) and MoE pairs (even N, an unroutable id)
    print("ragged", name, K, flush=True)
    q = qid(name)
    k.matmul(torch.randn(1, K, device=dev, dtype=torch.bfloat16), random_packed(name, (37,), K, rng), q)
    e = random_packed(name, (5, 38), K, rng)
    k.moe_matmul(torch.randn(3, K, device=dev, dtype=torch.bfloat16), e, torch.tensor([[0, 4], [4, -1], [2, 2]], device=dev), q)
    torch.cuda.synchronize()
# MXFP4 K = 2880 over hit experts (one x row a token): 8 tokens' top 4 of 32, 2003 rows (a 3-row last
# unit), an expert twice in a token's choice, an unroutable id; 17 rows (a 1-row last unit)
e = random_packed("MXFP4", (32, 2003), 2880, rng)
ids = torch.randint(0, 32, (8, 4), device=dev)
ids[2, 1], ids[5, 3] = ids[2, 0], -1
k.moe_matmul(torch.randn(8, 2880, device=dev, dtype=torch.bfloat16), e, ids, qid("MXFP4"))
k.moe_matmul(torch.randn(8, 2880, device=dev, dtype=torch.float16), random_packed("MXFP4", (32, 17), 2880, rng), ids,
             qid("MXFP4"))
torch.cuda.synchronize()
# matmul after matmul in a CUDA graph: the second starts as a dependent launch while the first's last
# CTAs run (M = 1: row pairs and the 4-row form; M = 4, 8: the K split, Q6_K's slices 4-byte aligned;
# the second matmul's last unit a row short)
for name in ("Q4_0", "Q4_K", "Q5_K", "Q6_K", "Q8_0", "IQ4_XS", "MXFP4"):
    q = qid(name)
    w1, w2 = random_packed(name, (4096,), 4096, rng), random_packed(name, (4095,), 4096, rng)
    for M in (1, 4, 8):
        print("dependent", name, M, flush=True)
        x = torch.randn(M, 4096, device=dev, dtype=torch.bfloat16)
        k.matmul(k.matmul(x, w1, q), w2, q)  # module load and launch attributes outside the capture
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            k.matmul(k.matmul(x, w1, q), w2, q)
        g.replay()
        torch.cuda.synchronize()
print("sanity done")
