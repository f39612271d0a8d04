"""Which weights stay packed, the swap of float modules for packed ones on the meta device, and the
swap back (`model.dequantize()`)."""
from __future__ import annotations

import copy
import logging
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import torch
from torch import nn

from . import ops
from .archs.conversions import gpt_oss_from_llamacpp
from .ggml.types import ggml_type
from .modules import GgufEmbedding, GgufExperts, GgufLinear

__all__ = ["PackingReport", "resident_bytes", "swap_modules", "unpack_modules"]

logger = logging.getLogger("gguf_quant")


@dataclass
class PackingReport:
    """What stayed in blocks and what was unpacked, and why; `str()` is the user-facing summary."""

    packed: dict[str, str] = field(default_factory=dict)  # parameter -> ggml type name
    unpacked: dict[str, str] = field(default_factory=dict)  # parameter -> reason
    source: str = ""

    def __str__(self) -> str:
        kinds = ", ".join(f"{n} {t}" for t, n in sorted(Counter(self.packed.values()).items()))
        lines = [f"gguf_quant: {len(self.packed)} weights kept packed ({kinds or 'none'}) from {self.source}"]
        if self.unpacked:
            lines.append(f"gguf_quant: {len(self.unpacked)} weights unpacked to float at load:")
            lines += [f"  {name}: {why}" for name, why in sorted(self.unpacked.items())]
        return "\n".join(lines)


def resident_bytes(model: nn.Module) -> int:
    """Bytes the model's parameters and buffers hold, shared storage (a tied head) counted once."""
    tensors = {t.data_ptr(): t for t in [*model.parameters(), *model.buffers()]}
    return sum(t.numel() * t.element_size() for t in tensors.values())


def _packed_module(module: nn.Module, types: dict[str, int], dtype: torch.dtype) -> nn.Module | None:
    """The packed replacement for `module` given its quantized parameters' types, or None."""
    if set(types) == {"weight"} and type(module) is nn.Linear:
        return GgufLinear(module.in_features, module.out_features, types["weight"], module.bias is not None, "meta", dtype)
    # Plain embeddings, and transformers' scaled ones (Gemma) whose only change is the scale.
    if set(types) == {"weight"} and (
        type(module) is nn.Embedding or (isinstance(module, nn.Embedding) and hasattr(module, "scalar_embed_scale"))
    ):
        return GgufEmbedding(
            module.num_embeddings,
            module.embedding_dim,
            types["weight"],
            dtype,
            module.padding_idx,
            getattr(module, "scalar_embed_scale", None),
            "meta",
        )
    if set(types) == {"gate_up_proj", "down_proj"}:
        return _packed_experts(module, types, dtype)
    return None


def _packed_experts(module: nn.Module, types: dict[str, int], dtype: torch.dtype) -> GgufExperts | None:
    """GgufExperts (llama.cpp's layout: gate_up [E, 2I, H], down [E, H, I]) for one of transformers
    5's fused experts modules, or None for a layout it does not know."""
    if hasattr(module, "act_fn"):
        # Qwen-MoE / Mixtral: gate_up_proj [E, 2I, H] (gate rows, then up rows), down_proj [E, H, I].
        e, two_i, h = module.gate_up_proj.shape
        act, glu = module.act_fn, {}
    elif hasattr(module, "alpha") and hasattr(module, "limit"):
        # gpt-oss: gate_up_proj [E, H, 2I] with gate/up interleaved, down_proj [E, I, H], clamped
        # SwiGLU. The packed module keeps llama.cpp's de-interleaved, output-major layout instead.
        e, h, two_i = module.gate_up_proj.shape
        act, glu = None, {"swiglu_alpha": float(module.alpha), "swiglu_limit": float(module.limit)}
    else:
        return None
    inter = two_i // 2
    down = (e, h, inter) if act is not None else (e, inter, h)
    if tuple(module.down_proj.shape) != down:
        return None
    return GgufExperts(
        e,
        h,
        inter,
        types["gate_up_proj"],
        types["down_proj"],
        act,
        getattr(module, "gate_up_proj_bias", None) is not None,
        getattr(module, "down_proj_bias", None) is not None,
        "meta",
        dtype,
        **glu,
    )


