"""Mixture-of-experts GGUFs keep every routed expert packed in `GgufExperts`, and agree with
transformers' own MoE modules on the same (dequantized) weights and with llama.cpp."""
import copy

import pytest
import torch

from gguf_quant import GgufQuantizeConfig
from gguf_quant.gguf_io.reader import read_gguf
from gguf_quant.modules import GgufExperts
from gguf_quant.packing import resident_bytes

from llamacpp_ref import LlamaCppModel, rel_l2
from test_archs import IDS, _load, _logits, transformers_own_loader
from tiny_gguf import Shape, quantize_with_llamacpp, write_tiny

CASES = [
    ("qwen3moe", "Q8_0", Shape(experts=8, used=2, ff_exp=96)),  # an expert width other than 768
    ("qwen3moe", "Q4_0", Shape(experts=8, used=2, ff_exp=64)),
    ("qwen2moe", "Q8_0", Shape(experts=8, used=2, ff_exp=64, ff_shexp=96)),
    ("llama", "Q8_0", Shape(experts=4, used=2, ff=64)),  # Mixtral, as llama.cpp writes it
    # a K-quant mix from llama.cpp's own quantizer (rows of 256 so the K-quants apply)
    ("qwen3moe", "Q4_K_M", Shape(hidden=256, heads=4, kv_heads=2, head_dim=64, experts=4, used=2, ff_exp=256)),
    # gpt-oss as llama-quantize's MXFP4_MOE writes it: MXFP4 experts with biases, Q8_0 elsewhere,
    # attention sinks, biased router; a window of 4 so the sliding layers slide over 16 tokens
    ("gpt-oss", "MXFP4_MOE", Shape(experts=4, used=2, ff_exp=64, window=4)),
]

# model types transformers' own GGUF loader cannot read llama.cpp's files of: compare with our loader
# unpacking every weight instead, which still runs transformers' own MoE modules on them.
NO_OWN_LOADER = {
    "mixtral": "transformers has no GGUF mapping for Mixtral",
    # transformers 5.24's load_gguf_checkpoint fails on gpt-oss's YaRN keys (it reads a field's
    # first part, the key length, as the value) and, without them, leaves the experts, their biases
    # and the attention sinks randomly initialised (it expects `ffn_*_projs`, not `ffn_*_exps`).
    "gpt_oss": "transformers' gpt-oss GGUF loader cannot read llama.cpp's gpt-oss files",
}


@pytest.fixture(scope="module", params=CASES, ids=lambda c: f"{c[0]}-{c[1]}-ff{c[2].ff_exp if c[0] != 'llama' else c[2].ff}")
def tiny_moe(request, tmp_path_factory):
    arch, qtype, shape = request.param
    folder = tmp_path_factory.mktemp(arch)
    path = folder / f"tiny-{arch}-{qtype}.gguf"
    if qtype in ("Q8_0", "Q4_0", "MXFP4_MOE"):
        return write_tiny(path, arch, qtype, shape, tied=False), shape
    f32 = write_tiny(folder / "f32.gguf", arch, "F32", shape, tied=False)
    return quantize_with_llamacpp(f32, path, qtype), shape


def test_experts_stay_packed(tiny_moe):
    path, shape = tiny_moe
    model = _load(path)
    experts = [m for m in model.modules() if isinstance(m, GgufExperts)]
    assert len(experts) == shape.layers
    assert model.gguf_report.unpacked == {}
    assert resident_bytes(model) <= 1.05 * read_gguf(path).tensor_bytes


def _unpacked(path, ours):
    """The same file unpacked to float into transformers' own modules: by transformers' own GGUF
    loader (with our config) where it reads the architecture, else by ours with dequantize=True."""
    if ours.config.model_type in NO_OWN_LOADER:
        return _load(path, quantization_config=GgufQuantizeConfig(dequantize=True))
    config = copy.deepcopy(ours.config)
    del config.quantization_config
    with transformers_own_loader():
        return _load(path, config=config)


def test_matches_transformers_moe_modules(tiny_moe):
    path, _ = tiny_moe
    ours = _load(path)
    theirs = _unpacked(path, ours)
    assert not any(isinstance(m, GgufExperts) for m in theirs.modules())
    err = rel_l2(_logits(ours), _logits(theirs))
    print(f"{path.name}: relative L2 vs transformers' MoE modules {err:.2e}")
    assert err <= 1e-4


def test_agrees_with_llamacpp(tiny_moe):
    path, _ = tiny_moe
    model = _load(path)
    ours = _logits(model)
    ref = LlamaCppModel(path).logits(IDS)
    err = rel_l2(ours, ref)
    agree = (ours.argmax(-1) == ref.argmax(-1)).mean()
    theirs = _logits(_unpacked(path, model))
    bound = min(0.05, 1.1 * rel_l2(theirs, ref) + 0.005)
    # random-weight logits are nearly flat: hold argmax to what transformers itself reaches
    agree_bound = min(0.9, (theirs.argmax(-1) == ref.argmax(-1)).mean())
    print(f"{path.name}: relative L2 vs llama.cpp {err:.4f} (bound {bound:.4f}), argmax {agree:.3f}")
    assert err <= bound
    assert agree >= agree_bound


def test_generates_on_cpu(tiny_moe):
    path, _ = tiny_moe
    out = _load(path).generate(torch.tensor([IDS[:4]]), max_new_tokens=5, do_sample=False)
    assert out.shape == (1, 9)


@pytest.fixture(scope="module")
def tiny_gpt_oss(tmp_path_factory):
    shape = Shape(experts=4, used=2, ff_exp=64, window=4)
    return write_tiny(tmp_path_factory.mktemp("gpt-oss") / "tiny-gpt-oss.gguf", "gpt-oss", "MXFP4_MOE", shape, tied=False)


def test_gpt_oss_config_as_llamacpp_runs_it(tiny_gpt_oss):
    """The values llama.cpp hard-codes for gpt-oss rather than reading them from the file."""
    text = _load(tiny_gpt_oss).config
    assert text.model_type == "gpt_oss"
    assert (text.swiglu_alpha, text.swiglu_limit) == (1.702, 7.0)
    # llama.cpp's default sliding-window pattern for gpt-oss: even layers slide, odd ones attend fully
    assert text.layer_types == ["sliding_attention", "full_attention"] and text.sliding_window == 4
    assert (text.intermediate_size, text.num_local_experts, text.num_experts_per_tok) == (64, 4, 2)
    assert text.head_dim == 16 and text.attention_bias and not text.tie_word_embeddings
    assert text.rope_parameters == {
        "rope_type": "yarn", "rope_theta": 10000.0, "factor": 32.0, "original_max_position_embeddings": 4096,
        "beta_fast": 32.0, "beta_slow": 1.0, "truncate": True,
    }


def test_gpt_oss_packed_and_unpacked_layers_mix(tiny_gpt_oss):
    """One layer's experts packed (llama.cpp's layout), the other's in transformers' GptOssExperts
    (transposed, gate/up interleaved, biases too): the per-layer layout conversion picks right."""
    ours = _load(tiny_gpt_oss)
    mixed = _load(tiny_gpt_oss, quantization_config=GgufQuantizeConfig(modules_to_not_convert=["layers.1.mlp.experts"]))
    assert isinstance(mixed.model.layers[0].mlp.experts, GgufExperts)
    assert not isinstance(mixed.model.layers[1].mlp.experts, GgufExperts)
    assert rel_l2(_logits(ours), _logits(mixed)) <= 1e-4
