"""`save_gguf` against things we did not write: gguf-py's reader, llama.cpp's loader, logits and
tokenizer, and the two real checkpoints.

- a real GGUF loaded and written back has the source's tensor bytes, names, types and shapes
  and its metadata (values and GGUF types, read with gguf-py), and llama.cpp computes the same
  logits from both files;
- the tiny random models of every mapped architecture round-trip to identical tensors and
  metadata, and llama.cpp agrees exactly, also when the metadata comes only from the config
  and the tokenizer (no source metadata);
- a model built in transformers and quantized by gguf-py (no GGUF source at all) runs in
  llama.cpp like it does in transformers, dense and MoE;
- the errors users can hit say what went wrong, and never cost a file they saved.
"""
from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType
from gguf.quants import quantize
from transformers import AutoModelForCausalLM, AutoTokenizer

import gguf_quant
from gguf_quant import save_gguf
from gguf_quant.archs.export import ExportError
from gguf_quant.gguf_io import writer
from gguf_quant.gguf_io.reader import read_gguf
from gguf_quant.modules import GgufExperts, GgufLinear

from llamacpp_ref import LlamaCppModel, rel_l2
from tiny_gguf import write_tiny

IDS = [1, 504, 3458, 281, 260, 1345, 314, 2118, 28, 1064, 4910, 30]
TEXTS = [
    "The capital of France is Paris.",
    "Numbers 12345 and 3.14159; it's 2024!",
    "  leading spaces\n\n\ttabs and newlines  ",
    "éàü 日本語 🙂 <|im_start|>user\nhi<|im_end|>",
    "def f(x):\n    return x**2  # square",
]


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    # Two CPU cores are shared with other work: keep torch to one thread, and give it back.
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


def _load(path, dtype=torch.float32):
    return AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=dtype)


def _tensor_table(path) -> dict[str, tuple[int, tuple[int, ...], bytes]]:
    """name -> (ggml type, shape, bytes), as gguf-py's reader sees the file."""
    r = GGUFReader(path)
    out = {}
    for t in r.tensors:
        raw = np.asarray(r.data[t.data_offset : t.data_offset + t.n_bytes]).tobytes()
        out[t.name] = (int(t.tensor_type), tuple(int(d) for d in t.shape), raw)
    return out, r


def _fields(r: GGUFReader, prefix: str = "") -> dict[str, tuple[tuple, object]]:
    """key -> (GGUF value types, value), as gguf-py's reader sees them."""
    return {k: (tuple(f.types), f.contents()) for k, f in r.fields.items() if k.startswith(prefix) and not k.startswith("GGUF.")}


def _same_tensors(source, written) -> None:
    """Same names, types, shapes and bytes (our reader: gguf-py's is too slow for every file)."""
    a, b = read_gguf(source), read_gguf(written)
    assert set(a.tensors) == set(b.tensors)
    for name, ta in a.tensors.items():
        tb = b.tensors[name]
        assert (ta.type, ta.shape) == (tb.type, tb.shape), name
        assert torch.equal(a.raw(name).reshape(-1).view(torch.uint8), b.raw(name).reshape(-1).view(torch.uint8)), name


def _same_metadata(source, written, ignore=()) -> set[str]:
    """Every key of the source has the same value in the written file; returns the extra keys."""
    a, b = read_gguf(source).metadata, read_gguf(written).metadata
    for key, value in a.items():
        if key in ignore:
            continue
        assert key in b, key
        assert b[key] == value, (key, value, b[key])
    return set(b) - set(a)


# --- 1, 2: real checkpoints ------------------------------------------------------------------


@pytest.fixture(scope="module", params=["smollm2_path", "gemma3_path"])
def real(request, tmp_path_factory):
    source = request.getfixturevalue(request.param)
    out = save_gguf(_load(source), tmp_path_factory.mktemp("real") / "roundtrip.gguf")
    return source, out


