"""Random valid ggml blocks, for the dequantizer and kernel checks: every byte random except the
scale fields, where random bytes could be inf/NaN (fp16) or out of range (MXFP4's e8m0, and NVFP4's
UE4M3, whose largest scales overflow fp16 products)."""
from __future__ import annotations

import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

# Offsets of the fp16 scale fields in each block (ggml-common.h).
SCALE_FIELDS = {"Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0], "Q2_K": [80, 82],
                "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208], "IQ4_NL": [0], "IQ4_XS": [0],
                "IQ2_XXS": [0], "IQ2_XS": [0], "IQ2_S": [0], "IQ3_XXS": [0], "IQ3_S": [0], "IQ1_S": [0]}


def random_blocks(name: str, shape: tuple[int, ...], cols: int, rng: np.random.Generator,
                  e8m0: tuple[int, int] = (118, 134), ue4m3: tuple[int, int] = (0x18, 0x40)) -> np.ndarray:
    """uint8 [*shape, row_bytes] for a [*shape, cols] weight of type `name`: fp16 scales ~ N(0, 0.01),
    MXFP4 exponents drawn from `e8m0` and NVFP4 scale bytes from `ue4m3` (low inclusive, high
    exclusive; the default: exponents 3..7, scales 1/32..15/16)."""
    bs, ts = GGML_QUANT_SIZES[GGMLQuantizationType[name]]
    nb = cols // bs
    rows = int(np.prod(shape))
    raw = rng.integers(0, 256, size=(rows, nb, ts), dtype=np.uint8)
    if name == "MXFP4":
        raw[:, :, 0] = rng.integers(*e8m0, size=(rows, nb))
    if name == "NVFP4":
        raw[:, :, :4] = rng.integers(*ue4m3, size=(rows, nb, 4))
    for off in SCALE_FIELDS.get(name, []):
        h = (rng.standard_normal((rows, nb)) * 0.01).astype(np.float16)
        raw[:, :, off : off + 2] = h.view(np.uint8).reshape(rows, nb, 2)
    if name == "IQ1_M":  # its fp16 d: the top nibbles of the four 16-bit scale words (bytes 48..55)
        h = (rng.standard_normal((rows, nb)) * 0.01).astype(np.float16).view(np.uint16)
        odd = raw[:, :, 49:56:2]
        raw[:, :, 49:56:2] = (odd & 0x0F) | (((h[..., None] >> (4 * np.arange(4))) & 0xF) << 4).astype(np.uint8)
    return raw.reshape(*shape, nb * ts)
