"""`tokenizer.*` keys from a transformers fast tokenizer, for `save_gguf(tokenizer=...)`.

Three kinds of fast tokenizer have a llama.cpp vocabulary (llama-vocab.cpp) that tokenizes as
they do: byte-level BPE (GPT-2 style) is "gpt2", the same merges after a named pre-tokenizer;
SentencePiece-style BPE (spaces as ▁, byte fallback) is "llama", which joins pieces by score;
Unigram is "t5", the same Viterbi search over piece scores ("llama" is greedy, so it would only
approximate a Unigram model's segmentation). Key layout: ggml's docs/gguf.md, "Tokenizer".
"""
from __future__ import annotations

import base64
import json
import logging
import re
from dataclasses import dataclass

from gguf import GGUFValueType, Keys, TokenType
from gguf.gguf_writer import GGUFValue

from ..archs.export import ExportError

__all__ = ["tokenizer_metadata", "bpe_pre_tokenizer"]

logger = logging.getLogger("gguf_quant")

# llama.cpp knows a BPE vocabulary's pre-tokenizer by name (llama-vocab.cpp); the name stands for
# the splitting regexes it runs. We tell it from the tokenizer's own pre-tokenizer (tokenizer.json,
# `pre_tokenizer`), so a tokenizer is named after what it does. The Split regexes are the ones
# Llama 3's and Qwen2's published tokenizer.json files carry.
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_SPACE = "\u2581"  # "▁": SentencePiece's written space, which llama.cpp's "llama" and "t5" tokenizers use too
_BYTE_PIECE = re.compile(r"<0x[0-9A-F]{2}>")  # a byte-fallback piece, as llama.cpp looks bytes up


def _steps(component: dict | None) -> list[dict]:
    """A tokenizer.json normalizer's or pre-tokenizer's steps, a Sequence unpacked."""
    if not component:
        return []
    if component.get("type") == "Sequence":
        return component.get("pretokenizers") or component.get("normalizers") or []
    return [component]


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


def _vocab_kind(model: dict, decoder: dict) -> str:
    """llama.cpp's vocabulary type (`tokenizer.ggml.model`) for a tokenizer.json `model` and
    `decoder`; raises ExportError for a model none of them can run."""
    kind, byte_fallback = model.get("type"), bool(model.get("byte_fallback"))
    if kind == "BPE" and not byte_fallback and decoder.get("type") == "ByteLevel":
        return "gpt2"
    if kind == "BPE" and byte_fallback:
        options = [o for o in ("dropout", "continuing_subword_prefix", "end_of_word_suffix", "ignore_merges") if model.get(o)]
        if options:
            raise ExportError(f"save_gguf: llama.cpp's SentencePiece tokenizer has nothing like this BPE model's {', '.join(options)}")
        return "llama"
    if kind == "Unigram" and not byte_fallback:
        if model.get("unk_id") is None:
            raise ExportError("save_gguf: llama.cpp's Unigram tokenizer needs an unknown token; this Unigram model has none")
        return "t5"
    raise ExportError(
        "save_gguf: only byte-level BPE (GPT-2 style) and SentencePiece-style (BPE with byte_fallback, or Unigram "
        f"without) tokenizers can be written from a transformers tokenizer (this one: model {kind}, byte_fallback "
        f"{byte_fallback}, decoder {decoder.get('type')}); a model loaded from a GGUF file keeps its file's "
        "tokenizer without tokenizer="
    )


def _vocab(tokenizer, n_vocab: int, unknown: int | None = None, byte_pieces: bool = False) -> tuple[list[str], list[int]]:
    """Tokens in id order and their llama.cpp types: added special tokens are control tokens,
    other added tokens user-defined, ids the tokenizer lacks padding (`[PAD<id>]`, unused); for a
    SentencePiece vocabulary also `unknown` (an id) the unknown token and, with `byte_pieces`,
    `<0xXX>` byte tokens (llama.cpp decodes those to their byte)."""
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
            types.append(
                TokenType.UNKNOWN if i == unknown
                else TokenType.BYTE if byte_pieces and _BYTE_PIECE.fullmatch(by_id[i])
                else TokenType.NORMAL
            )
    return tokens, [int(t) for t in types]


