"""Host cost of one eager call (M = 1): our ops through the custom op, through what the modules
call (`ops.run_matmul` / `ops.run_moe_matmul`), the kernel module directly, and torch's own ops; and
M = 8, whose K split encodes a tensor map of the weights each call (NOTES.md v71).

    GGUF_QUANT_KERNELS=<build> python benchmarks/bench_eager_calls.py
    python benchmarks/bench_eager_calls.py --cpu     # the torch path on the CPU, no kernel

Each figure is the wall time of 500 calls enqueued back to back, divided by 500, best of 5 (the
GPU finishes each of these in a few us, so the host's launch path is what is timed). `--cpu` times
the torch path at one token on SmolLM2-135M's shapes instead: through the custom op, as the modules
call it, and the torch path's own function, so the op's dispatch is the difference.
"""
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
from bench_matmul import qid, random_weights  # noqa: E402
from gguf_quant import kernel_loader, ops  # noqa: E402


def per_call_us(f, calls: int = 500, reps: int = 5, sync=torch.cuda.synchronize) -> float:
    for _ in range(200):
        f()
    sync()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(calls):
            f()
        t1 = time.perf_counter()
        sync()
        best = min(best, (t1 - t0) / calls * 1e6)
    return best


def cpu_main() -> None:
    from gguf import GGMLQuantizationType
    from gguf.quants import quantize

    qt = qid("Q4_1")
    print(f"CPU, {torch.get_num_threads()} threads, torch {torch.__version__}, no kernel: the torch path\n")
    print("| Q4_1 matmul at M = 1 | through the op (ops.matmul) | as the modules call it (ops.run_matmul) "
          "| the torch path (ops._torch_matmul) |\n| --- | ---: | ---: | ---: |")
    for k, n in ((576, 192), (576, 576), (576, 1536), (1536, 576)):
        w = torch.from_numpy(quantize(torch.randn(n, k).numpy(), GGMLQuantizationType.Q4_1).copy())
        xk = torch.randn(1, k)
        fs = (lambda: ops.matmul(xk, w, qt), lambda: ops.run_matmul(xk, w, qt), lambda: ops._torch_matmul(xk, w, qt))
        us = [float("inf")] * 3
        with torch.no_grad():
            for _ in range(9):  # the three in turn, best of 9: a shared CPU's load drifts between runs
                us = [min(u, per_call_us(f, calls=50, reps=1, sync=lambda: None)) for u, f in zip(us, fs)]
        print(f"| {k} -> {n} | {us[0]:.1f} | {us[1]:.1f} | {us[2]:.1f} |")


def main() -> None:
    if "--cpu" in sys.argv:
        return cpu_main()
    k = kernel_loader.kernel_module()
    if k is None:
        sys.exit("no kernel build found: set GGUF_QUANT_KERNELS")
    q4k = qid("Q4_K")
    x = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    x8 = torch.randn(8, 4096, device="cuda", dtype=torch.bfloat16)
    w = random_weights("Q4_K", (1024,), 4096)
    wb = torch.randn(1024, 4096, device="cuda", dtype=torch.bfloat16)
    we = random_weights("Q4_K", (128, 768), 2048)
    ids = torch.randperm(128, device="cuda")[:8].view(1, 8)
    xe = torch.randn(1, 2048, device="cuda", dtype=torch.bfloat16)
    cases = {
        "matmul Q4_K 4096 -> 1024, custom op (ops.matmul)": lambda: ops.matmul(x, w, q4k),
        "matmul, as the modules call it (ops.run_matmul)": lambda: ops.run_matmul(x, w, q4k),
        "matmul, kernel module directly": lambda: k.matmul(x, w, q4k),
        "matmul M = 8 (the K split), kernel module directly": lambda: k.matmul(x8, w, q4k),
        "moe_matmul Q4_K T = 1, custom op (ops.moe_matmul)": lambda: ops.moe_matmul(xe, we, ids, q4k),
        "moe_matmul, as the modules call it (ops.run_moe_matmul)": lambda: ops.run_moe_matmul(xe, we, ids, q4k),
        "moe_matmul, kernel module directly": lambda: k.moe_matmul(xe, we, ids, q4k),
        "torch linear bf16 4096 -> 1024": lambda: torch.nn.functional.linear(x, wb),
        "torch add (a floor)": lambda: x + x,
    }
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, kernels from {kernel_loader.kernel_source()}\n")
    print("| call | us a call |\n| --- | ---: |")
    for name, f in cases.items():
        print(f"| {name} | {per_call_us(f):.1f} |")


if __name__ == "__main__":
    main()
