"""Every mapped architecture, on tiny random GGUFs: packed, and agreeing with llama.cpp and with
transformers' own (unpacking) GGUF loader on the same file."""
import contextlib
import copy

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM
from transformers.integrations.gguf import gguf_config_mapping
from transformers.quantizers import auto

import gguf_quant  # noqa: F401  (registers the plugin)
from gguf_quant.archs.configs import CONFIG_BUILDERS

from llamacpp_ref import LlamaCppModel, rel_l2
from tiny_gguf import write_tiny

ARCHS = ["llama", "qwen2", "qwen3", "gemma2", "gemma3", "phi3", "starcoder2"]
IDS = [1, 504, 3458, 281, 260, 1345, 314, 2118, 28, 1064, 4910, 30, 216, 7, 9012, 31]


@contextlib.contextmanager
def transformers_own_loader():
    """transformers as it is without the plugin: its quantizer, its config reader."""
    saved = dict(auto.AUTO_QUANTIZER_MAPPING), dict(auto.AUTO_QUANTIZATION_CONFIG_MAPPING)
    builders = dict(gguf_config_mapping.GGUF_CONFIG_ARCHS)
    from transformers.quantizers.quantizer_gguf import GgufHfQuantizer
    from transformers.utils.quantization_config import GgufConfig

    auto.AUTO_QUANTIZER_MAPPING["gguf"] = GgufHfQuantizer
    auto.AUTO_QUANTIZATION_CONFIG_MAPPING["gguf"] = GgufConfig
    for arch in CONFIG_BUILDERS:
        gguf_config_mapping.GGUF_CONFIG_ARCHS.pop(arch, None)
    try:
        yield
    finally:
        auto.AUTO_QUANTIZER_MAPPING.update(saved[0])
        auto.AUTO_QUANTIZATION_CONFIG_MAPPING.update(saved[1])
        gguf_config_mapping.GGUF_CONFIG_ARCHS.clear()
        gguf_config_mapping.GGUF_CONFIG_ARCHS.update(builders)


def _load(path, dtype=torch.float32, **kwargs):
    return AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=dtype, **kwargs)


def _logits(model, ids=IDS):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float().numpy()


@pytest.fixture(scope="module", params=[(a, "Q8_0") for a in ARCHS] + [("llama", "Q4_0"), ("qwen3", "Q5_1")],
                ids=lambda p: f"{p[0]}-{p[1]}")
def tiny(request, tmp_path_factory):
    arch, qtype = request.param
    path = tmp_path_factory.mktemp(arch) / f"tiny-{arch}-{qtype}.gguf"
    return write_tiny(path, arch, qtype, tied=arch != "llama")


def test_packed_and_equal_to_transformers_unpacked(tiny):
    ours = _load(tiny)
    assert ours.gguf_report.unpacked == {}
    assert ours.gguf_report.packed
    # Our config (checked against llama.cpp below): transformers' own reader misses some keys
    # (Qwen3's head_dim), which is not what this comparison is about.
    config = copy.deepcopy(ours.config)
    del config.quantization_config
    with transformers_own_loader():
        theirs = _load(tiny, config=config)
    assert type(theirs) is type(ours)
    assert rel_l2(_logits(ours), _logits(theirs)) < 1e-4


def test_dequantize_in_place_is_transformers_unpacked(tiny):
    """`model.dequantize()` on the packed model: transformers' own modules with transformers' own
    loader's weights (it unpacks through gguf-py), tensor for tensor, and its logits."""
    ours = _load(tiny)
    config = copy.deepcopy(ours.config)
    del config.quantization_config
    ours.dequantize()
    assert not hasattr(ours, "hf_quantizer") and not ours.is_quantized
    with transformers_own_loader():
        theirs = _load(tiny, config=config)
    mine, their = ours.state_dict(), theirs.state_dict()
    assert mine.keys() == their.keys()
    for name, t in their.items():
        assert type(ours.get_submodule(name.rpartition(".")[0])) is type(theirs.get_submodule(name.rpartition(".")[0])), name
        assert torch.equal(mine[name], t), name
    assert rel_l2(_logits(ours), _logits(theirs)) < 1e-5
    if theirs.get_output_embeddings().weight is theirs.get_input_embeddings().weight:
        assert ours.get_output_embeddings().weight is ours.get_input_embeddings().weight  # still one tied tensor


