"""`GgufQuantizeConfig`: the quantization config transformers routes to `GGUFQuantizer`."""
from __future__ import annotations

from typing import Any

from transformers.utils.quantization_config import QuantizationConfigMixin, QuantizationMethod

__all__ = ["GgufQuantizeConfig"]


class GgufQuantizeConfig(QuantizationConfigMixin):
    """Options for loading GGUF checkpoints with their weights kept in ggml blocks.

    Not a subclass of transformers' `GgufConfig` on purpose: transformers insists that a
    `GgufConfig` come with `gguf_file=`, and this config also serves checkpoints with no
    `.gguf` file (quantizing a float model while it loads, reloading a saved packed model).

    Args:
        gguf_file: the `.gguf` file; filled in from `from_pretrained(..., gguf_file=...)`.
        quant_type: quantize a float checkpoint to this ggml type (`"Q4_K"`, `"Q8_0"`, ...)
            or llama.cpp mix (`"Q4_K_M"`, ...) while it loads.
        modules_to_not_convert: module names (or name suffixes) whose weights are kept as
            ordinary float weights.
        dequantize: unpack every weight at load into a plain dense model.
        module_types: `{module name: ggml type name}` of every packed module; written by
            `save_pretrained` so a reload rebuilds the same modules.
        fuse_siblings: run a layer's q/k/v projections (and its gate/up) that share a ggml
            type as one matmul over their stacked rows (`gguf_quant.fusion`): one kernel launch
            instead of two or three, same weights and memory.
    """

    def __init__(
        self,
        gguf_file: str | None = None,
        quant_type: str | None = None,
        modules_to_not_convert: list[str] | None = None,
        dequantize: bool = False,
        module_types: dict[str, str] | None = None,
        fuse_siblings: bool = True,
        **kwargs: Any,
    ):
        self.quant_method = QuantizationMethod.GGUF
        self.gguf_file = gguf_file
        self.quant_type = quant_type
        self.modules_to_not_convert = list(modules_to_not_convert or [])
        self.dequantize = dequantize
        self.module_types = dict(module_types or {})
        self.fuse_siblings = fuse_siblings

    def skips(self, module_name: str) -> bool:
        """Whether the user asked for this module to stay unpacked."""
        return any(module_name == m or module_name.endswith("." + m) for m in self.modules_to_not_convert)
