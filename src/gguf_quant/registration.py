"""Hands transformers' "gguf" quantization route to this plugin.

transformers' `register_quantizer("gguf")` refuses to replace its own entry, so the plugin sets
the two routing tables directly; `from_pretrained(..., gguf_file=...)` and saved checkpoints
whose `quantization_config` says `quant_method: gguf` then both reach `GGUFQuantizer`. The
config builders go into transformers' table of fast GGUF config readers, and a gpt-oss
checkpoint with openai's MXFP4 experts accepts a `GgufQuantizeConfig(quant_type=...)` in place of
its own quantization config.
"""
from __future__ import annotations

from transformers.integrations.gguf import gguf_config_mapping
from transformers.quantizers import auto

from .archs.configs import CONFIG_BUILDERS
from .config import GgufQuantizeConfig
from .quantizer import GGUFQuantizer, accept_mxfp4_checkpoints

_METHOD = "gguf"


def register() -> None:
    """Route transformers' "gguf" quantization method to `GGUFQuantizer` (idempotent)."""
    auto.AUTO_QUANTIZER_MAPPING[_METHOD] = GGUFQuantizer
    auto.AUTO_QUANTIZATION_CONFIG_MAPPING[_METHOD] = GgufQuantizeConfig
    for arch, build in CONFIG_BUILDERS.items():
        gguf_config_mapping.GGUF_CONFIG_ARCHS.setdefault(arch, build)
    accept_mxfp4_checkpoints()  # gpt-oss as openai ships it, quantized with our config