def _merge_pairs(model: dict) -> list[tuple[str, str]]:
    """A BPE model's merges as (left, right); tokenizer.json holds `"left right"` or pairs."""
    pairs = []
    for m in model.get("merges") or []:
        pair = m.split(" ") if isinstance(m, str) else m
        if len(pair) != 2:
            raise ExportError(f"save_gguf: cannot read the tokenizer's merge {m!r}")
        pairs.append((pair[0], pair[1]))
    return pairs


def _merges(pairs: list[tuple[str, str]]) -> list[str]:
    """Merges as llama.cpp's "gpt2" vocabulary stores them, `"left right"`. Byte-level tokens
    never hold a space (it is `Ġ`), so the join is exact."""
    for pair in pairs:
        if any(" " in part for part in pair):
            raise ExportError(f"save_gguf: merge {list(pair)!r} holds a space, which llama.cpp's merge list cannot")
    return [f"{left} {right}" for left, right in pairs]


def _adds_special(tokenizer) -> tuple[bool, bool]:
    """Whether encoding prepends BOS / appends EOS, from what the tokenizer does."""
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    full = tokenizer("a")["input_ids"]
    if len(full) == len(plain):
        return False, False
    bos = tokenizer.bos_token_id is not None and full[0] == tokenizer.bos_token_id and plain[:1] != full[:1]
    eos = tokenizer.eos_token_id is not None and full[-1] == tokenizer.eos_token_id and plain[-1:] != full[-1:]
    return bos, eos


def _strings(values: list[str]) -> GGUFValue:
    return GGUFValue(values, GGUFValueType.ARRAY, GGUFValueType.STRING)


def tokenizer_metadata(tokenizer, n_vocab: int | None = None, pre: str | None = None) -> dict[str, GGUFValue]:
    """`tokenizer.*` keys for a transformers fast tokenizer, in the layout of the llama.cpp
    vocabulary that tokenizes like it (ggml docs/gguf.md, "Tokenizer"): byte-level BPE as "gpt2"
    (`pre`: llama.cpp's pre-tokenizer name, else told from the tokenizer), SentencePiece-style
    BPE as "llama", Unigram as "t5". Raises ExportError for what llama.cpp cannot reproduce."""
    backend = _backend_json(tokenizer)
    model = backend.get("model") or {}
    kind = _vocab_kind(model, backend.get("decoder") or {})
    n_vocab = n_vocab or max(tokenizer.get_vocab().values()) + 1
    unk_id = tokenizer.unk_token_id
    if unk_id is None and kind == "t5":
        unk_id = model["unk_id"]  # llama.cpp's Unigram tokenizer needs it; the model names its own
    if kind == "gpt2":
        meta = _gpt2_keys(tokenizer, backend, n_vocab, pre)
    else:
        meta = _sentencepiece_keys(tokenizer, backend, kind, n_vocab, unk_id)
    add_bos, add_eos = _adds_special(tokenizer)
    meta[Keys.Tokenizer.ADD_BOS] = GGUFValue(add_bos, GGUFValueType.BOOL)
    meta[Keys.Tokenizer.ADD_EOS] = GGUFValue(add_eos, GGUFValueType.BOOL)
    for key, tid in (
        (Keys.Tokenizer.BOS_ID, tokenizer.bos_token_id),
        (Keys.Tokenizer.EOS_ID, tokenizer.eos_token_id),
        (Keys.Tokenizer.UNK_ID, unk_id),
        (Keys.Tokenizer.PAD_ID, tokenizer.pad_token_id),
    ):
        if tid is not None:
            meta[key] = GGUFValue(int(tid), GGUFValueType.UINT32)
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, str) and template:
        meta[Keys.Tokenizer.CHAT_TEMPLATE] = GGUFValue(template, GGUFValueType.STRING)
    return meta


def _gpt2_keys(tokenizer, backend: dict, n_vocab: int, pre: str | None) -> dict[str, GGUFValue]:
    """llama.cpp's "gpt2" vocabulary: tokens, types, merges and the pre-tokenizer's name."""
    tokens, types = _vocab(tokenizer, n_vocab)
    clean = bool(getattr(tokenizer, "clean_up_tokenization_spaces", False))
    if any(step.get("add_prefix_space") for step in _steps(backend.get("pre_tokenizer")) if step.get("type") == "ByteLevel"):
        logger.warning("save_gguf: this tokenizer prepends a space (ByteLevel add_prefix_space); llama.cpp's BPE tokenizer does not")
    return {
        Keys.Tokenizer.MODEL: GGUFValue("gpt2", GGUFValueType.STRING),
        Keys.Tokenizer.PRE: GGUFValue(pre or bpe_pre_tokenizer(backend, clean), GGUFValueType.STRING),
        Keys.Tokenizer.LIST: _strings(tokens),
        Keys.Tokenizer.TOKEN_TYPE: GGUFValue(types, GGUFValueType.ARRAY, GGUFValueType.INT32),
        Keys.Tokenizer.MERGES: _strings(_merges(_merge_pairs(backend["model"]))),
        # llama.cpp's BPE tokenizer never prepends a space; say so rather than leave it implied.
        Keys.Tokenizer.ADD_PREFIX: GGUFValue(False, GGUFValueType.BOOL),
    }


