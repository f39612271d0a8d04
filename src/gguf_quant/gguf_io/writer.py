"""Writing a loaded model as a `.gguf` file llama.cpp can run.

The file format is gguf-py's (`GGUFWriter`, the writer llama.cpp's own converter uses):
header, typed key/values, tensor table, then the tensor data aligned to 32 bytes, streamed one
tensor at a time so no second copy of the model is held. Names, conversions and architecture
keys come from `archs.export`; this module adds the general and tokenizer metadata and the
file handling (never half-written: a temporary file in the same folder, renamed at the end).

Metadata, key by key:
- `{arch}.*`: from the model's config, so a config changed after loading is what gets written;
  keys of the source file the config does not describe are kept as they were.
- `general.*`: the source file's (`model.gguf_metadata`), `general.file_type` recomputed when
  the weights' types changed.
- `tokenizer.*`: from `tokenizer=` when given (a transformers fast tokenizer: byte-level BPE,
  SentencePiece-style BPE or Unigram; `gguf_io.tokenizer`), else the source file's, typed as llama.cpp's vocabulary
  loader reads them.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_VERSION, GGMLQuantizationType, GGUFValueType, GGUFWriter, Keys
from gguf.gguf_writer import GGUFValue

from ..archs import export
from ..archs.export import ExportError, ExportTensor
from ..ggml.types import ggml_type
from .files import check_destination, move_into_place, partial_path
from .tokenizer import tokenizer_metadata

__all__ = ["save_gguf", "ExportError"]

logger = logging.getLogger("gguf_quant")

# Keys the writer owns: the architecture is the constructor's, the alignment its default (a
# copied alignment would not match the data it lays out), split.* describes shards we do not write,
# tokenizer.* is written from its own source (`source_tokenizer` or a tokenizer).
_NOT_COPIED = {Keys.General.ARCHITECTURE, Keys.General.ALIGNMENT}
_NOT_COPIED_PREFIXES = ("split.", "tokenizer.")
# Tokenizer keys whose element type `plain_value` would not guess (llama.cpp checks it).
_TOKENIZER_TYPES = {Keys.Tokenizer.PRECOMPILED_CHARSMAP: GGUFValueType.UINT8}


def save_gguf(model, path, tokenizer=None, *, overwrite: bool = False, tokenizer_pre: str | None = None) -> Path:
    """Write `model` (loaded by this plugin, or any supported architecture with packed or float
    weights) as a GGUF file llama.cpp runs; returns the path.

    `tokenizer`: a transformers tokenizer whose vocabulary to write (needed for a model that did
    not come from a GGUF file); `tokenizer_pre`: llama.cpp's pre-tokenizer name for a byte-level
    BPE tokenizer, when it cannot be told from the tokenizer. An existing file is replaced only with `overwrite=True`, and only
    once the new one is complete.
    """
    path = check_destination(path, overwrite, "save_gguf")
    arch = export.gguf_arch(model.config)
    tensors = export.export_tensors(model, arch)
    meta = model_metadata(model, arch, tensors, tokenizer, tokenizer_pre)
    _write(path, arch, meta, tensors, overwrite)
    logger.info(f"gguf_quant: wrote {path} ({len(tensors)} tensors, {sum(t.nbytes for t in tensors) / 2**20:.1f} MiB)")
    return path


def _write(path: Path, arch: str, meta: dict[str, GGUFValue], tensors: list[ExportTensor], overwrite: bool) -> None:
    """Stream the file into a temporary name beside `path`, then move it into place."""
    partial = partial_path(path)
    w = GGUFWriter(partial, arch)
    try:
        for key, v in meta.items():
            w.add_key_value(key, v.value, v.type, v.sub_type)
        for t in tensors:
            shape, dtype = _array_layout(t)
            w.add_tensor_info(t.name, shape, dtype, t.nbytes, raw_dtype=t.qtype)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        for t in tensors:
            data = t.data()
            if data.nbytes != t.nbytes:
                raise ExportError(f"save_gguf: {t.name}: {data.nbytes} bytes of data for a {t.qtype.name} tensor of shape {t.shape}")
            w.write_tensor_data(data)
        w.close()
        move_into_place(partial, path, overwrite, "save_gguf")
    finally:
        w.close()  # a no-op once closed
        partial.unlink(missing_ok=True)


def _array_layout(t: ExportTensor) -> tuple[tuple[int, ...], type]:
    """The shape and dtype of the array `t.data()` gives, as GGUFWriter's tensor table takes them:
    elements for F32/F16, bytes (rows of blocks) for block types and BF16."""
    if t.qtype == GGMLQuantizationType.F32:
        return t.shape, np.float32
    if t.qtype == GGMLQuantizationType.F16:
        return t.shape, np.float16
    return (*t.shape[:-1], ggml_type(int(t.qtype)).row_bytes(t.shape[-1])), np.uint8


# --- metadata --------------------------------------------------------------------------------


def model_metadata(model, arch: str, tensors: list[ExportTensor], tokenizer=None, tokenizer_pre=None) -> dict[str, GGUFValue]:
    """Every key/value of the file except `general.architecture` (the writer's own)."""
    source: dict = getattr(model, "gguf_metadata", None) or {}
    meta = copied_metadata(source, {k for k in export.owned_keys(arch) if k.startswith(f"{arch}.")})
    if not source:
        name = getattr(model.config, "name_or_path", "") or ""
        if name:
            meta[Keys.General.NAME] = GGUFValue(Path(name).name, GGUFValueType.STRING)
    meta.update(export.arch_metadata(model.config, arch))
    _set_file_type(meta, model, source, tensors)

    n_vocab = _vocab_rows(tensors)
    if tokenizer is not None:
        meta.update(tokenizer_metadata(tokenizer, n_vocab, tokenizer_pre))
    elif any(k.startswith("tokenizer.") for k in source):
        meta.update(source_tokenizer(source, n_vocab))
    else:
        logger.warning("save_gguf: no tokenizer metadata (the model has no gguf_metadata); pass tokenizer= so llama.cpp can tokenize")
    return meta


def copied_metadata(source: dict, skip: set[str]) -> dict[str, GGUFValue]:
    """The source file's key/values a new file keeps, typed as llama.cpp reads them: all but the
    writer's own, the shard and tokenizer keys (written apart) and the keys in `skip`."""
    meta: dict[str, GGUFValue] = {}
    for key, value in source.items():
        if key in _NOT_COPIED or key in skip or key.startswith(_NOT_COPIED_PREFIXES):
            continue
        if value in ([], ()):  # GGUF has no empty arrays
            continue
        meta[key] = plain_value(value)
    return meta


def _set_file_type(meta: dict, model, source: dict, tensors: list[ExportTensor]) -> None:
    """Keep the source file's `general.file_type` (a mix name like Q4_K_M that the tensors alone
    do not tell) while the weights keep the types they were loaded with; otherwise recompute it."""
    if not (Keys.General.FILE_TYPE in source and _types_unchanged(getattr(model, "gguf_report", None), tensors)):
        meta.pop(Keys.General.FILE_TYPE, None)
        ftype = export.file_type(tensors)
        if ftype is not None:
            meta[Keys.General.FILE_TYPE] = GGUFValue(ftype, GGUFValueType.UINT32)
    if any(ggml_type(int(t.qtype)).quantized for t in tensors):
        meta.setdefault(Keys.General.QUANTIZATION_VERSION, GGUFValue(GGML_QUANT_VERSION, GGUFValueType.UINT32))


def _types_unchanged(report, tensors: list[ExportTensor]) -> bool:
    """Whether the block types written are those the loader kept packed, none unpacked."""
    if report is None or report.unpacked:
        return False
    written = {t.qtype.name for t in tensors if ggml_type(int(t.qtype)).quantized}
    return written == set(report.packed.values())


def _vocab_rows(tensors: list[ExportTensor]) -> int | None:
    for t in tensors:
        if t.name == "token_embd.weight":
            return t.shape[0]
    return None


def source_tokenizer(source: dict, n_vocab: int | None = None) -> dict[str, GGUFValue]:
    """The source file's tokenizer keys, typed for llama.cpp (token types int32, scores
    float32, ids uint32, flags bool)."""
    tokens = source.get(Keys.Tokenizer.LIST)
    if n_vocab is not None and isinstance(tokens, list) and len(tokens) != n_vocab:
        raise ExportError(
            f"save_gguf: the source tokenizer has {len(tokens)} tokens but the embedding {n_vocab} rows; "
            "pass tokenizer= to write a vocabulary that fits"
        )
    out = {}
    for key, value in source.items():
        if not key.startswith("tokenizer.") or value in ([], ()):
            continue
        v = plain_value(value)
        if key in _TOKENIZER_TYPES:
            v = GGUFValue(v.value, GGUFValueType.ARRAY, _TOKENIZER_TYPES[key])
        out[key] = v
    return out


def plain_value(value: Any) -> GGUFValue:
    """A metadata value read back without its GGUF type, typed the way llama.cpp's loader
    expects keys of its kind: counts and ids uint32, reals float32, int arrays int32 (as
    gguf-py writes them)."""
    if isinstance(value, bool):
        return GGUFValue(value, GGUFValueType.BOOL)
    if isinstance(value, int):
        if 0 <= value < 2**32:
            return GGUFValue(value, GGUFValueType.UINT32)
        return GGUFValue(value, GGUFValueType.INT64 if value < 0 else GGUFValueType.UINT64)
    if isinstance(value, float):
        return GGUFValue(value, GGUFValueType.FLOAT32)
    if isinstance(value, str):
        return GGUFValue(value, GGUFValueType.STRING)
    if isinstance(value, (list, tuple)) and value:
        first = value[0]
        sub = (
            GGUFValueType.BOOL if isinstance(first, bool)
            else GGUFValueType.INT32 if isinstance(first, int)
            else GGUFValueType.FLOAT32 if isinstance(first, float)
            else GGUFValueType.STRING
        )
        return GGUFValue(list(value), GGUFValueType.ARRAY, sub)
    raise ExportError(f"save_gguf: metadata value {value!r} has no GGUF type")
