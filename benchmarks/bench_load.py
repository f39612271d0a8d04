"""Load time, resident weight memory and decode speed: gguf-quant against transformers' own GGUF
loader, which unpacks every weight to float32 at load (ours keeps the blocks and, on the CPU,
dequantizes each weight a chunk of rows at a time whenever it multiplies).

Each load runs in a fresh subprocess (so neither warms the other's caches of Python modules),
one after the other on the same machine, and the table compares them side by side.

    python benchmarks/bench_load.py [--repeat 2] [--out benchmarks/results/load_cpu.md]
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
from pathlib import Path

from gguf_quant import samples

NEW_TOKENS = 16  # greedy decode tokens timed after a 4-token prompt

CHILD = r"""
import json, sys, time, torch
plugin = sys.argv[1] == "gguf_quant"
if plugin:
    import gguf_quant
from pathlib import Path
from transformers import AutoModelForCausalLM
path, new = Path(sys.argv[2]), int(sys.argv[3])
start = time.perf_counter()
model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
seconds = time.perf_counter() - start
tensors = {t.data_ptr(): t for t in [*model.parameters(), *model.buffers()]}
resident = sum(t.numel() * t.element_size() for t in tensors.values())
ids = torch.tensor([[1, 2, 3, 4]])
with torch.no_grad():
    logits = model(ids).logits
    model.generate(ids, max_new_tokens=2, min_new_tokens=2, do_sample=False)  # warm-up
    start = time.perf_counter()
    model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False)
    decode = new / (time.perf_counter() - start)
print(json.dumps({"seconds": seconds, "resident": resident, "file": path.stat().st_size, "decode": decode,
                  "threads": torch.get_num_threads(), "name": path.name, "logit0": float(logits[0, -1].float().norm())}))
"""


def run(loader: str, path: Path) -> dict:
    # The child of the "transformers" run must not import gguf_quant, which would register the plugin.
    out = subprocess.run([sys.executable, "-c", CHILD, loader, str(path), str(NEW_TOKENS)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    rows = [
        "| checkpoint | loader | load s (median) | resident weights MB | x file | speed-up | decode tok/s (median) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for path in (samples.smollm2_path(), samples.gemma3_path()):
        results = {}
        for loader in ("transformers", "gguf_quant"):
            runs = [run(loader, path) for _ in range(args.repeat)]
            results[loader] = (statistics.median(r["seconds"] for r in runs), statistics.median(r["decode"] for r in runs), runs[0])
        base = results["transformers"][0]
        for loader, (secs, decode, r) in results.items():
            rows.append(
                f"| {r['name']} ({r['file'] / 1e6:.0f} MB) | {loader} | {secs:.2f} | {r['resident'] / 1e6:.1f} "
                f"| {r['resident'] / r['file']:.2f} | {base / secs:.1f}x | {decode:.1f} |"
            )
    table = "\n".join(rows)
    header = (f"CPU load and decode benchmark on {platform.node()} ({platform.processor() or platform.machine()}), "
              f"{r['threads']} threads, float32 model, {args.repeat} runs each; decode: {NEW_TOKENS} greedy tokens "
              "after a 4-token prompt\n\n")
    print(header + table)
    if args.out:
        args.out.write_text(header + table + "\n")


if __name__ == "__main__":
    main()
