"""Hands transformers' "gguf" quantization route to this plugin.

transformers' `register_quantizer("gguf")` refuses to replace its own entry, so the plugin sets
the two routing tables directly; `from_pretrained(..., gguf_file=...)` and saved checkpoints
whose `quantization_config` says `quant_method: gguf` then both reach `GGUFQuantizer`.
"""
from __future__ import annotations

from transformers.quantizers import auto

from .config import GgufQuantizeConfig
from .quantizer import GGUFQuantizer

_METHOD = "gguf"


def register() -> None:
    """Route transformers' "gguf" quantization method to `GGUFQuantizer` (idempotent)."""
    auto.AUTO_QUANTIZER_MAPPING[_METHOD] = GGUFQuantizer
    auto.AUTO_QUANTIZATION_CONFIG_MAPPING[_METHOD] = GgufQuantizeConfig
