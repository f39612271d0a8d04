"""Modules whose weights stay in ggml blocks: drop-in replacements for `nn.Linear`,
`nn.Embedding` and transformers' fused MoE experts.

Each holds its weight as a uint8 parameter `[rows, row_bytes]` plus the ggml type id, and calls
the ops in `gguf_quant.ops`; nothing here knows a block layout.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from . import ops
from .ggml.types import ggml_type

__all__ = ["GgufLinear", "GgufEmbedding", "GgufExperts", "packed_parameter"]


def packed_parameter(rows: tuple[int, ...], cols: int, qtype: int, device=None) -> nn.Parameter:
    """An empty uint8 parameter shaped for `rows` rows of `cols` elements of `qtype`."""
    data = torch.empty((*rows, ggml_type(qtype).row_bytes(cols)), dtype=torch.uint8, device=device)
    return nn.Parameter(data, requires_grad=False)


class GgufLinear(nn.Module):
    """`y = x @ W.T + b` with W `[out_features, in_features]` kept as ggml blocks."""

    def __init__(self, in_features: int, out_features: int, qtype: int, bias: bool = False, device=None, dtype=None):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.qtype = int(qtype)
        self.weight = packed_parameter((out_features,), in_features, qtype, device)
        # GGUF stores biases as plain float tensors, so the bias stays an ordinary parameter.
        self.bias = nn.Parameter(torch.empty(out_features, device=device, dtype=dtype), requires_grad=False) if bias else None
        # set by `fusion.RowGroup` when this module's rows are stacked with its siblings'
        self.group = None
        self.group_slot = 0
        self.register_load_state_dict_post_hook(GgufLinear._after_load)

    def forward(self, x: Tensor) -> Tensor:
        group = self.group
        out = group.output(self.group_slot, x) if group is not None and group.fused is not None else self.product(x)
        if self.bias is not None:
            out = out + self.bias.to(out.dtype)
        return out.reshape(*x.shape[:-1], out.shape[-1])

    def product(self, x: Tensor) -> Tensor:
        """`x @ W.T` of this module alone (stacked with siblings or not) over x's rows, `[rows, out_features]`,
        without the bias."""
        return ops.run_matmul(x.reshape(-1, self.in_features), self.weight, self.qtype)

    def _apply(self, fn, recurse=True):
        super()._apply(fn, recurse)
        if self.group is not None:
            self.group.refresh(self)
        return self

    @staticmethod
    def _after_load(module: "GgufLinear", incompatible_keys) -> None:
        if module.group is not None:
            module.group.refresh(module)

    def extra_repr(self) -> str:
        t = ggml_type(self.qtype).name
        stacked = f", stacked={'/'.join(self.group.names)}" if self.group is not None and self.group.fused is not None else ""
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, type={t}{stacked}"


class GgufEmbedding(nn.Module):
    """A lookup table kept as ggml blocks; only the looked-up rows are unpacked.

    `embed_scale` reproduces scaled embeddings (Gemma multiplies by sqrt(hidden)); like
    transformers, the scale is rounded to the output dtype before multiplying.
    """

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        qtype: int,
        dtype: torch.dtype = torch.float32,
        padding_idx: int | None = None,
        embed_scale: float | None = None,
        device=None,
    ):
        super().__init__()
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.qtype = int(qtype)
        self.dtype = dtype
        self.padding_idx = padding_idx
        self.embed_scale = embed_scale
        self.weight = packed_parameter((num_embeddings,), embedding_dim, qtype, device)

    def _apply(self, fn, recurse=True):
        # `model.to(torch.bfloat16)` casts float parameters and leaves the blocks alone; the rows
        # this table hands out follow the same cast (probed on an empty tensor).
        self.dtype = fn(torch.empty(0, dtype=self.dtype)).dtype
        return super()._apply(fn, recurse)

    def forward(self, input_ids: Tensor) -> Tensor:
        out = ops.run_get_rows(self.weight, input_ids, self.qtype, self.dtype)
        if self.embed_scale is not None:
            out = out * torch.tensor(self.embed_scale, dtype=out.dtype).item()
        return out

    def extra_repr(self) -> str:
        t = ggml_type(self.qtype).name
        scale = f", embed_scale={self.embed_scale:g}" if self.embed_scale is not None else ""
        return f"{self.num_embeddings}, {self.embedding_dim}, type={t}{scale}"


class GgufExperts(nn.Module):
    """One MoE layer's routed experts, stacked and packed, with the forward signature of
    transformers' fused experts modules: `forward(hidden_states, top_k_index, top_k_weights)`.

    `gate_up_proj` is `[E, 2*I, H]` (each expert's gate rows, then its up rows) and `down_proj`
    `[E, H, I]` in elements, each stored as blocks along its last (input) dimension: llama.cpp's
    `ffn_{gate,up,down}_exps` layout, which is also how transformers lays out the dense Qwen/Mixtral
    experts. Biases, when present, follow the same order (`gate_up_proj_bias` `[E, 2*I]`, gate then up).

    The gated activation is `act_fn(gate) * up`, or, when `swiglu_limit` is given, gpt-oss's
    clamped SwiGLU (ggml's `swiglu_oai`, transformers' `GptOssExperts`):
    `(clamp(up, -limit, limit) + 1) * g * sigmoid(alpha * g)` with `g = clamp(gate, max=limit)`.
    """

    def __init__(
        self,
        num_experts: int,
        hidden_dim: int,
        intermediate_dim: int,
        gate_up_qtype: int,
        down_qtype: int,
        act_fn,
        gate_up_bias: bool = False,
        down_bias: bool = False,
        device=None,
        dtype=None,
        swiglu_alpha: float | None = None,
        swiglu_limit: float | None = None,
    ):
        super().__init__()
        self.num_experts = num_experts
        self.hidden_dim = hidden_dim
        self.intermediate_dim = intermediate_dim
        self.gate_up_qtype = int(gate_up_qtype)
        self.down_qtype = int(down_qtype)
        self.act_fn = act_fn
        self.swiglu_alpha = swiglu_alpha
        self.swiglu_limit = swiglu_limit
        self.gate_up_proj = packed_parameter((num_experts, 2 * intermediate_dim), hidden_dim, gate_up_qtype, device)
        self.down_proj = packed_parameter((num_experts, hidden_dim), intermediate_dim, down_qtype, device)

        def bias(shape):
            return nn.Parameter(torch.empty(shape, device=device, dtype=dtype), requires_grad=False)

        self.gate_up_proj_bias = bias((num_experts, 2 * intermediate_dim)) if gate_up_bias else None
        self.down_proj_bias = bias((num_experts, hidden_dim)) if down_bias else None

    def _gate_up(self, gate_up: Tensor) -> Tensor:
        gate, up = gate_up.chunk(2, dim=-1)
        if self.swiglu_limit is None:
            return self.act_fn(gate) * up
        gate = gate.clamp(max=self.swiglu_limit)
        up = up.clamp(-self.swiglu_limit, self.swiglu_limit)
        return (up + 1) * (gate * torch.sigmoid(gate * self.swiglu_alpha))

    def forward(self, hidden_states: Tensor, top_k_index: Tensor, top_k_weights: Tensor) -> Tensor:
        ids = top_k_index.to(torch.int64)
        gate_up = ops.run_moe_matmul(hidden_states, self.gate_up_proj, ids, self.gate_up_qtype)
        if self.gate_up_proj_bias is not None:
            gate_up = gate_up + self.gate_up_proj_bias[ids].to(gate_up.dtype)
        out = ops.run_moe_matmul(self._gate_up(gate_up), self.down_proj, ids, self.down_qtype)
        if self.down_proj_bias is not None:
            out = out + self.down_proj_bias[ids].to(out.dtype)
        return (out * top_k_weights.unsqueeze(-1).to(out.dtype)).sum(dim=1)

    def extra_repr(self) -> str:
        return (
            f"num_experts={self.num_experts}, hidden_dim={self.hidden_dim}, intermediate_dim={self.intermediate_dim}, "
            f"types=({ggml_type(self.gate_up_qtype).name}, {ggml_type(self.down_qtype).name})"
            + (f", swiglu_alpha={self.swiglu_alpha:g}, swiglu_limit={self.swiglu_limit:g}" if self.swiglu_limit is not None else "")
        )
