"""gguf-quant: GGUF checkpoints in transformers with every weight kept in its ggml blocks.

`import gguf_quant` registers the plugin: from then on transformers routes
`from_pretrained(..., gguf_file=...)` and `GgufQuantizeConfig` to `GGUFQuantizer`.
"""
from .config import GgufQuantizeConfig
from .generation import deferred_stop_check
from .ggml import dequantize
from .gguf_io.requantize import quantize_gguf
from .gguf_io.writer import save_gguf
from .modules import GgufEmbedding, GgufExperts, GgufLinear
from .quantizer import GGUFQuantizer
from .registration import register

__all__ = [
    "GGUFQuantizer",
    "GgufQuantizeConfig",
    "GgufLinear",
    "GgufEmbedding",
    "GgufExperts",
    "dequantize",
    "deferred_stop_check",
    "save_gguf",
    "quantize_gguf",
    "register",
]

register()
