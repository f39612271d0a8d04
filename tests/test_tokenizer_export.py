"""SentencePiece-style tokenizers written by `save_gguf(..., tokenizer=)`, checked against llama.cpp.

- Gemma 3's real vocabulary (262k pieces, byte fallback, user-defined and control tokens),
  as transformers builds it from the GGUF file, written as llama.cpp's "llama" vocabulary:
  llama.cpp tokenizes tricky and random text exactly as transformers does and as it does with
  the original file, and the written keys are the original's where they can be;
- a Llama-2-style BPE (a ▁ before the text, `<s>` added), assembled the way transformers
  converts SentencePiece models, and a trained Unigram model ("t5" vocabulary) the same way;
- what llama.cpp cannot reproduce is refused with an error that names it.
"""
from __future__ import annotations

import copy
import json
import logging
import random

import numpy as np
import pytest
from gguf import TokenType

from gguf_quant import save_gguf
from gguf_quant.archs.export import ExportError
from gguf_quant.gguf_io.reader import read_gguf

from llamacpp_ref import PROMPTS

llama_cpp = pytest.importorskip("llama_cpp")

TRICKY = [
    "Hello world",
    " leading space",
    "   three leading spaces",
    "a  b   c    d",
    "trailing  ",
    " ",
    "line1\nline2\n\n\nline3\n",
    "\ttab\t\tx\r\n",
    "def f(x):\n    return x**2  # square",
    "12345 3.14159 1,000,000 0x1F",
    "éàü ß İ 日本語 Ωmega ﷽ e\u0301",
    "🙂 👩\u200d👩\u200d👧 🏳️\u200d🌈 𝔹 \U0001F9EC\U000E0001 \uFFFF \x00\x01",  # byte fallback
    "don't I'LL we've",
    "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n",
    "<bos>x<eos> [multimodal] <unused3>",
    "<table><tr><td>1</td></tr></table>",
]


def _random_texts(n: int, seed: int = 0) -> list[str]:
    """Text glued from pieces that stress joining order: words, space runs, digits, scripts."""
    pieces = ["the", "The", " ", "  ", "   ", "\n", "\t", "ing", "tion", "un", "re", "é", "ñ", "日本", "語", "🙂",
              "123", "4567", "8", ".", ",", "'s", "(", ")", "==", "->", "http://", "x_y", "Ω", "ß", "a", "I"]
    rng = random.Random(seed)
    return ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 14))) for _ in range(n)]


def _vocab_only(path):
    return llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)


def _ids(llm, text: str) -> list[int]:
    # special=True: llama.cpp splits off control tokens in the text, as transformers does
    return llm.tokenize(text.encode(), add_bos=False, special=True)


