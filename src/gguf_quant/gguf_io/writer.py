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
- `tokenizer.*`: from `tokenizer=` when given (a transformers byte-level BPE tokenizer), else
  the source file's, typed as llama.cpp's vocabulary loader reads them.
"""
from __future__ import annotations

import json
import logging
import os
import uuid
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_VERSION, GGMLQuantizationType, GGUFValueType, GGUFWriter, Keys, TokenType
from gguf.gguf_writer import GGUFValue

from ..archs import export
from ..archs.export import ExportError, ExportTensor
from ..ggml.types import ggml_type

__all__ = ["save_gguf", "tokenizer_metadata", "bpe_pre_tokenizer", "ExportError"]

logger = logging.getLogger("gguf_quant")

# Keys the writer owns: the architecture is the constructor's, the alignment its default (a
# copied alignment would not match the data it lays out), split.* describes shards we do not write.
_NOT_COPIED = {Keys.General.ARCHITECTURE, Keys.General.ALIGNMENT}
_NOT_COPIED_PREFIXES = ("split.",)
# Tokenizer keys whose element type `plain_value` would not guess (llama.cpp checks it).
_TOKENIZER_TYPES = {Keys.Tokenizer.PRECOMPILED_CHARSMAP: GGUFValueType.UINT8}


def save_gguf(model, path, tokenizer=None, *, overwrite: bool = False, tokenizer_pre: str | None = None) -> Path:
    """Write `model` (loaded by this plugin, or any supported architecture with packed or float
    weights) as a GGUF file llama.cpp runs; returns the path.

    `tokenizer`: a transformers tokenizer whose vocabulary to write (needed for a model that did
    not come from a GGUF file); `tokenizer_pre`: llama.cpp's pre-tokenizer name, when it cannot
    be told from the tokenizer. An existing file is replaced only with `overwrite=True`, and only
    once the new one is complete.
    """
    path = _destination(path, overwrite)
    arch = export.gguf_arch(model.config)
    tensors = export.export_tensors(model, arch)
    meta = model_metadata(model, arch, tensors, tokenizer, tokenizer_pre)
    _write(path, arch, meta, tensors, overwrite)
    logger.info(f"gguf_quant: wrote {path} ({len(tensors)} tensors, {sum(t.nbytes for t in tensors) / 2**20:.1f} MiB)")
    return path


# --- destination -----------------------------------------------------------------------------


def _destination(path, overwrite: bool) -> Path:
    path = Path(path)
    if not path.parent.is_dir():
        raise FileNotFoundError(f"save_gguf: cannot write {path}: the folder {path.parent} does not exist")
    if path.is_dir():
        raise IsADirectoryError(f"save_gguf: {path} is a folder; give a file name ending in .gguf")
    if path.exists() and not overwrite:
        raise FileExistsError(f"save_gguf: {path} already exists; pass overwrite=True to replace it")
    return path


def _write(path: Path, arch: str, meta: dict[str, GGUFValue], tensors: list[ExportTensor], overwrite: bool) -> None:
    """Stream the file into a temporary name beside `path`, then move it into place."""
    partial = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.partial")
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
        _move_into_place(partial, path, overwrite)
    finally:
        w.close()  # a no-op once closed
        partial.unlink(missing_ok=True)


def _move_into_place(partial: Path, path: Path, overwrite: bool) -> None:
    if overwrite:
        os.replace(partial, path)
        return
    try:
        os.link(partial, path)  # fails if a file appeared meanwhile: nothing is clobbered
    except FileExistsError:
        raise FileExistsError(f"save_gguf: {path} appeared while writing; pass overwrite=True to replace it") from None
    except OSError:  # a file system without hard links
        if path.exists():
            raise FileExistsError(f"save_gguf: {path} already exists; pass overwrite=True to replace it") from None
        os.replace(partial, path)


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
    meta: dict[str, GGUFValue] = {}
    owned = export.owned_keys(arch)
    for key, value in source.items():
        if key in _NOT_COPIED or key.startswith(_NOT_COPIED_PREFIXES) or key.startswith("tokenizer."):
            continue
        if (key.startswith(f"{arch}.") and key in owned) or value in ([], ()):  # GGUF has no empty arrays
            continue
        meta[key] = plain_value(value)
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


# --- tokenizer from transformers -------------------------------------------------------------

# llama.cpp knows a BPE vocabulary's pre-tokenizer by name (llama-vocab.cpp); the name stands for
# the splitting regexes it runs. We tell it from the tokenizer's own pre-tokenizer (tokenizer.json,
# `pre_tokenizer`), so a tokenizer is named after what it does. The Split regexes are the ones
# Llama 3's and Qwen2's published tokenizer.json files carry.
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"


def _steps(pre: dict | None) -> list[dict]:
    if not pre:
        return []
    return pre["pretokenizers"] if pre.get("type") == "Sequence" else [pre]


def bpe_pre_tokenizer(backend: dict, clean_spaces: bool) -> str:
    """llama.cpp's pre-tokenizer name for a byte-level BPE tokenizer (`backend`: its
    tokenizer.json as a dict); raises ExportError for one it does not recognise."""
    steps = _steps(backend.get("pre_tokenizer"))
    kinds = [s.get("type") for s in steps]
    if kinds == ["ByteLevel"] and steps[0].get("use_regex", True):
        return "gpt-2"  # GPT-2's regex
    if kinds == ["Digits", "ByteLevel"] and steps[0].get("individual_digits") and steps[1].get("use_regex", True):
        # GPT-2's regex after splitting every digit: llama.cpp's "smollm" and "starcoder" run the
        # same regexes and differ only in cleaning up spaces when detokenizing.
        return "starcoder" if clean_spaces else "smollm"
    if kinds == ["Split", "ByteLevel"] and not steps[1].get("use_regex", True):
        regex = (steps[0].get("pattern") or {}).get("Regex")
        if regex == _LLAMA3_SPLIT:
            return "llama-bpe"
        if regex == _QWEN2_SPLIT:
            return "qwen2"
    raise ExportError(
        "save_gguf: cannot tell llama.cpp's pre-tokenizer for this tokenizer (pre_tokenizer "
        f"{json.dumps(backend.get('pre_tokenizer'))[:300]}); pass tokenizer_pre='<name>' (a name from llama.cpp's "
        "llama-vocab.cpp, e.g. 'gpt-2', 'smollm', 'llama-bpe', 'qwen2')"
    )


def _backend_json(tokenizer) -> dict:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise ExportError(f"save_gguf: {type(tokenizer).__name__} is not a fast (tokenizers) tokenizer; load it with use_fast=True")
    return json.loads(backend.to_str())


def _bpe_vocab(tokenizer, n_vocab: int) -> tuple[list[str], list[int]]:
    """Tokens in id order and their llama.cpp types: added special tokens are control tokens,
    other added tokens user-defined, ids the tokenizer lacks padding (`[PAD<id>]`, unused)."""
    by_id = {i: tok for tok, i in tokenizer.get_vocab().items()}
    if max(by_id) >= n_vocab:
        raise ExportError(f"save_gguf: the tokenizer has token id {max(by_id)}, but the embedding only {n_vocab} rows")
    added = tokenizer.added_tokens_decoder
    tokens, types = [], []
    for i in range(n_vocab):
        if i not in by_id:
            tokens.append(f"[PAD{i}]")
            types.append(TokenType.UNUSED)
        elif i in added:
            tokens.append(added[i].content)
            types.append(TokenType.CONTROL if added[i].special else TokenType.USER_DEFINED)
        else:
            tokens.append(by_id[i])
            types.append(TokenType.NORMAL)
    return tokens, [int(t) for t in types]


def _merges(model: dict) -> list[str]:
    """BPE merges as llama.cpp stores them, `"left right"`; tokenizer.json holds either that or
    `[left, right]` pairs. Byte-level tokens never hold a space (it is `Ġ`), so the join is exact."""
    merges = model.get("merges") or []
    out = []
    for m in merges:
        if isinstance(m, str):
            out.append(m)
            continue
        if any(" " in part for part in m):
            raise ExportError(f"save_gguf: merge {m!r} holds a space, which llama.cpp's merge list cannot")
        out.append(" ".join(m))
    return out


def _adds_special(tokenizer) -> tuple[bool, bool]:
    """Whether encoding prepends BOS / appends EOS, from what the tokenizer does."""
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    full = tokenizer("a")["input_ids"]
    if len(full) == len(plain):
        return False, False
    bos = tokenizer.bos_token_id is not None and full[0] == tokenizer.bos_token_id and plain[:1] != full[:1]
    eos = tokenizer.eos_token_id is not None and full[-1] == tokenizer.eos_token_id and plain[-1:] != full[-1:]
    return bos, eos


def tokenizer_metadata(tokenizer, n_vocab: int | None = None, pre: str | None = None) -> dict[str, GGUFValue]:
    """`tokenizer.*` keys for a transformers byte-level BPE (GPT-2 style) tokenizer, in the
    layout of llama.cpp's "gpt2" vocabulary (ggml docs/gguf.md, "Tokenizer")."""
    backend = _backend_json(tokenizer)
    model = backend.get("model") or {}
    decoder = backend.get("decoder") or {}
    if model.get("type") != "BPE" or model.get("byte_fallback") or decoder.get("type") != "ByteLevel":
        raise ExportError(
            "save_gguf: only byte-level BPE (GPT-2 style) tokenizers can be written from a transformers "
            f"tokenizer (this one: model {model.get('type')}, decoder {decoder.get('type')}); "
            "a model loaded from a GGUF file keeps its file's tokenizer without tokenizer="
        )
    n_vocab = n_vocab or max(tokenizer.get_vocab().values()) + 1
    tokens, types = _bpe_vocab(tokenizer, n_vocab)
    clean = bool(getattr(tokenizer, "clean_up_tokenization_spaces", False))
    add_bos, add_eos = _adds_special(tokenizer)
    strings = lambda v: GGUFValue(v, GGUFValueType.ARRAY, GGUFValueType.STRING)  # noqa: E731
    meta = {
        Keys.Tokenizer.MODEL: GGUFValue("gpt2", GGUFValueType.STRING),
        Keys.Tokenizer.PRE: GGUFValue(pre or bpe_pre_tokenizer(backend, clean), GGUFValueType.STRING),
        Keys.Tokenizer.LIST: strings(tokens),
        Keys.Tokenizer.TOKEN_TYPE: GGUFValue(types, GGUFValueType.ARRAY, GGUFValueType.INT32),
        Keys.Tokenizer.MERGES: strings(_merges(model)),
        Keys.Tokenizer.ADD_BOS: GGUFValue(add_bos, GGUFValueType.BOOL),
        Keys.Tokenizer.ADD_EOS: GGUFValue(add_eos, GGUFValueType.BOOL),
        # llama.cpp's BPE tokenizer never prepends a space; say so rather than leave it implied.
        Keys.Tokenizer.ADD_PREFIX: GGUFValue(False, GGUFValueType.BOOL),
    }
    if any(step.get("add_prefix_space") for step in _steps(backend.get("pre_tokenizer")) if step.get("type") == "ByteLevel"):
        logger.warning("save_gguf: this tokenizer prepends a space (ByteLevel add_prefix_space); llama.cpp's BPE tokenizer does not")
    for key, tid in (
        (Keys.Tokenizer.BOS_ID, tokenizer.bos_token_id),
        (Keys.Tokenizer.EOS_ID, tokenizer.eos_token_id),
        (Keys.Tokenizer.UNK_ID, tokenizer.unk_token_id),
        (Keys.Tokenizer.PAD_ID, tokenizer.pad_token_id),
    ):
        if tid is not None:
            meta[key] = GGUFValue(int(tid), GGUFValueType.UINT32)
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, str) and template:
        meta[Keys.Tokenizer.CHAT_TEMPLATE] = GGUFValue(template, GGUFValueType.STRING)
    return meta