@pytest.mark.slow
def test_real_checkpoint_roundtrip_is_identical(real):
    source, out = real
    theirs, reader = _tensor_table(out)
    ours_src = read_gguf(source)
    if "smollm2" in source.name.lower():
        # The small vocabulary makes gguf-py's reader affordable on both files.
        src_table, src_reader = _tensor_table(source)
    else:
        src_table, src_reader = {n: (t.type.id, tuple(reversed(t.shape)), ours_src.raw(n).numpy().tobytes()) for n, t in ours_src.tensors.items()}, None
    assert set(theirs) == set(src_table)
    assert "output.weight" not in theirs  # tied: llama.cpp reuses token_embd, as in the source
    for name, (qtype, shape, raw) in src_table.items():
        assert theirs[name][:2] == (qtype, shape), name
        assert theirs[name][2] == raw, name

    arch = ours_src.architecture
    written = _fields(reader)
    if src_reader is not None:
        # Every source key, architecture, general and tokenizer alike, with the same GGUF type.
        for key, (types, value) in _fields(src_reader).items():
            assert written[key] == (types, value), key
    else:
        for key, value in ours_src.metadata.items():
            got = written[key][1]
            assert got == value or (isinstance(value, float) and np.float32(value) == np.float32(got)), key
        assert written["tokenizer.ggml.token_type"][0] == (GGUFValueType.ARRAY, GGUFValueType.INT32)
        assert written["tokenizer.ggml.scores"][0] == (GGUFValueType.ARRAY, GGUFValueType.FLOAT32)
        assert written[f"{arch}.context_length"][0] == (GGUFValueType.UINT32,)


@pytest.mark.slow
def test_real_checkpoint_same_logits_in_llamacpp(real):
    source, out = real
    ref, ours = LlamaCppModel(source, n_ctx=32), LlamaCppModel(out, n_ctx=32)
    ids = ref.tokenize(TEXTS[0])[:8]
    assert ours.tokenize(TEXTS[1]) == ref.tokenize(TEXTS[1])
    diff = np.abs(ours.logits(ids) - ref.logits(ids)).max()
    assert diff <= 1e-6, diff


# --- 3, 4: tiny models of every architecture ---------------------------------------------------

TINY = ["llama", "qwen2", "qwen3", "gemma2", "gemma3", "phi3"]


@pytest.fixture(scope="module", params=TINY)
def tiny(request, tmp_path_factory):
    arch = request.param
    d = tmp_path_factory.mktemp(f"tiny-{arch}")
    # llama keeps an untied output head, the others are tied (as in test_archs).
    source = write_tiny(d / f"tiny-{arch}.gguf", arch, "Q8_0", tied=arch != "llama")
    return arch, source, _load(source)


def _llamacpp_runs(arch: str) -> bool:
    # llama.cpp's phi3 vocabulary loader wants Phi-3's own special tokens, not SmolLM2's.
    return arch != "phi3"


def test_tiny_roundtrip_identical_and_same_llamacpp_logits(tiny, tmp_path):
    arch, source, model = tiny
    out = save_gguf(model, tmp_path / "out.gguf")
    _same_tensors(source, out)
    extra = _same_metadata(source, out)
    assert extra <= {f"{arch}.vocab_size", f"{arch}.rope.freq_base_swa", "general.quantization_version"}, extra
    if _llamacpp_runs(arch):
        ref, ours = LlamaCppModel(source, n_ctx=32), LlamaCppModel(out, n_ctx=32)
        assert np.array_equal(ours.logits(IDS), ref.logits(IDS))


def test_tiny_metadata_types_match_source(tmp_path):
    """GGUF value types too (llama.cpp refuses a key of the wrong type), read by gguf-py. Its
    reader takes seconds per file on this vocabulary, so one architecture: gemma2 has the most
    keys (sliding window, both softcaps)."""
    source = write_tiny(tmp_path / "gemma2.gguf", "gemma2", "Q8_0")
    out = save_gguf(_load(source), tmp_path / "out.gguf")
    written = _fields(GGUFReader(out))
    for key, (types, value) in _fields(GGUFReader(source)).items():
        assert written[key] == (types, value), key


