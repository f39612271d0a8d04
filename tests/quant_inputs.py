"""Input rows for the quantizer tests: the classes of values where a quantizer's float32
arithmetic, rounding or tie-breaking can part from llama.cpp's."""
from __future__ import annotations

import numpy as np


def row(kind: str, cols: int, rng: np.random.Generator) -> np.ndarray:
    n = rng.standard_normal(cols).astype(np.float32)
    if kind == "normal":
        return n
    if kind == "zeros":
        return np.zeros(cols, np.float32)
    if kind == "outlier":  # one huge value in an ordinary row
        r = n.copy()
        r[rng.integers(cols)] = np.float32(1e4 * rng.choice([-1, 1]))
        return r
    if kind == "tiny":
        return n * np.float32(1e-30)
    if kind == "denormal":
        return n * np.float32(1e-39)
    if kind == "huge":  # up to float16 overflow and float32 x*x overflow
        return n * np.float32(10.0 ** rng.uniform(4, 30))
    if kind == "constant":
        return np.full(cols, np.float32(rng.standard_normal()), np.float32)
    if kind == "alternating":
        return np.tile(np.array([1, -1], np.float32), cols // 2) * np.float32(rng.random() + 0.5)
    if kind == "positive":
        return np.abs(n)
    if kind == "negative":
        return -np.abs(n)
    if kind == "eighths":
        return (rng.integers(-64, 65, cols) / 8).astype(np.float32)
    if kind == "fp16":
        return n.astype(np.float16).astype(np.float32)
    if kind == "bf16":
        return (n.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
    if kind == "heavy_tail":
        return rng.standard_t(1.5, cols).astype(np.float32)
    if kind == "sparse":
        return n * (rng.random(cols) < 0.1)
    if kind == "signed_zeros":
        return np.where(rng.random(cols) < 0.5, -0.0, 0.0).astype(np.float32)
    if kind == "pow2":
        e = rng.integers(-10, 10, cols)
        return (2.0 ** e * rng.choice([-1, 1], cols) * (1 - rng.integers(0, 3, cols) * 2.0**-24)).astype(np.float32)
    if kind == "offset":
        return (rng.random(cols) * 4 + 100).astype(np.float32)
    if kind == "sub_mix":  # every 16 elements their own magnitude, some zero / one-signed / constant
        g = n.reshape(-1, 16) * (10.0 ** rng.uniform(-9, 5, (cols // 16, 1))).astype(np.float32)
        sel = rng.random(cols // 16)
        g[sel < 0.1] = 0
        g[(sel >= 0.1) & (sel < 0.15)] = np.abs(g[(sel >= 0.1) & (sel < 0.15)])
        c = (sel >= 0.15) & (sel < 0.2)
        g[c] = g[c][:, :1]
        return g.reshape(cols)
    if kind == "random_bits":  # every finite float32, denormals to 3.4e38
        b = rng.integers(0, 2**32, cols, dtype=np.uint64).astype(np.uint32)
        x = b.view(np.float32).copy()
        x[~np.isfinite(x)] = 1.0
        return x
    if kind == "small_ints":  # small integers and simple fractions: ties everywhere
        return (rng.integers(-40, 41, cols) * rng.choice([1, 0.5, 0.25, 1 / 3])).astype(np.float32)
    raise ValueError(kind)
