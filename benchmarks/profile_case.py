"""One matmul case, run once after warm-up between cudaProfilerStart / Stop, for ncu's
--profile-from-start off (NOTES.md v20's counters):

    ncu --profile-from-start off -k regex:gemv_stream --section SourceCounters -o rep \\
        python benchmarks/profile_case.py dense:MXFP4:4096:14336:1      # dense:TYPE:K:N:M
    ...                                   moe:MXFP4:2880:2880:32:4:1   # moe:TYPE:K:N:E:top_k:T
    ...                                   moe:Q6_K:768:2048:128:8:1:pair  # an x row a pair (down)
"""
import sys

import torch

from bench_matmul import qid, random_weights
from gguf_quant import kernel_loader


def main(case: str) -> None:
    k = kernel_loader.kernel_module()
    torch.manual_seed(0)
    kind, name, *dims = case.split(":")
    if kind == "moe":
        pair = dims[-1] == "pair"
        K, N, E, top, T = map(int, dims[:5])
        w = random_weights(name, (E, N), K)
        x = torch.randn((T, top, K) if pair else (T, K), device="cuda", dtype=torch.bfloat16)
        ids = torch.rand(T, E, device="cuda").argsort(dim=1)[:, :top].contiguous()
        run = lambda: k.moe_matmul(x, w, ids, qid(name))
    else:
        K, N, M = map(int, dims)
        w = random_weights(name, (N,), K)
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        run = lambda: k.matmul(x, w, qid(name))
    for _ in range(3):
        run()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    run()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


if __name__ == "__main__":
    main(sys.argv[1])
