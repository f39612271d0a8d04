"""Quantizing a float GGUF to a llama.cpp mix: gguf-quant on the GPU against llama-quantize.

Both start from the same F16/F32 file and end with a `.gguf` on disk; our side reads each tensor
from the mapped file, quantizes it on the device with `gguf_quant.quantize` under the types
`gguf_quant.mixes.choose_types` picks, and writes the blocks with gguf-py's writer. When
llama-quantize is given, it runs on the same file in the same call, and every output tensor is
compared byte for byte.

    python benchmarks/bench_quantize.py model-f16.gguf --mix Q4_K_M [--llama-quantize BIN --threads 15]
"""
from __future__ import annotations

import argparse
import subprocess
import time
from pathlib import Path

import torch
from gguf import GGMLQuantizationType, GGUFWriter

from gguf_quant.ggml import quantize
from gguf_quant.ggml.types import ggml_type
from gguf_quant.gguf_io.reader import read_gguf
from gguf_quant.gguf_io.writer import plain_value, source_tokenizer
from gguf_quant.mixes import ModelFacts, choose_types


def facts_of(gguf) -> ModelFacts:
    arch = gguf.architecture
    meta = gguf.metadata
    heads = meta[f"{arch}.attention.head_count"]
    kv = meta.get(f"{arch}.attention.head_count_kv", heads)
    return ModelFacts(meta[f"{arch}.block_count"], meta.get(f"{arch}.expert_count", 0), heads // kv, "output.weight" not in gguf.tensors)


def ours(src: Path, dst: Path, mix: str, device: str) -> float:
    start = time.perf_counter()
    gguf = read_gguf(src)
    types = choose_types(mix, {n: t.shape for n, t in gguf.tensors.items()}, facts_of(gguf))
    w = GGUFWriter(str(dst), gguf.architecture)
    meta = {k: plain_value(v) for k, v in gguf.metadata.items() if k.startswith(gguf.architecture + ".")}
    for key, v in (meta | source_tokenizer(gguf.metadata)).items():
        w.add_key_value(key, v.value, v.type, v.sub_type)
    for name, info in gguf.tensors.items():
        raw = gguf.raw(name)
        t = types.get(name)
        if t is None or not ggml_type(t).quantized:
            w.add_tensor(name, raw.numpy())
            continue
        packed = quantize(raw.to(device, non_blocking=True), t).cpu().numpy()
        w.add_tensor(name, packed, raw_dtype=GGMLQuantizationType[t])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("src", type=Path)
    p.add_argument("--mix", default="Q4_K_M")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--llama-quantize", type=Path)
    p.add_argument("--threads", type=int, default=15)
    p.add_argument("--out", type=Path, default=Path("/tmp"))
    args = p.parse_args()

    ours_path = args.out / f"ours-{args.mix}.gguf"
    ours_s = ours(args.src, ours_path, args.mix, args.device)
    rows = [f"| gguf-quant ({args.device}) | {args.mix} | {ours_s:.1f} | 1.00x |"]
    if args.llama_quantize:
        theirs_path = args.out / f"llama-{args.mix}.gguf"
        start = time.perf_counter()
        subprocess.run([str(args.llama_quantize), str(args.src), str(theirs_path), args.mix, str(args.threads)],
                       check=True, capture_output=True)
        theirs_s = time.perf_counter() - start
        rows.append(f"| llama-quantize ({args.threads} CPU threads) | {args.mix} | {theirs_s:.1f} | {theirs_s / ours_s:.2f}x |")
        a, b = read_gguf(ours_path), read_gguf(theirs_path)
        same = sum(
            a.tensors[n].type == b.tensors[n].type and torch.equal(a.raw(n).view(torch.uint8).flatten(), b.raw(n).view(torch.uint8).flatten())
            for n in b.tensors
        )
        rows.append(f"\nidentical tensors (type and bytes): {same} of {len(b.tensors)}")
    size = args.src.stat().st_size / 1e9
    print(f"source {args.src.name} ({size:.1f} GB)\n\n| quantizer | mix | seconds | its time / ours |\n| --- | --- | ---: | ---: |")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
