"""Whole-model prefill and decode on the GPU: gguf-quant in transformers against llama-bench.

Loads a GGUF packed (bf16 activations), then times a 512-token prefill and greedy decode with
transformers' static cache, whose forward `generate` compiles (CUDA graphs), as ANCHORS.md
measured plain transformers. With `--llama-bench BIN`, llama.cpp's pp512/tg128 on the same file
is printed beside it from the same run. With `--profile`, one more generate call runs under torch's
profiler and a second table splits a decoded token's time: the GPU time of each kind of kernel (ours,
attention, inductor's fused kernels, ...) and what is left of the token's wall time, when the GPU waits
on the host (transformers' step between two graph replays).

With `--stacking both`, the model is timed twice in one run, its q/k/v and gate/up projections each
run as their own matmul, then stacked into one (`gguf_quant.fusion`, the default).

With `--stop-check deferred` (or `both`), decode is also timed with transformers' `DeferredStopCheck`,
which `generate` uses on MPS only: the host reads a step's stop flag and token one step late, so it
queues the next graph replay while the GPU still runs this one, instead of waiting for each token
(`StopCheck`, what CUDA gets). The benchmark's deferred calls run inside `gguf_quant.deferred_stop_check()`,
and it checks that they generate the same tokens.

    python benchmarks/bench_decode.py model.gguf [--llama-bench BIN] [--new-tokens 128] [--profile]
        [--stacking on|off|both] [--stop-check sync|deferred|both]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import time
from contextlib import nullcontext
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM
from transformers.generation.streamers import BaseStreamer

from gguf_quant import GgufQuantizeConfig, deferred_stop_check  # (importing it registers the plugin)


class TokenTimes(BaseStreamer):
    """Records when each generated token reaches the host: `generate` hands the streamer a host copy
    (the step's synchronisation, a step late under the deferred check), so no sync is added here."""

    def __init__(self):
        self.times: list[float] = []

    def put(self, value) -> None:
        self.times.append(time.perf_counter())

    def end(self) -> None:
        pass


def generate_stamps(model, prompt, new_tokens: int) -> tuple[TokenTimes, torch.Tensor]:
    """Greedy decode of exactly new_tokens with the static cache, each token's arrival time recorded."""
    stamps = TokenTimes()
    out = model.generate(prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                         cache_implementation="static", streamer=stamps)
    return stamps, out


def timed(fn) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start


# kernel name -> kind, first match wins (every kernel of kernels-src/gguf_kernels/csrc is in namespace gq)
KINDS = (
    ("gguf-quant kernels (matmuls, embedding rows)", ("gq::",)),
    ("attention (SDPA)", ("flash", "fmha", "attention", "sdpa", "efficient")),
    ("inductor fused (norms, rotary, residuals, ...)", ("triton_",)),
    ("other GEMM (cuBLAS)", ("gemm", "cutlass", "nvjet", "xmma")),
)


def kernel_kind(name: str) -> str:
    low = name.lower()
    return next((kind for kind, keys in KINDS if any(k in low for k in keys)), "other")


def profile_decode(model, prompt, new_tokens: int) -> None:
    """One generate call under torch's profiler (CUDA activity only): GPU time a decoded token by kind of
    kernel, the largest kernels, and the token's wall time that no kernel covers."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        stamps, _ = generate_stamps(model, prompt, new_tokens)
    tokens = len(stamps.times) - 1  # the streamer's first call is the prompt
    wall = (stamps.times[-1] - stamps.times[0]) * 1e6 / (tokens - 1)  # us a decoded token, as the table's
    kernels = [e for e in prof.key_averages() if e.device_type == DeviceType.CUDA and e.self_device_time_total > 0]
    by_kind: dict[str, float] = {}
    for e in kernels:
        kind = kernel_kind(e.key)
        by_kind[kind] = by_kind.get(kind, 0.0) + e.self_device_time_total / tokens
    gpu = sum(by_kind.values())
    print(f"\nOne generate call of {tokens} tokens under the profiler: {wall:.0f} us a token of wall time "
          "(the prompt's kernels spread over the tokens)\n")
    print("| kernels | us a token | share of the wall time |\n| --- | ---: | ---: |")
    for kind, us in sorted(by_kind.items(), key=lambda kv: -kv[1]):
        print(f"| {kind} | {us:.0f} | {us / wall:.0%} |")
    print(f"| all kernels | {gpu:.0f} | {gpu / wall:.0%} |\n| no kernel running (the GPU waits) | {wall - gpu:.0f} | "
          f"{(wall - gpu) / wall:.0%} |")
    print("\n| largest kernels | kind | calls a token | us a token |\n| --- | --- | ---: | ---: |")
    for e in sorted(kernels, key=lambda e: -e.self_device_time_total)[:12]:
        print(f"| `{e.key[:90]}` | {kernel_kind(e.key)} | {e.count / tokens:.1f} | "
              f"{e.self_device_time_total / tokens:.0f} |")


def measure(path: Path, prompt_tokens: int, new_tokens: int, stack: bool, checks: tuple[str, ...]):
    """Load `path` packed on the GPU (its sibling projections stacked or not), then time a prefill
    and greedy decode under each stop check. Returns (model, prompt ids, load s, prefill s,
    {check: decode tok/s})."""
    load = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.bfloat16, device_map="cuda",
        quantization_config=GgufQuantizeConfig(gguf_file=path.name, fuse_siblings=stack),
    )
    load = time.perf_counter() - load
    vocab = model.config.get_text_config().vocab_size
    ids = torch.randint(100, vocab - 100, (1, prompt_tokens), device="cuda")
    with torch.no_grad():
        model(ids[:, :8])  # warm-up: kernels resolved, caches allocated
        prefill = min(timed(lambda: model(ids)) for _ in range(3))
        # Decode rate from per-token timestamps, over a generate call whose static cache (and so
        # compiled graph) has the same size as the warm-up's: a new cache size recompiles.
        decode, tokens = {}, {}
        for check in checks:
            with deferred_stop_check() if check == "deferred" else nullcontext():
                for _ in range(2):
                    stamps, tokens[check] = generate_stamps(model, ids[:, :16], new_tokens)
            skip = 8  # the prompt and the first tokens, which include any last-minute capture
            decode[check] = (len(stamps.times) - 1 - skip) / (stamps.times[-1] - stamps.times[skip])
    first = tokens[checks[0]]
    if any(not torch.equal(t, first) for t in tokens.values()):
        raise SystemExit(f"the stop checks {checks} generated different tokens")
    return model, ids, load, prefill, decode


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("gguf", type=Path)
    p.add_argument("--prompt-tokens", type=int, default=512)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--llama-bench", type=Path)
    p.add_argument("--profile", action="store_true", help="split a decoded token's time by kind of kernel")
    p.add_argument("--stacking", choices=("on", "off", "both"), default="on",
                   help="q/k/v and gate/up as one matmul each (GgufQuantizeConfig.fuse_siblings); both: a row each")
    p.add_argument("--stop-check", choices=("sync", "deferred", "both"), default="sync",
                   help="generate's stop check: as on CUDA (sync), transformers' deferred one, or a row each")
    args = p.parse_args()
    checks = {"sync": ("sync",), "deferred": ("deferred",), "both": ("sync", "deferred")}[args.stop_check]

    rows, loads = [], []
    for stack in {"on": (True,), "off": (False,), "both": (False, True)}[args.stacking]:
        if rows:
            del model
            torch._dynamo.reset()
            torch.cuda.empty_cache()
        model, ids, load, prefill, decode = measure(args.gguf, args.prompt_tokens, args.new_tokens, stack, checks)
        how = "q/k/v, gate/up stacked" if stack else "every projection its own matmul"
        for check, rate in decode.items():
            when = "stop check a step late" if check == "deferred" else "stop check every token"
            rows.append(f"| gguf-quant + transformers (bf16, static cache, compiled; {how}; {when}) | "
                        f"{args.prompt_tokens / prefill:.0f} | {rate:.1f} |")
            print(rows[-1], flush=True)  # (a call cut short by its time limit keeps the rows it timed)
        loads.append(f"{load:.1f} s")
    if args.llama_bench:
        out = subprocess.run(
            [str(args.llama_bench), "-m", str(args.gguf), "-ngl", "99", "-fa", "1", "-p", str(args.prompt_tokens),
             "-n", str(args.new_tokens), "-r", "3", "-o", "json"],
            check=True, capture_output=True, text=True,
        )
        results = json.loads(out.stdout)
        pp = next(r["avg_ts"] for r in results if r["n_prompt"] > 0)
        tg = next(r["avg_ts"] for r in results if r["n_gen"] > 0)
        rows.append(f"| llama.cpp llama-bench (CUDA, flash attention) | {pp:.0f} | {tg:.1f} |")
    print(f"{args.gguf.name}: loaded packed in {', '.join(loads)}\n")
    print(f"| runtime | pp{args.prompt_tokens} tok/s | tg tok/s |\n| --- | ---: | ---: |")
    print("\n".join(rows))
    if args.profile:
        with torch.no_grad():
            profile_decode(model, ids[:, :16], args.new_tokens)


if __name__ == "__main__":
    main()