def _sentencepiece_keys(tokenizer, backend: dict, kind: str, n_vocab: int, unk_id: int | None) -> dict[str, GGUFValue]:
    """llama.cpp's "llama" (SentencePiece BPE) or "t5" (Unigram) vocabulary: tokens, scores,
    types, and what is done to spaces."""
    model = backend["model"]
    text = _spm_text(backend, kind)
    tokens, types = _vocab(tokenizer, n_vocab, unknown=unk_id, byte_pieces=kind == "llama")
    if text.splits_words:
        _check_within_words(tokens, types)
    if kind == "llama":
        _check_byte_pieces(tokens)
        scores = _bpe_scores(_merge_pairs(model), tokens, types)
    else:
        pieces = model["vocab"]  # [piece, log probability] by id
        scores = [float(pieces[i][1]) if i < len(pieces) else 0.0 for i in range(n_vocab)]
    meta = {
        Keys.Tokenizer.MODEL: GGUFValue(kind, GGUFValueType.STRING),
        Keys.Tokenizer.LIST: _strings(tokens),
        Keys.Tokenizer.SCORES: GGUFValue(scores, GGUFValueType.ARRAY, GGUFValueType.FLOAT32),
        Keys.Tokenizer.TOKEN_TYPE: GGUFValue(types, GGUFValueType.ARRAY, GGUFValueType.INT32),
        Keys.Tokenizer.ADD_PREFIX: GGUFValue(text.add_space_prefix, GGUFValueType.BOOL),
    }
    if text.charsmap is not None:
        meta[Keys.Tokenizer.PRECOMPILED_CHARSMAP] = GGUFValue(list(text.charsmap), GGUFValueType.ARRAY, GGUFValueType.UINT8)
    return meta


@dataclass(frozen=True)
class _SpmText:
    """What a SentencePiece-style tokenizer does to text before its model, in llama.cpp's terms."""

    add_space_prefix: bool  # a ▁ before the text, and after each special token
    splits_words: bool  # the model sees one word (▁ and what follows) at a time
    charsmap: bytes | None  # SentencePiece's normalization table


def _spm_text(backend: dict, kind: str) -> _SpmText:
    """Spaces become ▁ (llama.cpp always does that), a ▁ may be put before the text, and a "t5"
    vocabulary may normalize with a SentencePiece charsmap; llama.cpp does nothing else, so a
    tokenizer doing more is refused."""
    escaped = prefix = words = False
    charsmap = None
    for step in _steps(backend.get("normalizer")):
        if step.get("type") == "Replace" and step.get("pattern") == {"String": " "} and step.get("content") == _SPACE:
            escaped = True
        elif step.get("type") == "Prepend" and step.get("prepend") == _SPACE:
            # before every text between added tokens, as llama.cpp's add_space_prefix (its Unigram
            # tokenizer puts it before the first character that is not a space: none in "  ")
            prefix = True
        elif step.get("type") == "Precompiled" and kind == "t5":
            charsmap = base64.b64decode(step["precompiled_charsmap"])
        else:
            raise _not_sentencepiece("normalizer", step, kind)
    for step in _steps(backend.get("pre_tokenizer")):
        if step.get("type") == "Metaspace" and step.get("replacement") == _SPACE:
            escaped, words = True, step.get("split", True)
            prefix = _metaspace_prefix(step) or prefix
        elif step.get("type") == "Split" and escaped and step.get("pattern") == {"String": " "}:
            continue  # splits at spaces the normalizer has replaced already: a no-op
        else:
            raise _not_sentencepiece("pre-tokenizer", step, kind)
    if not escaped:
        raise ExportError(f"save_gguf: this tokenizer keeps spaces as they are; llama.cpp's SentencePiece tokenizers write them {_SPACE}")
    return _SpmText(prefix, words, charsmap)


