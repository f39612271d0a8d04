"""Mixture-of-experts GGUFs keep every routed expert packed in `GgufExperts`, and agree with
transformers' own MoE modules on the same (dequantized) weights and with llama.cpp."""
import copy

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from gguf_quant import GgufQuantizeConfig
from gguf_quant.gguf_io.reader import read_gguf
from gguf_quant.modules import GgufExperts

from llamacpp_ref import LlamaCppModel, rel_l2
from test_archs import IDS, transformers_own_loader
from tiny_gguf import Shape, quantize_with_llamacpp, write_tiny

CASES = [
    ("qwen3moe", "Q8_0", Shape(experts=8, used=2, ff_exp=96)),  # an expert width other than 768
    ("qwen3moe", "Q4_0", Shape(experts=8, used=2, ff_exp=64)),
    ("qwen2moe", "Q8_0", Shape(experts=8, used=2, ff_exp=64, ff_shexp=96)),
    ("llama", "Q8_0", Shape(experts=4, used=2, ff=64)),  # Mixtral, as llama.cpp writes it
    # a K-quant mix from llama.cpp's own quantizer (rows of 256 so the K-quants apply)
    ("qwen3moe", "Q4_K_M", Shape(hidden=256, heads=4, kv_heads=2, head_dim=64, experts=4, used=2, ff_exp=256)),
]


def _load(path, dtype=torch.float32, **kwargs):
    return AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=dtype, **kwargs)


def _logits(model, ids=IDS):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float().numpy()


def _resident_bytes(model) -> int:
    tensors = {t.data_ptr(): t for t in [*model.parameters(), *model.buffers()]}
    return sum(t.numel() * t.element_size() for t in tensors.values())


@pytest.fixture(scope="module", params=CASES, ids=lambda c: f"{c[0]}-{c[1]}-ff{c[2].ff_exp if c[0] != 'llama' else c[2].ff}")
def tiny_moe(request, tmp_path_factory):
    arch, qtype, shape = request.param
    folder = tmp_path_factory.mktemp(arch)
    path = folder / f"tiny-{arch}-{qtype}.gguf"
    if qtype in ("Q8_0", "Q4_0"):
        return write_tiny(path, arch, qtype, shape, tied=False), shape
    f32 = write_tiny(folder / "f32.gguf", arch, "F32", shape, tied=False)
    return quantize_with_llamacpp(f32, path, qtype), shape


def test_experts_stay_packed(tiny_moe):
    path, shape = tiny_moe
    model = _load(path)
    experts = [m for m in model.modules() if isinstance(m, GgufExperts)]
    assert len(experts) == shape.layers
    assert model.gguf_report.unpacked == {}
    assert _resident_bytes(model) <= 1.05 * read_gguf(path).tensor_bytes


def test_matches_transformers_moe_modules(tiny_moe):
    path, _ = tiny_moe
    ours = _load(path)
    if ours.config.model_type == "mixtral":
        # transformers' own GGUF loader has no Mixtral mapping: unpack through ours instead, which
        # still runs transformers' MixtralExperts on the dequantized weights.
        theirs = _load(path, quantization_config=GgufQuantizeConfig(dequantize=True))
    else:
        config = copy.deepcopy(ours.config)
        del config.quantization_config
        with transformers_own_loader():
            theirs = _load(path, config=config)
    assert not any(isinstance(m, GgufExperts) for m in theirs.modules())
    assert rel_l2(_logits(ours), _logits(theirs)) <= 1e-4


def test_agrees_with_llamacpp(tiny_moe):
    path, _ = tiny_moe
    model = _load(path)
    ours = _logits(model)
    ref = LlamaCppModel(path).logits(IDS)
    err = rel_l2(ours, ref)
    agree = (ours.argmax(-1) == ref.argmax(-1)).mean()
    bound, agree_bound = 0.05, 0.9
    if model.config.model_type != "mixtral":  # transformers' loader cannot read Mixtral GGUFs
        config = copy.deepcopy(model.config)
        del config.quantization_config
        with transformers_own_loader():
            theirs = _logits(_load(path, config=config))
        bound = min(bound, 1.1 * rel_l2(theirs, ref) + 0.005)
        # random-weight logits are nearly flat: hold argmax to what transformers itself reaches
        agree_bound = min(agree_bound, (theirs.argmax(-1) == ref.argmax(-1)).mean())
    print(f"{path.name}: relative L2 vs llama.cpp {err:.4f} (bound {bound:.4f}), argmax {agree:.3f}")
    assert err <= bound
    assert agree >= agree_bound


def test_generates_on_cpu(tiny_moe):
    path, _ = tiny_moe
    out = _load(path).generate(torch.tensor([IDS[:4]]), max_new_tokens=5, do_sample=False)
    assert out.shape == (1, 9)
