"""The packed-weight operations, one torch custom op each.

Every op has a fake (meta) implementation so `torch.compile(fullgraph=True)` traces through it,
and a real one that runs the CUDA kernel when one is loaded and supports the type, and the
pure-torch path (`gguf_quant.ggml`) otherwise. Both give the same numbers within rounding.

Shapes (ggml's row-major view: a row is `K` elements stored as `row_bytes` bytes of blocks):
- dequantize(packed [R, row_bytes], qtype, dtype) -> [R, K]
- get_rows(packed [R, row_bytes], ids [...], qtype, dtype) -> [..., K]
- matmul(x [M, K], packed [N, row_bytes], qtype) -> [M, N] in x.dtype (x @ W.T)
- moe_matmul(x [T, K] or [T, k, K], packed [E, N, row_bytes], ids [T, k], qtype) -> [T, k, N]
"""
from __future__ import annotations

import torch
from torch import Tensor

from . import kernel_loader
from .ggml import dequantize as _dequantize
from .ggml.types import ggml_type

__all__ = ["dequantize", "get_rows", "matmul", "moe_matmul", "run_get_rows", "run_matmul", "run_moe_matmul"]

# The torch path dequantizes at most this many weight elements at once (16 MiB of fp32), so a
# forward never holds more than one chunk of a weight in float; and, on the CPU, so that each
# chunk's buffers stay under glibc's 32 MiB mmap threshold: larger ones are fresh pages every
# time, whose faults cost more than the dequantization (4x on a 64 MiB chunk).
_CHUNK_ELEMENTS = 1 << 22


def _cols(packed: Tensor, qtype: int) -> int:
    return ggml_type(qtype).row_elements(packed.shape[-1])


def _kernel(op: str, qtype: int, *tensors: Tensor):
    """The loaded kernel's function for `op`, or None when the torch path must run."""
    return kernel_loader.kernel_op(op, qtype, tensors[0].device)


# --- dequantize -------------------------------------------------------------------------------

@torch.library.custom_op("gguf_quant::dequantize", mutates_args=())
def dequantize(packed: Tensor, qtype: int, dtype: torch.dtype) -> Tensor:
    fn = _kernel("dequantize", qtype, packed)
    if fn is not None:
        return fn(packed, qtype, dtype)
    return _dequantize(packed, qtype, dtype)


@dequantize.register_fake
def _(packed, qtype, dtype):
    return packed.new_empty((packed.shape[0], _cols(packed, qtype)), dtype=dtype)


# --- get_rows ---------------------------------------------------------------------------------

def _get_rows_impl(packed: Tensor, ids: Tensor, qtype: int, dtype: torch.dtype) -> Tensor:
    fn = _kernel("get_rows", qtype, packed)
    if fn is not None:
        return fn(packed, ids, qtype, dtype)
    flat = ids.reshape(-1)
    rows = _dequantize(packed.index_select(0, flat), qtype, dtype)
    return rows.reshape(*ids.shape, rows.shape[-1])


@torch.library.custom_op("gguf_quant::get_rows", mutates_args=())
def get_rows(packed: Tensor, ids: Tensor, qtype: int, dtype: torch.dtype) -> Tensor:
    return _get_rows_impl(packed, ids, qtype, dtype)


@get_rows.register_fake
def _(packed, ids, qtype, dtype):
    return packed.new_empty((*ids.shape, _cols(packed, qtype)), dtype=dtype)


# --- matmul -----------------------------------------------------------------------------------

