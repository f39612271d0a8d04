"""The MoE product a kernel's moe_matmul is checked against, shared by the GPU tests (tests/test_kernels.py) and the
benchmark's check of each timed row (benchmarks/bench_matmul.py)."""
from __future__ import annotations

import torch


def moe_reference(x: torch.Tensor, w: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """[T, top_k, N] in w's dtype: each (token, slot) pair's x row (x [T, K]: the token's; [T, top_k, K]: the pair's)
    times its expert's dequantized weights w [E, N, K], an expert at a time (ids [T, top_k], every id in [0, E))."""
    T, k = ids.shape
    rows = (x.unsqueeze(1).expand(T, k, x.shape[-1]) if x.dim() == 2 else x).reshape(T * k, -1).to(w.dtype)
    flat = ids.reshape(-1)
    out = torch.empty(T * k, w.shape[1], dtype=w.dtype, device=x.device)
    for e in flat.unique().tolist():
        sel = flat == e
        out[sel] = rows[sel] @ w[e].T
    return out.reshape(T, k, -1)