@pytest.fixture(scope="module")
def llama_source(tmp_path_factory):
    return write_tiny(tmp_path_factory.mktemp("llama") / "tied-llama.gguf", "llama", "Q8_0")


@pytest.fixture(scope="module")
def tiny_tokenizer(llama_source):
    return AutoTokenizer.from_pretrained(str(llama_source.parent), gguf_file=llama_source.name)


@pytest.fixture(scope="module")
def tiny_llama(llama_source):
    return _load(llama_source)


def test_tiny_from_config_and_tokenizer_only(tiny, tiny_tokenizer, tmp_path):
    """No source metadata: architecture keys from the config, vocabulary from the tokenizer;
    llama.cpp still computes exactly what it computes on the original file, and tokenizes the same."""
    arch, source, model = tiny
    model = copy.copy(model)  # a shallow copy shares the weights; the attribute goes from the copy only
    del model.gguf_metadata
    out = save_gguf(model, tmp_path / "out.gguf", tokenizer=tiny_tokenizer)
    _same_tensors(source, out)
    a, b = read_gguf(source).metadata, read_gguf(out).metadata
    for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges", "tokenizer.ggml.bos_token_id",
                "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id",
                "tokenizer.ggml.add_bos_token", "tokenizer.chat_template"):
        assert b[key] == a[key], key
    for key, value in a.items():
        if key.startswith(f"{arch}."):
            assert b[key] == value, key
    # Recomputed from the tensors: llama.cpp's MOSTLY_Q8_0 (tiny_gguf writes the ggml type id, 8).
    assert b["general.file_type"] == 7
    if _llamacpp_runs(arch):
        ref, ours = LlamaCppModel(source, n_ctx=32), LlamaCppModel(out, n_ctx=32)
        for text in TEXTS:
            assert ours.tokenize(text) == ref.tokenize(text), text
        assert np.array_equal(ours.logits(IDS), ref.logits(IDS))


# --- 4: models that never were GGUF files -------------------------------------------------------


def _pack_linears(model: torch.nn.Module, qtype=GGMLQuantizationType.Q8_0) -> None:
    """Replace every nn.Linear by a GgufLinear holding gguf-py's quantization of its weight."""
    for name, module in list(model.named_modules()):
        if type(module) is not torch.nn.Linear:
            continue
        packed = GgufLinear(module.in_features, module.out_features, int(qtype), module.bias is not None, "cpu", torch.float32)
        packed.weight.data.copy_(torch.from_numpy(quantize(module.weight.detach().numpy(), qtype)))
        if module.bias is not None:
            packed.bias.data.copy_(module.bias.detach())
        model.set_submodule(name, packed)


def _randomise_norms(model: torch.nn.Module) -> None:
    for name, p in model.named_parameters():
        if "norm" in name:
            p.data.normal_(1.0, 0.1, generator=torch.Generator().manual_seed(len(name)))


def _agree_with_llamacpp(model, path, ids=IDS) -> None:
    with torch.no_grad():
        ours = model(torch.tensor([ids])).logits[0].float().numpy()
    ref = LlamaCppModel(path, n_ctx=32).logits(ids)
    err, agree = rel_l2(ours, ref), float((ours.argmax(-1) == ref.argmax(-1)).mean())
    print(f"{path.name}: relative L2 {err:.4f}, argmax agreement {agree:.2f}")
    # llama.cpp rounds activations to Q8 for Q8_0 matmuls: close, not equal (as in test_archs).
    assert err < 0.05 and agree >= 0.9