def _torch_matmul(x: Tensor, packed: Tensor, qtype: int) -> Tensor:
    """x @ W.T, dequantizing W a chunk of rows at a time in the activation's dtype.

    torch's matmul accumulates bf16/fp16 products in fp32 on every backend we target.
    """
    n = packed.shape[0]
    k = _cols(packed, qtype)
    step = max(1, _CHUNK_ELEMENTS // max(k, 1))
    if step >= n:
        return x @ _dequantize(packed, qtype, x.dtype).T
    out = x.new_empty((x.shape[0], n))
    for start in range(0, n, step):
        w = _dequantize(packed[start : start + step], qtype, x.dtype)
        torch.matmul(x, w.T, out=out[:, start : start + step])
    return out


def _matmul_impl(x: Tensor, packed: Tensor, qtype: int) -> Tensor:
    fn = _kernel("matmul", qtype, packed)
    if fn is not None:
        return fn(x, packed, qtype)
    return _torch_matmul(x, packed, qtype)


@torch.library.custom_op("gguf_quant::matmul", mutates_args=())
def matmul(x: Tensor, packed: Tensor, qtype: int) -> Tensor:
    return _matmul_impl(x, packed, qtype)


@matmul.register_fake
def _(x, packed, qtype):
    return x.new_empty((x.shape[0], packed.shape[0]))


def _input_grad(grad: Tensor, packed: Tensor, qtype: int) -> Tensor:
    """grad @ W, the gradient of x @ W.T with respect to x, W unpacked a chunk of rows at a
    time (through the `dequantize` op, so on the kernel where there is one). The blocks
    themselves are frozen: they get no gradient."""
    n = packed.shape[0]
    step = max(1, _CHUNK_ELEMENTS // max(_cols(packed, qtype), 1))
    out = grad.new_zeros((grad.shape[0], _cols(packed, qtype)))
    for start in range(0, n, step):
        out.addmm_(grad[:, start : start + step], dequantize(packed[start : start + step], qtype, grad.dtype))
    return out


def _save_weights(ctx, inputs, output):
    # matmul(x, packed, qtype) or moe_matmul(x, packed, ids, qtype)
    ctx.save_for_backward(*inputs[1:-1])
    ctx.qtype, ctx.x_dim = inputs[-1], inputs[0].dim()


def _matmul_backward(ctx, grad):
    (packed,) = ctx.saved_tensors
    return _input_grad(grad, packed, ctx.qtype), None, None


matmul.register_autograd(_matmul_backward, setup_context=_save_weights)


# --- moe_matmul -------------------------------------------------------------------------------

def _moe_matmul_impl(x: Tensor, packed: Tensor, ids: Tensor, qtype: int) -> Tensor:
    fn = _kernel("moe_matmul", qtype, packed)
    if fn is not None:
        return fn(x, packed, ids, qtype)
    t, top_k = ids.shape
    n = packed.shape[1]
    # Each (token, slot) pair reads its own input row: the token's hidden state for gate/up,
    # the slot's intermediate state for down.
    rows = x.unsqueeze(1).expand(t, top_k, x.shape[-1]) if x.dim() == 2 else x
    rows = rows.reshape(t * top_k, -1)
    flat_ids = ids.reshape(-1)
    out = x.new_zeros((t * top_k, n))
    # Unpack only the experts that were hit, each once.
    order = torch.argsort(flat_ids, stable=True)
    hit, counts = torch.unique_consecutive(flat_ids[order], return_counts=True)
    start = 0
    for expert, count in zip(hit.tolist(), counts.tolist()):
        sel = order[start : start + count]
        out[sel] = _torch_matmul(rows[sel], packed[expert], qtype)
        start += count
    return out.reshape(t, top_k, n)


@torch.library.custom_op("gguf_quant::moe_matmul", mutates_args=())
def moe_matmul(x: Tensor, packed: Tensor, ids: Tensor, qtype: int) -> Tensor:
    return _moe_matmul_impl(x, packed, ids, qtype)


@moe_matmul.register_fake
def _(x, packed, ids, qtype):
    return x.new_empty((ids.shape[0], ids.shape[1], packed.shape[1]))


def _moe_matmul_backward(ctx, grad):
    packed, ids = ctx.saved_tensors
    t, top_k, _ = grad.shape
    flat_ids = ids.reshape(-1)
    grad = grad.reshape(t * top_k, -1)
    rows = grad.new_zeros((t * top_k, _cols(packed, ctx.qtype)))
    order = torch.argsort(flat_ids, stable=True)
    hit, counts = torch.unique_consecutive(flat_ids[order], return_counts=True)
    start = 0
    for expert, count in zip(hit.tolist(), counts.tolist()):
        sel = order[start : start + count]
        rows[sel] = _input_grad(grad[sel], packed[expert], ctx.qtype)
        start += count
    rows = rows.reshape(t, top_k, -1)
    # A token's hidden state fed every slot (gate/up): its gradient is the sum over them.
    return (rows.sum(dim=1) if ctx.x_dim == 2 else rows), None, None, None


moe_matmul.register_autograd(_moe_matmul_backward, setup_context=_save_weights)


# --- what the modules call --------------------------------------------------------------------

def _eager(x: Tensor) -> bool:
    """Whether calling an op's implementation (the kernel's function, or the torch path) directly
    is the same as calling the custom op: eager (not traced by torch.compile) and no gradient to
    record. torch.library's dispatch of a Python custom op costs about as much as the kernel's own
    launch path: on the H200 machine's host, matmul M = 1 took 24.9 / 22.7 us a call through the
    op against 13.2 / 12.4 this way (`benchmarks/results/e2e_h200.md`, "Eager launch cost"), and
    a decode step calls ~225 of them; on the 2-core CPU machine the op adds 10-30 us to a torch-path
    call (`benchmarks/results/eager_calls_cpu.md`)."""
    return not (torch.compiler.is_compiling() or (x.requires_grad and torch.is_grad_enabled()))


def run_matmul(x: Tensor, packed: Tensor, qtype: int) -> Tensor:
    """matmul, without the op's dispatch where that is the same (see _eager)."""
    return (_matmul_impl if _eager(x) else matmul)(x, packed, qtype)


def run_moe_matmul(x: Tensor, packed: Tensor, ids: Tensor, qtype: int) -> Tensor:
    """moe_matmul, without the op's dispatch where that is the same (see _eager)."""
    return (_moe_matmul_impl if _eager(x) else moe_matmul)(x, packed, ids, qtype)


def run_get_rows(packed: Tensor, ids: Tensor, qtype: int, dtype: torch.dtype) -> Tensor:
    """get_rows, without the op's dispatch where that is the same (see _eager; ids take no gradient)."""
    return (_get_rows_impl if _eager(ids) else get_rows)(packed, ids, qtype, dtype)
