"""CUDA kernels for GGUF (ggml block) weights kept packed: dequantize, get_rows, matmul, moe_matmul, quantize.

The functions take the same arguments as the `gguf_quant` ops of the same name:

- dequantize(packed [R, row_bytes] uint8, qtype, dtype) -> [R, K]
- get_rows(packed [R, row_bytes], ids [...] int, qtype, dtype) -> [..., K]
- matmul(x [..., K], packed [N, row_bytes], qtype) -> [..., N] in x.dtype (x @ W.T, fp32 accumulation)
- moe_matmul(x [T, K] or [T, k, K], packed [E, N, row_bytes], ids [T, k], qtype) -> [T, k, N]
- quantize(weight [..., K] float32/bfloat16/float16, qtype) -> uint8 [..., row_bytes], byte-exact with
  llama.cpp's reference quantizer (ggml_quantize_chunk without importance matrix), for QUANTIZE_TYPES

`qtype` is the ggml type id (gguf.GGMLQuantizationType). Types outside SUPPORTED_TYPES raise;
callers check `supports(op, qtype)` first.
"""
from __future__ import annotations

import torch

from ._ops import add_op_namespace_prefix, ops

__all__ = ["SUPPORTED_TYPES", "QUANTIZE_TYPES", "OPS", "supports", "dequantize", "get_rows", "matmul", "moe_matmul",
           "quantize"]

# ggml type id -> (elements per block, bytes per block), from ggml-common.h.
_BLOCKS = {
    2: (32, 18),  # Q4_0
    3: (32, 20),  # Q4_1
    6: (32, 22),  # Q5_0
    7: (32, 24),  # Q5_1
    8: (32, 34),  # Q8_0
    10: (256, 84),  # Q2_K
    11: (256, 110),  # Q3_K
    12: (256, 144),  # Q4_K
    13: (256, 176),  # Q5_K
    14: (256, 210),  # Q6_K
    20: (32, 18),  # IQ4_NL
    23: (256, 136),  # IQ4_XS
    39: (32, 17),  # MXFP4
    40: (64, 36),  # NVFP4
    16: (256, 66),  # IQ2_XXS
    17: (256, 74),  # IQ2_XS
    22: (256, 82),  # IQ2_S
    18: (256, 98),  # IQ3_XXS
    21: (256, 110),  # IQ3_S
    19: (256, 50),  # IQ1_S
    29: (256, 56),  # IQ1_M
}
SUPPORTED_TYPES = frozenset(_BLOCKS)
# Types the quantize kernel writes: all above but NVFP4 and the i-quants below IQ4, which are read only.
QUANTIZE_TYPES = SUPPORTED_TYPES - {40, 16, 17, 22, 18, 21, 19, 29}
OPS = ("dequantize", "get_rows", "matmul", "moe_matmul", "quantize")


def supports(op: str, qtype: int) -> bool:
    if op == "quantize":
        return int(qtype) in QUANTIZE_TYPES
    return op in OPS and int(qtype) in SUPPORTED_TYPES


def dequantize(packed: torch.Tensor, qtype: int, dtype: torch.dtype) -> torch.Tensor:
    return ops.dequantize(packed, int(qtype), dtype)


def get_rows(packed: torch.Tensor, ids: torch.Tensor, qtype: int, dtype: torch.dtype) -> torch.Tensor:
    return ops.get_rows(packed, ids, int(qtype), dtype)


def matmul(x: torch.Tensor, packed: torch.Tensor, qtype: int) -> torch.Tensor:
    return ops.matmul(x, packed, int(qtype))


def moe_matmul(x: torch.Tensor, packed: torch.Tensor, ids: torch.Tensor, qtype: int) -> torch.Tensor:
    return ops.moe_matmul(x, packed, ids, int(qtype))


def quantize(weight: torch.Tensor, qtype: int) -> torch.Tensor:
    # The argument checks are made here, before the op: on the H200 the op's own TORCH_CHECKs (the
    # dtype one, then the block-size one) crashed the process instead of raising; cause not
    # established. The op keeps its checks for callers that bypass this function.
    qtype = int(qtype)
    if qtype not in QUANTIZE_TYPES:
        raise RuntimeError(f"gguf_kernels: quantize: ggml type {qtype} is not supported")
    if weight.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise RuntimeError(f"gguf_kernels: quantize: weight must be float32, bfloat16 or float16, got {weight.dtype}")
    if weight.device.type != "cuda":
        raise RuntimeError("gguf_kernels: quantize: weight must be a CUDA tensor")
    if weight.dim() < 1 or weight.shape[-1] % _BLOCKS[qtype][0]:
        raise RuntimeError(f"gguf_kernels: quantize: rows of {weight.shape[-1] if weight.dim() else 0} elements are "
                           f"not a multiple of the block size {_BLOCKS[qtype][0]}")
    return ops.quantize(weight, qtype)


# --- fake (meta) implementations, for torch.compile and opcheck ------------------------------

def _cols(packed: torch.Tensor, qtype: int) -> int:
    block, nbytes = _BLOCKS[int(qtype)]
    return packed.shape[-1] // nbytes * block


@torch.library.register_fake(add_op_namespace_prefix("dequantize"))
def _dequantize_fake(packed, qtype, dtype):
    return packed.new_empty((packed.shape[0], _cols(packed, qtype)), dtype=dtype)


@torch.library.register_fake(add_op_namespace_prefix("get_rows"))
def _get_rows_fake(packed, ids, qtype, dtype):
    return packed.new_empty((*ids.shape, _cols(packed, qtype)), dtype=dtype)


@torch.library.register_fake(add_op_namespace_prefix("matmul"))
def _matmul_fake(x, packed, qtype):
    return x.new_empty((*x.shape[:-1], packed.shape[0]))


@torch.library.register_fake(add_op_namespace_prefix("moe_matmul"))
def _moe_matmul_fake(x, packed, ids, qtype):
    return x.new_empty((ids.shape[0], ids.shape[1], packed.shape[1]))


@torch.library.register_fake(add_op_namespace_prefix("quantize"))
def _quantize_fake(weight, qtype):
    block, nbytes = _BLOCKS[int(qtype)]
    return weight.new_empty((*weight.shape[:-1], weight.shape[-1] // block * nbytes), dtype=torch.uint8)