def test_llama_built_in_transformers_runs_in_llamacpp(tiny_tokenizer, tmp_path):
    """Config, weights and packing all from elsewhere: Q8_0 linears by gguf-py, a float32
    embedding, an untied head, and Llama 3.1 rope scaling (written as llama.cpp's rope_freqs)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tiny_tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
        rms_norm_eps=1e-6, tie_word_embeddings=False, initializer_range=0.05, bos_token_id=1, eos_token_id=2,
        rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
    )
    model = LlamaForCausalLM(config).eval()
    _randomise_norms(model)
    _pack_linears(model)
    out = save_gguf(model, tmp_path / "built.gguf", tokenizer=tiny_tokenizer)
    meta = read_gguf(out)
    assert meta.tensors["token_embd.weight"].type.name == "F32"
    assert meta.tensors["output.weight"].type.name == "Q8_0"
    assert "rope_freqs.weight" in meta.tensors
    assert meta.metadata["general.file_type"] == 7  # MOSTLY_Q8_0
    _agree_with_llamacpp(model, out)


@pytest.mark.parametrize("arch", ["qwen2_moe", "qwen3_moe"])
def test_moe_built_in_transformers_runs_in_llamacpp(arch, tiny_tokenizer, tmp_path):
    """Packed experts written as llama.cpp's ffn_{gate,up,down}_exps (gate_up split by rows)."""
    from transformers import AutoConfig

    torch.manual_seed(0)
    config = AutoConfig.for_model(
        arch, vocab_size=len(tiny_tokenizer), hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
        shared_expert_intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, num_experts=4, num_experts_per_tok=2, norm_topk_prob=arch == "qwen3_moe",
        max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=False, initializer_range=0.05,
        bos_token_id=1, eos_token_id=2,
    )
    model = AutoModelForCausalLM.from_config(config).eval()
    _randomise_norms(model)
    q8 = GGMLQuantizationType.Q8_0
    for layer in model.model.layers:
        experts = layer.mlp.experts
        packed = GgufExperts(config.num_experts, 64, 32, int(q8), int(q8), experts.act_fn, device="cpu", dtype=torch.float32)
        for name in ("gate_up_proj", "down_proj"):
            w = getattr(experts, name).detach()
            blocks = quantize(w.reshape(-1, w.shape[-1]).numpy(), q8)
            getattr(packed, name).data.copy_(torch.from_numpy(blocks).reshape(getattr(packed, name).shape))
        layer.mlp.experts = packed
    _pack_linears(model)
    out = save_gguf(model, tmp_path / f"{arch}.gguf", tokenizer=tiny_tokenizer)
    f = read_gguf(out)
    gguf_arch = arch.replace("_", "")
    assert f.tensors["blk.0.ffn_gate_exps.weight"].shape == (4, 32, 64)
    assert f.tensors["blk.0.ffn_down_exps.weight"].shape == (4, 64, 32)
    assert f.metadata[f"{gguf_arch}.expert_count"] == 4 and f.metadata[f"{gguf_arch}.expert_used_count"] == 2
    _agree_with_llamacpp(model, out)


# --- 4: the tokenizer alone ---------------------------------------------------------------------