def test_agrees_with_llamacpp(tiny):
    if "phi3" in tiny.name:
        pytest.skip("llama.cpp's phi3 vocabulary loader needs Phi-3's own special tokens, not SmolLM2's")
    ours = _logits(_load(tiny))
    ref = LlamaCppModel(tiny).logits(IDS)
    err = rel_l2(ours, ref)
    agree = float((ours.argmax(-1) == ref.argmax(-1)).mean())
    print(f"{tiny.name}: relative L2 {err:.4f}, argmax agreement {agree:.3f}")
    assert err < 0.05
    assert agree >= 0.9


def test_llamacpp_reference_loads_without_extra_buffers(tmp_path):
    """The reference loads with llama.cpp's plain CPU kernels (llamacpp_ref.open_llama), and the loader's defaults
    come back after it: should llama-cpp-python rename the field, this fails instead of the AMX crash returning."""
    pytest.importorskip("llama_cpp")
    import llama_cpp

    before = llama_cpp.llama_cpp.llama_model_default_params
    ref = LlamaCppModel(write_tiny(tmp_path / "tiny.gguf", "llama", "Q8_0"))
    assert ref.llm.model_params.use_extra_bufts is False
    assert llama_cpp.llama_cpp.llama_model_default_params is before


def test_llama3_rope_factors_follow_llamacpp(tmp_path):
    """A `rope_freqs` tensor (how llama.cpp stores Llama 3.1's rope scaling) rotates like llama.cpp,
    survives save_pretrained and comes back out of save_gguf."""
    from gguf_quant import save_gguf
    from gguf_quant.gguf_io.reader import read_gguf

    path = write_tiny(tmp_path / "rope.gguf", "llama", "Q8_0", rope_factors=True)
    model = _load(path)
    ids = list(range(1, 120, 3))
    ref = LlamaCppModel(path).logits(ids)
    err = rel_l2(_logits(model, ids), ref)
    # the same model with the factors dropped is measurably further from llama.cpp
    plain = _load(path)
    plain.model.rotary_emb.inv_freq = plain.model.rotary_emb.inv_freq * torch.tensor(plain.config.rope_freq_factors)
    assert err < 0.05 and err < 0.5 * rel_l2(_logits(plain, ids), ref)

    model.save_pretrained(tmp_path / "saved")
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "saved", dtype=torch.float32)
    assert np.array_equal(_logits(reloaded, ids), _logits(model, ids))

    out = save_gguf(model, tmp_path / "out.gguf")
    src, written = read_gguf(path), read_gguf(out)
    assert torch.equal(written.raw("rope_freqs.weight"), src.raw("rope_freqs.weight"))


def test_model_to_dtype_casts_activations_not_blocks(tmp_path):
    path = write_tiny(tmp_path / "t.gguf", "llama", "Q4_0")
    model = _load(path)
    blocks = model.model.layers[0].self_attn.q_proj.weight
    model = model.to(torch.bfloat16)
    assert model.model.layers[0].self_attn.q_proj.weight.dtype == torch.uint8
    assert torch.equal(model.model.layers[0].self_attn.q_proj.weight, blocks)
    with torch.no_grad():
        logits = model(torch.tensor([IDS])).logits
    assert logits.dtype == torch.bfloat16
    # (not bit-equal to a bf16 load: `.to` also rounds the rotary inv_freq buffer to bf16)
    direct = _logits(_load(path, torch.bfloat16))
    assert rel_l2(logits[0].float().numpy(), direct) < 0.02
