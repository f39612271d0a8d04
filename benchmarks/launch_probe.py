"""Which launch each dense matmul takes (kernel, grid, block, dynamic shared memory), read from a
torch.profiler trace on the GPU machine; the launch rules pick a form per call, and an A/B whose rows do not
move may simply not have taken the new form (NOTES.md v53: a full arena sent later rows back to the clusters).

    GGUF_QUANT_KERNELS=/tmp/ka python3 benchmarks/launch_probe.py --types Q4_K,Q6_K --shapes 14336x4096 --m 8
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(__file__))
from bench_matmul import qid, random_weights  # noqa: E402


def launches(kmod, name: str, K: int, N: int, M: int) -> list[dict]:
    w = random_weights(name, (N,), K)
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    kmod.matmul(x, w, qid(name))  # launch attributes and module load outside the trace
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        kmod.matmul(x, w, qid(name))
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    return [e for e in events if e.get("cat") == "kernel"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--types", default="Q4_0,Q4_K,Q5_K,Q6_K,Q8_0,MXFP4,IQ4_XS")
    p.add_argument("--shapes", default="14336x4096,4096x4096,4096x1024,4096x14336", help="KxN, comma-separated")
    p.add_argument("--m", type=int, default=8)
    args = p.parse_args(argv)
    from gguf_quant import kernel_loader

    kmod = kernel_loader.kernel_module()
    print("| type | K -> N | M | kernel | grid | block | shared bytes |")
    print("| --- | --- | ---: | --- | --- | --- | ---: |")
    for name in args.types.split(","):
        for shape in args.shapes.split(","):
            K, N = (int(v) for v in shape.split("x"))
            for e in launches(kmod, name, K, N, args.m):
                a = e["args"]  # the whole name: its last template arguments tell the K split from the plain launch
                print(f"| {name} | {K} -> {N} | {args.m} | {e['name']} | {a.get('grid')} | {a.get('block')} "
                      f"| {a.get('shared memory')} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
