"""ggml block formats in pure torch: the type table, dequantizers and quantizers."""
from .types import FLOAT_TYPES, GGML_TYPES, GgmlType, ggml_type
from .dequant import dequantize
from .quant import quantize

__all__ = ["FLOAT_TYPES", "GGML_TYPES", "GgmlType", "ggml_type", "dequantize", "quantize"]