def _tiny_model(vocab_size: int):
    """A one-layer Gemma 3 with `vocab_size` rows: only the vocabulary matters here."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    config = Gemma3TextConfig(
        vocab_size=vocab_size, hidden_size=8, intermediate_size=16, num_hidden_layers=1, num_attention_heads=1,
        num_key_value_heads=1, head_dim=8, query_pre_attn_scalar=8, max_position_embeddings=64,
    )
    return Gemma3ForCausalLM(config)


def _export(tok, path):
    return save_gguf(_tiny_model(len(tok)), path, tokenizer=tok)


def _fast(inner, **special):
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=inner, clean_up_tokenization_spaces=False, **special)


# --- Gemma 3: a real SentencePiece vocabulary ----------------------------------------------------


@pytest.fixture(scope="module")
def gemma(gemma3_path, tmp_path_factory):
    """(original file, transformers' tokenizer built from it, our export of that tokenizer)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(gemma3_path.parent), gguf_file=gemma3_path.name)
    return gemma3_path, tok, _export(tok, tmp_path_factory.mktemp("gemma") / "tok.gguf")


@pytest.mark.slow
def test_gemma_tokenizes_like_transformers_and_the_original(gemma):
    source, tok, out = gemma
    ours, ref = _vocab_only(out), _vocab_only(source)
    for text in TRICKY + _random_texts(300):
        ids = _ids(ours, text)
        assert ids == tok.encode(text, add_special_tokens=False), text
        assert ids == _ids(ref, text), text
        assert ours.detokenize(ids) == ref.detokenize(ids), text
    assert ours.tokenize(b"hi") == ref.tokenize(b"hi") == tok.encode("hi")  # BOS added, by all three


@pytest.mark.slow
def test_gemma_text_with_written_spaces_follows_transformers(gemma):
    """The original file has 30 user-defined tokens of plain spaces ("  " ...), which llama.cpp
    matches before tokenizing; transformers reads them as "▁▁" ..., ordinary pieces. The export
    follows transformers, so text holding a literal ▁ tokenizes as there, not as the original."""
    source, tok, out = gemma
    text = "x ▁ ▁▁y"
    assert _ids(_vocab_only(out), text) == tok.encode(text, add_special_tokens=False) != _ids(_vocab_only(source), text)


@pytest.mark.slow
def test_gemma_keys_are_the_originals(gemma):
    source, _, out = gemma
    a, b = read_gguf(source).metadata, read_gguf(out).metadata
    for key in ("model", "bos_token_id", "eos_token_id", "unknown_token_id", "padding_token_id",
                "add_bos_token", "add_eos_token", "add_space_prefix"):
        assert b[f"tokenizer.ggml.{key}"] == a[f"tokenizer.ggml.{key}"], key
    tokens_a, tokens_b = a["tokenizer.ggml.tokens"], b["tokenizer.ggml.tokens"]
    types_a, types_b = np.array(a["tokenizer.ggml.token_type"]), np.array(b["tokenizer.ggml.token_type"])
    # The 30 space tokens (see above): "▁" for " ", ordinary instead of user-defined.
    spaces = [i for i, t in enumerate(tokens_a) if t.strip(" ") == "" and len(t) > 1]
    assert len(spaces) == 30
    assert tokens_b == [t.replace(" ", "▁") if i in spaces else t for i, t in enumerate(tokens_a)]
    assert (types_a[spaces] == TokenType.USER_DEFINED).all() and (types_b[spaces] == TokenType.NORMAL).all()
    types_b[spaces] = TokenType.USER_DEFINED
    assert (types_b == types_a).all()
    # Scores: not the same numbers (ours come from merge ranks), but the same order for every
    # piece a merge makes, which is all llama.cpp's tokenizer uses them for.
    scores_a, scores_b = np.array(a["tokenizer.ggml.scores"]), np.array(b["tokenizer.ggml.scores"])
    made = (types_a == TokenType.NORMAL) & (scores_b > scores_b.min())
    assert made.sum() > 230_000  # all but the single characters
    assert (np.argsort(-scores_a[made], kind="stable") == np.argsort(-scores_b[made], kind="stable")).all()


# --- Llama-2 style: ▁ before the text, <s> added -------------------------------------------------

_BYTES = [f"<0x{b:02X}>" for b in range(256)]


def _sentencepiece_bpe(normalizer, pre_tokenizer=None):
    """A Llama-2-layout BPE tokenizer (<unk> <s> </s>, 256 byte pieces, then pieces by score)
    with pieces learned on PROMPTS, its merges made as transformers makes them from a
    SentencePiece model (every split of every piece, by piece score)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
    from transformers.tokenization_utils_base import generate_merges

    learner = Tokenizer(models.BPE())
    learner.normalizer = normalizers.Replace(" ", "▁")
    learner.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="always", split=True)
    learner.train_from_iterator(PROMPTS * 4, trainers.BpeTrainer(vocab_size=400, show_progress=False))
    pieces = sorted(learner.get_vocab(), key=learner.get_vocab().get)
    vocab = {t: i for i, t in enumerate(["<unk>", "<s>", "</s>", *_BYTES, *(p for p in pieces if p not in _BYTES)])}
    scores = {t: -float(i) for t, i in vocab.items() if i >= 3 + 256}
    inner = Tokenizer(models.BPE(vocab, generate_merges(vocab, scores), unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    inner.normalizer = normalizer
    inner.pre_tokenizer = pre_tokenizer
    inner.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return _fast(inner, unk_token="<unk>", bos_token="<s>", eos_token="</s>")


def test_llama2_style_tokenizes_like_transformers(tmp_path):
    from tokenizers import normalizers

    # Llama-2's and Mistral's tokenizer.json: a ▁ before every text between special tokens
    tok = _sentencepiece_bpe(normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")]))
    out = _export(tok, tmp_path / "llama2.gguf")
    meta = read_gguf(out).metadata
    assert meta["tokenizer.ggml.model"] == "llama" and meta["tokenizer.ggml.add_space_prefix"] is True
    assert meta["tokenizer.ggml.add_bos_token"] is True and meta["tokenizer.ggml.add_eos_token"] is False
    assert meta["tokenizer.ggml.token_type"][3:259] == [TokenType.BYTE] * 256
    llm = _vocab_only(out)
    for text in TRICKY + [t.replace("<start_of_turn>", "</s>") for t in _random_texts(200)] + PROMPTS:
        assert _ids(llm, text) == tok.encode(text, add_special_tokens=False), text
    assert llm.tokenize(PROMPTS[0].encode()) == tok.encode(PROMPTS[0])


def test_metaspace_prefix_is_written_with_a_warning(tmp_path, caplog):
    """transformers' newer Llama layout: Metaspace puts a ▁ before text not starting with a
    space; llama.cpp puts one before any text, so only the former tokenize alike."""
    from tokenizers import pre_tokenizers

    tok = _sentencepiece_bpe(None, pre_tokenizers.Metaspace(prepend_scheme="first", split=False))
    with caplog.at_level(logging.WARNING, logger="gguf_quant"):
        out = _export(tok, tmp_path / "metaspace.gguf")
    assert "starts with a space, nor after a special token" in caplog.text
    llm = _vocab_only(out)
    for text in [t for t in TRICKY + PROMPTS if not t.startswith(" ") and "<" not in t]:
        assert _ids(llm, text) == tok.encode(text, add_special_tokens=False), text


# --- Unigram: llama.cpp's "t5" vocabulary --------------------------------------------------------


def test_unigram_tokenizes_like_transformers(tmp_path):
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    inner = Tokenizer(models.Unigram())
    inner.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    inner.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="never", split=True)
    trainer = trainers.UnigramTrainer(vocab_size=300, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>", show_progress=False)
    inner.train_from_iterator(PROMPTS * 4, trainer)
    tok = _fast(inner, unk_token="<unk>", eos_token="</s>", pad_token="<pad>")
    out = _export(tok, tmp_path / "unigram.gguf")
    meta = read_gguf(out).metadata
    assert meta["tokenizer.ggml.model"] == "t5" and meta["tokenizer.ggml.add_space_prefix"] is True
    pieces = json.loads(inner.to_str())["model"]["vocab"]
    assert np.allclose(meta["tokenizer.ggml.scores"], [s for _, s in pieces])
    llm = _vocab_only(out)
    # Not text made of spaces only: llama.cpp's Unigram tokenizer puts its ▁ before the first
    # character that is not a space, so there it puts none.
    texts = [t for t in TRICKY + _random_texts(200) + PROMPTS if t.strip(" ")]
    for text in texts:
        assert _ids(llm, text) == tok.encode(text, add_special_tokens=False), text


# --- what cannot be represented ------------------------------------------------------------------


def _with_merges(tok, edit):
    """A copy of `tok` whose BPE merges are `edit(merges)`."""
    from tokenizers import Tokenizer

    backend = json.loads(tok.backend_tokenizer.to_str())
    backend["model"]["merges"] = edit(backend["model"]["merges"])
    return _fast(Tokenizer.from_str(json.dumps(backend)), unk_token="<unk>")


def test_unrepresentable_tokenizers_are_refused(tmp_path):
    from tokenizers import Tokenizer, models, normalizers

    def refused(tok, match):
        with pytest.raises(ExportError, match=match):
            save_gguf(_tiny_model(len(tok)), tmp_path / "no.gguf", tokenizer=tok)
        assert not (tmp_path / "no.gguf").exists()

    word_level = _fast(Tokenizer(models.WordLevel({"a": 0, "<unk>": 1}, unk_token="<unk>")))
    refused(word_level, "only byte-level BPE .* and SentencePiece-style .*model WordLevel")

    spm = _sentencepiece_bpe(normalizers.Replace(" ", "▁"))
    # BPE merges llama.cpp's tokenizer cannot follow: one split of a piece missing (tokenizers
    # trained by BPE itself, not converted from SentencePiece), or a piece's merges apart.
    merges = json.loads(spm.backend_tokenizer.to_str())["model"]["merges"]
    made_twice = next(i for i in range(1, len(merges)) if "".join(merges[i]) == "".join(merges[i - 1]))
    refused(_with_merges(spm, lambda m: m[:made_twice] + m[made_twice + 1 :]), "would join .* merges never do")
    refused(_with_merges(spm, lambda m: m[:made_twice] + [m[-1]] + m[made_twice:-1]), "are not consecutive")

    nfkc = copy.deepcopy(spm)
    nfkc.backend_tokenizer.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(" ", "▁")])
    refused(nfkc, "no counterpart for this tokenizer's normalizer step .*NFKC")

    plain_spaces = copy.deepcopy(spm)
    plain_spaces.backend_tokenizer.normalizer = None
    refused(plain_spaces, "keeps spaces as they are")

    unigram = _fast(Tokenizer(models.Unigram([("<unk>", 0.0), ("a", -1.0)], unk_id=0, byte_fallback=True)), unk_token="<unk>")
    refused(unigram, "model Unigram, byte_fallback True")
