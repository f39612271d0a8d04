"""Quantizing a float GGUF to a llama.cpp mix: gguf-quant on the GPU against llama-quantize.

Both start from the same F16/F32 file and end with a `.gguf` on disk. Ours is
`gguf_quant.quantize_gguf`: tensors streamed from the file through pinned buffers to the device,
quantized under the types `gguf_quant.mixes.choose_types` picks, and written back at their final
offsets. When llama-quantize is given, it runs on the same file in the same call, and every
output tensor is compared byte for byte.

    python benchmarks/bench_quantize.py model-f16.gguf --mix Q4_K_M [--llama-quantize BIN --threads 15]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import time
from pathlib import Path

import torch

from gguf_quant import quantize_gguf
from gguf_quant.gguf_io.reader import read_gguf


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("src", type=Path)
    p.add_argument("--mix", default="Q4_K_M")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--llama-quantize", type=Path)
    p.add_argument("--threads", type=int, default=15)
    p.add_argument("--out", type=Path, default=Path("/tmp"))
    p.add_argument("--chunk-mb", type=int, default=32, help="source MiB per pipeline work item")
    p.add_argument("--workers", type=int, default=None, help="pipeline threads (default: 4 on CUDA, 1 on CPU)")
    args = p.parse_args()

    size = args.src.stat().st_size / 1e9
    # Each side starts with no dirty pages left by the other: writing back the previous output
    # while the next one runs slowed a Q8_0 run from 2.7 s to 5.7-9.3 s on the H200 machine.
    os.sync()
    ours_path = args.out / f"ours-{args.mix}.gguf"
    report = quantize_gguf(args.src, ours_path, args.mix, args.device, progress=False, overwrite=True,
                           chunk_bytes=args.chunk_mb << 20, workers=args.workers)
    ours_s = report["seconds"]
    rows = [f"| gguf-quant ({args.device}) | {args.mix} | {ours_s:.1f} | {size / ours_s:.2f} | 1.00x |"]
    if args.llama_quantize:
        theirs_path = args.out / f"llama-{args.mix}.gguf"
        os.sync()
        start = time.perf_counter()
        subprocess.run([str(args.llama_quantize), str(args.src), str(theirs_path), args.mix, str(args.threads)],
                       check=True, capture_output=True)
        theirs_s = time.perf_counter() - start
        rows.append(f"| llama-quantize ({args.threads} CPU threads) | {args.mix} | {theirs_s:.1f} | {size / theirs_s:.2f} | {theirs_s / ours_s:.2f}x |")
        a, b = read_gguf(ours_path), read_gguf(theirs_path)
        same = sum(
            a.tensors[n].type == b.tensors[n].type and torch.equal(a.raw(n).view(torch.uint8).flatten(), b.raw(n).view(torch.uint8).flatten())
            for n in b.tensors
        )
        rows.append(f"\nidentical tensors (type and bytes): {same} of {len(b.tensors)}")
    busy = ", ".join(f"{k} {v:.1f}" for k, v in report["busy_seconds"].items())
    print(f"source {args.src.name} ({size:.1f} GB); ours wrote {report['bytes_written'] / 1e9:.2f} GB, {report['types']}; "
          f"worker seconds: {busy}\n")
    print("| quantizer | mix | seconds | source GB/s | its time / ours |\n| --- | --- | ---: | ---: | ---: |")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
