"""Whole-model prefill and decode on the GPU: gguf-quant in transformers against llama-bench.

Loads a GGUF packed (bf16 activations), then times a 512-token prefill and greedy decode with
transformers' static cache, whose forward `generate` compiles (CUDA graphs), as ANCHORS.md
measured plain transformers. With `--llama-bench BIN`, llama.cpp's pp512/tg128 on the same file
is printed beside it from the same run.

    python benchmarks/bench_decode.py model.gguf [--llama-bench BIN] [--new-tokens 128]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM
from transformers.generation.streamers import BaseStreamer

import gguf_quant  # noqa: F401  (registers the plugin)


class TokenTimes(BaseStreamer):
    """Records when each generated token reaches the host."""

    def __init__(self):
        self.times: list[float] = []

    def put(self, value) -> None:
        torch.cuda.synchronize()
        self.times.append(time.perf_counter())

    def end(self) -> None:
        pass


def timed(fn) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("gguf", type=Path)
    p.add_argument("--prompt-tokens", type=int, default=512)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--llama-bench", type=Path)
    args = p.parse_args()

    load = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(
        str(args.gguf.parent), gguf_file=args.gguf.name, dtype=torch.bfloat16, device_map="cuda"
    )
    load = time.perf_counter() - load
    vocab = model.config.get_text_config().vocab_size
    ids = torch.randint(100, vocab - 100, (1, args.prompt_tokens), device="cuda")
    with torch.no_grad():
        model(ids[:, :8])  # warm-up: kernels resolved, caches allocated
        prefill = min(timed(lambda: model(ids)) for _ in range(3))
        # Decode rate from per-token timestamps, over a generate call whose static cache (and so
        # compiled graph) has the same size as the warm-up's: a new cache size recompiles.
        for _ in range(2):
            stamps = TokenTimes()
            model.generate(ids[:, :16], max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
                           do_sample=False, cache_implementation="static", streamer=stamps)
    skip = 8  # the prompt and the first tokens, which include any last-minute capture
    decode = (len(stamps.times) - 1 - skip) / (stamps.times[-1] - stamps.times[skip])
    rows = [
        f"| gguf-quant + transformers (bf16, static cache, compiled) | {args.prompt_tokens / prefill:.0f} | {decode:.1f} |"
    ]
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
    print(f"{args.gguf.name}: loaded packed in {load:.1f} s\n")
    print(f"| runtime | pp{args.prompt_tokens} tok/s | tg tok/s |\n| --- | ---: | ---: |")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
