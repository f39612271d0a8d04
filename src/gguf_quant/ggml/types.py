"""The ggml type table: block geometry of every tensor type a GGUF file can hold.

Sizes follow ggml's public block layouts (ggml-common.h), as gguf-py publishes them in
`gguf.constants.GGML_QUANT_SIZES`; this module only gives them a torch-friendly face.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

__all__ = ["GgmlType", "ggml_type", "GGML_TYPES", "FLOAT_TYPES", "row_bytes", "row_elements"]


@dataclass(frozen=True)
class GgmlType:
    """One ggml tensor type: `block_size` elements are stored in `type_size` bytes."""

    name: str
    id: int
    block_size: int
    type_size: int

    @property
    def quantized(self) -> bool:
        return self.name not in FLOAT_TYPES

    def row_bytes(self, cols: int) -> int:
        if cols % self.block_size:
            raise ValueError(f"{self.name}: row of {cols} elements is not a multiple of the block size {self.block_size}")
        return cols // self.block_size * self.type_size

    def row_elements(self, nbytes: int) -> int:
        if nbytes % self.type_size:
            raise ValueError(f"{self.name}: row of {nbytes} bytes is not a multiple of the block size {self.type_size} bytes")
        return nbytes // self.type_size * self.block_size


GGML_TYPES: dict[str, GgmlType] = {
    t.name: GgmlType(t.name, int(t), *GGML_QUANT_SIZES[t]) for t in GGMLQuantizationType if t in GGML_QUANT_SIZES
}
_BY_ID = {t.id: t for t in GGML_TYPES.values()}

# Plain element types: stored as ordinary tensors, never packed.
FLOAT_TYPES: dict[str, torch.dtype] = {
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "F64": torch.float64,
    "I8": torch.int8,
    "I16": torch.int16,
    "I32": torch.int32,
    "I64": torch.int64,
}


def ggml_type(quant_type: str | int | GGMLQuantizationType | GgmlType) -> GgmlType:
    """Look a type up by name (`"Q4_K"`, case-insensitive), by id, or by `gguf.GGMLQuantizationType`."""
    if isinstance(quant_type, GgmlType):
        return quant_type
    if isinstance(quant_type, GGMLQuantizationType):
        return GGML_TYPES[quant_type.name]
    if isinstance(quant_type, int):
        try:
            return _BY_ID[quant_type]
        except KeyError:
            raise ValueError(f"unknown ggml type id {quant_type}") from None
    try:
        return GGML_TYPES[str(quant_type).upper()]
    except KeyError:
        raise ValueError(f"unknown ggml type {quant_type!r}; known: {', '.join(GGML_TYPES)}") from None


def row_bytes(quant_type, cols: int) -> int:
    return ggml_type(quant_type).row_bytes(cols)


def row_elements(quant_type, nbytes: int) -> int:
    return ggml_type(quant_type).row_elements(nbytes)