def swap_modules(
    model: nn.Module,
    types: dict[str, dict[str, int]],
    dtype: torch.dtype,
    not_byte_safe: dict[str, str],
    skip,
) -> tuple[dict[str, dict[str, int]], PackingReport]:
    """Swap a packed module in for every module whose quantized parameters it can hold.

    `types` maps each quantized parameter to the ggml type of each of its sources (a fused
    expert `gate_up_proj` has two: llama.cpp's gate and up tensors). Returns the parameters to
    unpack at load (in the same form) and the report. `not_byte_safe` maps parameters whose
    conversion needs float values to that conversion's name; `skip(module_name)` says whether
    the user asked to keep a module unpacked.
    """
    report = PackingReport()
    unpack: dict[str, dict[str, int]] = {}
    types = dict(types)
    # A tied output head (no tensor of its own in the file) shares its source's blocks.
    for target, source in (getattr(model, "_tied_weights_keys", None) or {}).items():
        if source in types and target not in types:
            types[target] = types[source]

    by_module: dict[str, dict[str, dict[str, int]]] = defaultdict(dict)
    for name, sources in types.items():
        module_name, _, param = name.rpartition(".")
        by_module[module_name][param] = sources
    for module_name, params in by_module.items():
        module = model.get_submodule(module_name)
        kinds = {p: set(src.values()) for p, src in params.items()}
        reason = replacement = None
        if skip(module_name):
            reason = "listed in modules_to_not_convert"
        elif blocked := [f"{module_name}.{p}" for p in params if f"{module_name}.{p}" in not_byte_safe]:
            reason = f"its conversion ({not_byte_safe[blocked[0]]}) needs float values"
        elif mixed := [p for p, k in kinds.items() if len(k) > 1]:
            names = sorted(ggml_type(t).name for t in kinds[mixed[0]])
            reason = f"the tensors fused into {mixed[0]} have different types ({', '.join(names)})"
        elif (replacement := _packed_module(module, {p: k.pop() for p, k in kinds.items()}, dtype)) is None:
            reason = f"{type(module).__name__} ({', '.join(params)}) has no packed counterpart"
        for param, sources in params.items():
            name = f"{module_name}.{param}"
            t = "+".join(sorted({ggml_type(q).name for q in sources.values()}))
            if reason is None:
                report.packed[name] = t
            else:
                unpack[name] = sources
                report.unpacked[name] = f"{t}: {reason}"
        if replacement is not None:
            replacement.float_template = FloatTemplate(module)
            model.set_submodule(module_name, replacement)
    return unpack, report


class FloatTemplate:
    """The float module a packed one replaced, kept on the meta device (no memory) for
    `unpack_modules`: a plain attribute, not a child, so not in the state dict and not moved."""

    def __init__(self, module: nn.Module):
        self.module = module


def _unpacked(packed: torch.Tensor, qtype: int, dtype: torch.dtype) -> torch.Tensor:
    """Blocks `[..., row_bytes]` as floats `[..., K]` (gguf-py's values), on their device."""
    rows = ops.dequantize(packed.reshape(-1, packed.shape[-1]), qtype, dtype)
    return rows.reshape(*packed.shape[:-1], rows.shape[-1])


def _float_module(module: nn.Module, dtype: torch.dtype, unpacked: dict) -> nn.Module:
    """`module`'s float template, materialised on its device with its weights unpacked. `unpacked`
    maps a packed buffer's address to its float parameter, so a tied head gets the embedding's."""
    packed = module.weight if isinstance(module, (GgufLinear, GgufEmbedding)) else module.gate_up_proj
    dense = copy.deepcopy(module.float_template.module).to_empty(device=packed.device)

    def put(name: str, value: torch.Tensor, key=None) -> None:
        if key is not None and key in unpacked:
            value = unpacked[key]
        else:
            value = nn.Parameter(value.to(dtype), requires_grad=value.is_floating_point())
            if key is not None:
                unpacked[key] = value
        setattr(dense, name, value)

    if isinstance(module, GgufExperts):

        def layout(t: torch.Tensor, part: str) -> torch.Tensor:
            # Qwen-MoE / Mixtral keep llama.cpp's layout; gpt-oss's is transposed and interleaved
            return t if module.swiglu_limit is None else gpt_oss_from_llamacpp(t, part)

        put("gate_up_proj", layout(_unpacked(module.gate_up_proj, module.gate_up_qtype, dtype), "gate_up"))
        put("down_proj", layout(_unpacked(module.down_proj, module.down_qtype, dtype), "down"))
        if module.gate_up_proj_bias is not None:
            put("gate_up_proj_bias", layout(module.gate_up_proj_bias, "gate_up_bias"))
        if module.down_proj_bias is not None:
            put("down_proj_bias", module.down_proj_bias)
        return dense
    put("weight", _unpacked(packed, module.qtype, dtype), (packed.device, packed.data_ptr()))
    if getattr(module, "bias", None) is not None:
        put("bias", module.bias)
    if hasattr(dense, "scalar_embed_scale"):  # Gemma's scaled embedding: its one buffer, lost on the meta device
        dense.embed_scale = torch.tensor(dense.scalar_embed_scale, device=packed.device)
    return dense


def unpack_modules(model: nn.Module, dtype: torch.dtype) -> int:
    """Replace every packed module by the float module it stood for (`swap_modules`' templates),
    its weights dequantized exactly as gguf-py does, in `dtype`. Returns how many were replaced."""
    unpacked: dict = {}
    packed = [(n, m) for n, m in model.named_modules() if isinstance(m, (GgufLinear, GgufEmbedding, GgufExperts))]
    for name, module in packed:
        if getattr(module, "float_template", None) is None:
            raise ValueError(f"gguf_quant: {name} ({type(module).__name__}) was not built by the loader; nothing to unpack it to")
        model.set_submodule(name, _float_module(module, dtype, unpacked))
    return len(packed)
