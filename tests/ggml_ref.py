"""ctypes binding to libggml's reference quantizers, from the llama-cpp-python install.

`ggml_quantize(weight, type_name)` quantizes a float32 `[rows, cols]` array with
`ggml_quantize_chunk(type, src, dst, start, nrows, n_per_row, imatrix=NULL)` and returns the packed
rows as `np.uint8 [rows, row_bytes]`: the bytes llama.cpp writes into a GGUF file.

`available()` says whether the shared libraries were found; tests call `pytest.importorskip("llama_cpp")`
or check `available()` and skip when they are not.
"""
from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

__all__ = ["available", "find_library", "ggml_base_or_skip", "ggml_quantize", "lib_dir"]


def lib_dir() -> Path | None:
    """The folder holding llama-cpp-python's shared libraries, or None when it is not installed.
    GGUF_QUANT_GGML_LIB names such a folder outright: the GPU machine gets only libggml-base, taken from
    the same llama-cpp-python build (benchmarks/device_carry.sh), not the whole package."""
    if os.environ.get("GGUF_QUANT_GGML_LIB"):
        return Path(os.environ["GGUF_QUANT_GGML_LIB"])
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return None
    for base in spec.submodule_search_locations:
        d = Path(base) / "lib"
        if any(d.glob("libggml-base.*")) or any(d.glob("ggml-base.*")):
            return d
    return None


def _find(d: Path, stem: str) -> Path | None:
    for pattern in (f"lib{stem}.so", f"lib{stem}.dylib", f"{stem}.dll", f"lib{stem}.so.*"):
        hits = sorted(d.glob(pattern))
        if hits:
            return hits[0]
    return None


def find_library(stem: str = "ggml-base") -> Path | None:
    """The shared library `stem` (e.g. libggml-base.so) in lib_dir(), or None where there is none."""
    d = lib_dir()
    return None if d is None else _find(d, stem)


def ggml_base_or_skip() -> ctypes.CDLL:
    """libggml-base loaded as its own handle (no signatures set), or the calling test skipped where there is none."""
    path = find_library("ggml-base")
    if path is None:
        pytest.skip("no libggml-base: llama-cpp-python is not installed")
    return ctypes.CDLL(str(path))


@functools.cache
def _lib() -> ctypes.CDLL:
    d = lib_dir()
    if d is None:
        raise RuntimeError("llama_cpp (llama-cpp-python) is not installed: no libggml to compare against")
    base = _find(d, "ggml-base")
    if base is None:
        raise RuntimeError(f"no libggml-base in {d}")
    lib = ctypes.CDLL(str(base), mode=ctypes.RTLD_GLOBAL)
    # ggml_quantize_chunk and ggml_quantize_init live in ggml-base; load libggml too where it exists
    # so that a build that moved them there still resolves.
    if not hasattr(lib, "ggml_quantize_chunk"):
        full = _find(d, "ggml")
        lib = ctypes.CDLL(str(full), mode=ctypes.RTLD_GLOBAL)
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [
        ctypes.c_int,  # enum ggml_type
        ctypes.c_void_p,  # const float * src
        ctypes.c_void_p,  # void * dst
        ctypes.c_int64,  # start
        ctypes.c_int64,  # nrows
        ctypes.c_int64,  # n_per_row
        ctypes.c_void_p,  # const float * imatrix
    ]
    lib.ggml_quantize_init.restype = None
    lib.ggml_quantize_init.argtypes = [ctypes.c_int]
    lib.ggml_quantize_requires_imatrix.restype = ctypes.c_bool
    lib.ggml_quantize_requires_imatrix.argtypes = [ctypes.c_int]
    return lib


def available() -> bool:
    try:
        _lib()
    except (RuntimeError, OSError, AttributeError):
        return False
    return True


def ggml_quantize(weight: np.ndarray, type_name: str) -> np.ndarray:
    """Quantize `weight` (`[rows, cols]`, or `[cols]`) with libggml's reference quantizer, no importance matrix."""
    qtype = GGMLQuantizationType[type_name.upper()]
    x = np.ascontiguousarray(weight, dtype=np.float32)
    if x.ndim == 1:
        x = x[None]
    if x.ndim != 2:
        raise ValueError(f"expected a [rows, cols] array, got shape {x.shape}")
    rows, cols = x.shape
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    if cols % block_size:
        raise ValueError(f"{qtype.name}: {cols} columns is not a multiple of the block size {block_size}")
    row_bytes = cols // block_size * type_size
    lib = _lib()
    if lib.ggml_quantize_requires_imatrix(int(qtype)):
        raise ValueError(f"{qtype.name} needs an importance matrix in ggml")
    out = np.zeros((rows, row_bytes), dtype=np.uint8)
    if rows == 0:
        return out
    lib.ggml_quantize_init(int(qtype))
    n = lib.ggml_quantize_chunk(int(qtype), x.ctypes.data, out.ctypes.data, 0, rows, cols, None)
    if n != rows * row_bytes:
        raise RuntimeError(f"ggml_quantize_chunk wrote {n} bytes, expected {rows * row_bytes}")
    return out