def _with_pre_tokenizer(tok, pre, ignore_merges: bool = False):
    """A copy of `tok` whose backend splits text with `pre` (a tokenizers pre-tokenizer)."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    backend = json.loads(tok.backend_tokenizer.to_str())
    backend["model"]["ignore_merges"] = ignore_merges
    inner = Tokenizer.from_str(json.dumps(backend))
    inner.pre_tokenizer = pre
    return PreTrainedTokenizerFast(
        tokenizer_object=inner, bos_token=tok.bos_token, eos_token=tok.eos_token, unk_token=tok.unk_token,
        pad_token=tok.pad_token, clean_up_tokenization_spaces=False,
    )


def _pre_tokenizers():
    from tokenizers import Regex, pre_tokenizers as pt

    def split(regex):
        return pt.Sequence([pt.Split(Regex(regex), behavior="isolated"), pt.ByteLevel(add_prefix_space=False, use_regex=False)])

    return {
        # SmolLM2's published tokenizer.json: every digit split off, then GPT-2's byte-level regex
        "smollm": (pt.Sequence([pt.Digits(individual_digits=True), pt.ByteLevel(add_prefix_space=False, use_regex=True)]), False),
        "gpt-2": (pt.ByteLevel(add_prefix_space=False, use_regex=True), False),
        "llama-bpe": (split(writer._LLAMA3_SPLIT), True),
        "qwen2": (split(writer._QWEN2_SPLIT), False),
    }


@pytest.mark.parametrize("pre", ["smollm", "gpt-2", "llama-bpe", "qwen2"])
def test_tokenizer_written_tokenizes_like_transformers(pre, tiny_llama, tiny_tokenizer, tmp_path):
    pre_tokenizer, ignore_merges = _pre_tokenizers()[pre]
    tok = _with_pre_tokenizer(tiny_tokenizer, pre_tokenizer, ignore_merges)
    model = copy.copy(tiny_llama)
    del model.gguf_metadata
    out = save_gguf(model, tmp_path / "tok.gguf", tokenizer=tok)
    assert read_gguf(out).metadata["tokenizer.ggml.pre"] == pre
    llama_cpp = pytest.importorskip("llama_cpp")
    llm = llama_cpp.Llama(model_path=str(out), vocab_only=True, verbose=False)
    for text in TEXTS:
        # special=True: llama.cpp matches control tokens in the text, as transformers does
        assert llm.tokenize(text.encode(), add_bos=False, special=True) == tok.encode(text, add_special_tokens=False), text


# --- 5: errors ------------------------------------------------------------------------------------


def test_unsupported_architecture_is_refused(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=16, n_positions=8))
    with pytest.raises(ExportError, match="cannot export model_type 'gpt2'.*supported: llama"):
        save_gguf(model, tmp_path / "gpt2.gguf")
    assert list(tmp_path.iterdir()) == []


def test_missing_folder_is_refused(tiny_llama, tmp_path):
    model = tiny_llama
    with pytest.raises(FileNotFoundError, match="does not exist"):
        save_gguf(model, tmp_path / "no" / "such" / "dir" / "m.gguf")


def test_existing_file_kept_unless_overwrite(tiny_llama, tmp_path, monkeypatch):
    model = tiny_llama
    path = tmp_path / "mine.gguf"
    path.write_bytes(b"something the user saved")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        save_gguf(model, path)
    assert path.read_bytes() == b"something the user saved"

    # A failure while writing (here: a weight that cannot be read) leaves it as it was, too.
    real = writer.export.export_tensors

    def failing(*args):
        tensors = real(*args)

        def boom():
            raise RuntimeError("disk on fire")

        tensors[-1].data = boom
        return tensors

    monkeypatch.setattr(writer.export, "export_tensors", failing)
    with pytest.raises(RuntimeError, match="disk on fire"):
        save_gguf(model, path, overwrite=True)
    assert path.read_bytes() == b"something the user saved"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.gguf"]  # no partial file left

    monkeypatch.setattr(writer.export, "export_tensors", real)
    save_gguf(model, path, overwrite=True)
    assert read_gguf(path).architecture == "llama"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.gguf"]


def test_unknown_tokenizers_are_refused_clearly(tiny_llama, tiny_tokenizer, tmp_path):
    model = tiny_llama
    from tokenizers import pre_tokenizers as pt

    odd = _with_pre_tokenizer(tiny_tokenizer, pt.Sequence([pt.Whitespace(), pt.ByteLevel(use_regex=False)]))
    with pytest.raises(ExportError, match="tokenizer_pre="):
        save_gguf(model, tmp_path / "a.gguf", tokenizer=odd)
    # Naming it is the way out.
    save_gguf(model, tmp_path / "a.gguf", tokenizer=odd, tokenizer_pre="gpt-2")

    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    word_level = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"a": 0, "<unk>": 1}, unk_token="<unk>")))
    with pytest.raises(ExportError, match="only byte-level BPE"):
        save_gguf(model, tmp_path / "b.gguf", tokenizer=word_level)
    assert not (tmp_path / "b.gguf").exists()
