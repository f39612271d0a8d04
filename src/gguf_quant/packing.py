"""Which weights stay packed, and the swap of float modules for packed ones on the meta device."""
from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

import torch
from torch import nn

from .ggml.types import ggml_type
from .modules import GgufEmbedding, GgufLinear

__all__ = ["PackingReport", "swap_modules"]

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


def _packed_module(module: nn.Module, qtype: int, dtype: torch.dtype) -> nn.Module | None:
    """The packed replacement for `module`'s weight, or None when it has none."""
    if type(module) is nn.Linear:
        return GgufLinear(module.in_features, module.out_features, qtype, module.bias is not None, "meta", dtype)
    # Plain embeddings, and transformers' scaled ones (Gemma) whose only change is the scale.
    if type(module) is nn.Embedding or (isinstance(module, nn.Embedding) and hasattr(module, "scalar_embed_scale")):
        return GgufEmbedding(
            module.num_embeddings,
            module.embedding_dim,
            qtype,
            dtype,
            module.padding_idx,
            getattr(module, "scalar_embed_scale", None),
            "meta",
        )
    return None


def swap_modules(
    model: nn.Module,
    types: dict[str, int],
    dtype: torch.dtype,
    not_byte_safe: dict[str, str],
    skip,
) -> tuple[dict[str, int], PackingReport]:
    """Swap a packed module in for every weight in `types` (parameter -> ggml type id) that can
    hold one; returns the parameters to unpack at load (-> type) and the report.

    `not_byte_safe` maps parameters whose conversion needs float values to that conversion's
    name; `skip(module_name)` says whether the user asked to keep a module unpacked.
    """
    report = PackingReport()
    unpack: dict[str, int] = {}
    types = dict(types)
    # A tied output head (no tensor of its own in the file) shares its source's blocks.
    for target, source in (getattr(model, "_tied_weights_keys", None) or {}).items():
        if source in types and target not in types:
            types[target] = types[source]

    for name, qtype in types.items():
        module_name, _, param = name.rpartition(".")
        module = model.get_submodule(module_name)
        t = ggml_type(qtype).name
        reason = None
        replacement = None
        if skip(module_name):
            reason = "listed in modules_to_not_convert"
        elif name in not_byte_safe:
            reason = f"its conversion ({not_byte_safe[name]}) needs float values"
        elif param != "weight" or (replacement := _packed_module(module, qtype, dtype)) is None:
            reason = f"{type(module).__name__}.{param} has no packed counterpart"
        if reason is not None:
            unpack[name] = qtype
            report.unpacked[name] = f"{t}: {reason}"
            continue
        model.set_submodule(module_name, replacement)
        report.packed[name] = t
    return unpack, report