def _metaspace_prefix(step: dict) -> bool:
    """Whether a Metaspace pre-tokenizer puts a ▁ before the text; warns that it does not before
    text starting with a space, nor ("first") after a special token, where llama.cpp does."""
    scheme = step.get("prepend_scheme") or ("always" if step.get("add_prefix_space", True) else "never")
    if scheme == "never":
        return False
    after_special = ", nor after a special token" if scheme == "first" else ""
    logger.warning(
        f"save_gguf: this tokenizer puts no {_SPACE} before text that starts with a space{after_special} "
        f"(Metaspace prepend_scheme '{scheme}'); llama.cpp does, so such text tokenizes differently there"
    )
    return True


def _not_sentencepiece(what: str, step: dict, kind: str) -> ExportError:
    return ExportError(
        f"save_gguf: llama.cpp's \"{kind}\" tokenizer has no counterpart for this tokenizer's {what} step "
        f"{json.dumps(step)[:300]}"
    )


def _check_within_words(tokens: list[str], types: list[int]) -> None:
    """A tokenizer that splits text into words never uses a token spanning two; llama.cpp, which
    does not split, would."""
    spanning = [t for t, k in zip(tokens, types) if k == TokenType.NORMAL and _SPACE in t[1:]]
    if spanning:
        raise ExportError(
            f"save_gguf: this tokenizer splits text into words, which llama.cpp does not, and has tokens spanning "
            f"words ({', '.join(map(repr, spanning[:3]))}) that llama.cpp would use"
        )


def _check_byte_pieces(tokens: list[str]) -> None:
    """llama.cpp falls back on `<0xXX>` for any character no token covers, and fails without it."""
    known = set(tokens)
    missing = [f"<0x{b:02X}>" for b in range(256) if f"<0x{b:02X}>" not in known]
    if missing:
        raise ExportError(f"save_gguf: this byte-fallback tokenizer lacks {len(missing)} byte tokens ({', '.join(missing[:3])}...), which llama.cpp needs")


def _bpe_scores(pairs: list[tuple[str, str]], tokens: list[str], types: list[int]) -> list[float]:
    """Scores under which llama.cpp's SentencePiece tokenizer joins pieces as this BPE model does.

    llama.cpp joins, again and again, the adjacent pair whose concatenation is a token of the
    highest score (leftmost on ties); BPE joins the adjacent pair of the lowest merge rank
    (leftmost on ties). Scoring each token -(rank of the first merge making it) has both pick the
    same pair at every step provided (a) every pair llama.cpp may join is a merge, and (b) the
    merges making one token have consecutive ranks, so no other merge ranks between them.
    Tokenizers converted from SentencePiece models (a merge for every split of every piece, in
    piece order) have both; others are refused. Tokens no merge makes score below every merge.
    """
    first: dict[str, int] = {}
    previous = None
    for rank, (left, right) in enumerate(pairs):
        token = left + right
        if token != previous and token in first:
            raise ExportError(
                f"save_gguf: this tokenizer's merges making {token!r} are not consecutive (ranks {first[token]} and {rank}); "
                "llama.cpp scores tokens, not merges, so it cannot keep their order"
            )
        first.setdefault(token, rank)
        previous = token
    _check_merges_complete(set(pairs), tokens, types)
    floor = -float(len(pairs))
    return [-float(first[t]) if t in first else floor for t in tokens]


def _check_merges_complete(pairs: set[tuple[str, str]], tokens: list[str], types: list[int]) -> None:
    """Every split of a token into two pieces llama.cpp's tokenizer can hold (tokens, or single
    characters it has not joined yet) must be a merge, or llama.cpp joins what BPE never does.
    Added and other special tokens are split off before either tokenizer sees the text."""
    known = set(tokens)
    for token, token_type in zip(tokens, types):
        if token_type != TokenType.NORMAL:
            continue
        for i in range(1, len(token)):
            left, right = token[:i], token[i:]
            if (left in known or len(left) == 1) and (right in known or len(right) == 1) and (left, right) not in pairs:
                raise ExportError(
                    f"save_gguf: llama.cpp's SentencePiece tokenizer would join {left!r} and {right!r} into {token!r}, "
                    "which this tokenizer's merges never do"
                )
