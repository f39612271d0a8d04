"""gpt-oss from transformers' own format: a tiny `GptOssForCausalLM` (fused experts `[E, H, 2I]`
with gate/up interleaved, biases, attention sinks, sliding layers, YaRN) written with `save_gguf`
runs in llama.cpp like it runs in transformers; quantized while it loads, it holds exactly the
blocks and types llama-quantize writes for the same weights, survives save_pretrained, and its
export agrees with llama.cpp."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, GptOssConfig, GptOssForCausalLM

from gguf_quant import GgufQuantizeConfig, save_gguf
from gguf_quant.gguf_io.reader import read_gguf
from gguf_quant.modules import GgufExperts

from llamacpp_ref import PROMPTS, rel_l2
from test_export import LlamaCpp
from test_roundtrip import _assert_same_packed
from tiny_gguf import quantize_with_llamacpp

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# how far the quantized model may sit from the float one on these random weights (measured:
# Q8_0 0.011, llama-quantize's Q4_K_M (Q5_0/Q8_0 fallbacks at 64 columns) 0.063, MXFP4_MOE 0.097)
MIXES = {"Q8_0": 0.02, "Q4_K_M": 0.09, "MXFP4_MOE": 0.15}


def _randomise(model: torch.nn.Module) -> None:
    """Weights on the scales tiny_gguf uses: decisive routers (near-tied experts flip under
    llama.cpp's 8-bit activations), sinks on the scale of attention scores, norms near 1."""
    g = torch.Generator().manual_seed(0)
    scales = {"router.weight": 0.5, "sinks": 1.0, "bias": 0.1, "norm": 0.1}  # else 0.05
    for name, p in model.named_parameters():
        scale = next((s for key, s in scales.items() if key in name), 0.05)
        p.data = torch.randn(p.shape, generator=g) * scale + (1.0 if "norm" in name else 0.0)


def _gpt_oss(vocab_size: int, **config) -> GptOssForCausalLM:
    config = GptOssConfig(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, num_local_experts=4, num_experts_per_tok=2, sliding_window=4,
        bos_token_id=1, eos_token_id=2, **config,
    )
    model = GptOssForCausalLM(config).eval()
    _randomise(model)
    return model


@pytest.fixture(scope="module")
def float_gpt_oss(tiny_tokenizer, tmp_path_factory):
    """(model, its save_pretrained folder, its float export); transformers' default gpt-oss rope."""
    model = _gpt_oss(len(tiny_tokenizer))
    folder = tmp_path_factory.mktemp("gpt-oss")
    model.save_pretrained(folder / "hf")
    return model, folder / "hf", save_gguf(model, folder / "f32.gguf", tokenizer=tiny_tokenizer)


def _prompt_errors(model, path) -> list[float]:
    """Relative L2 between our logits and llama.cpp's on `path`, per prompt (teacher-forced)."""
    ref = LlamaCpp(path, n_ctx=64)
    errors = []
    for prompt in PROMPTS:
        ids = ref.tokenize(prompt)
        with torch.no_grad():
            ours = model(torch.tensor([ids])).logits[0].float().numpy()
        errors.append(rel_l2(ours, ref.logits(ids)))
    print(path.name, "relative L2 per prompt:", np.round(errors, 5))
    return errors


def test_float_export_runs_in_llamacpp_like_transformers(float_gpt_oss):
    model, _, path = float_gpt_oss
    f = read_gguf(path)
    meta = f.metadata
    assert (meta["gpt-oss.expert_count"], meta["gpt-oss.expert_used_count"], meta["gpt-oss.expert_feed_forward_length"]) == (4, 2, 64)
    assert meta["gpt-oss.attention.sliding_window"] == 4 and "gpt-oss.attention.sliding_window_pattern" not in meta
    assert (meta["gpt-oss.rope.scaling.type"], meta["gpt-oss.rope.scaling.factor"]) == ("yarn", 32.0)
    assert meta["gpt-oss.rope.scaling.original_context_length"] == 4096
    # llama.cpp's layout: gate/up split and output-major; biases and router in F32
    assert f.tensors["blk.0.ffn_gate_exps.weight"].shape == (4, 64, 64)
    assert f.tensors["blk.0.ffn_up_exps.bias"].shape == (4, 64)
    assert {f.tensors[f"blk.1.{n}"].type.name for n in ("ffn_down_exps.bias", "ffn_gate_inp.weight", "attn_sinks.weight")} == {"F32"}
    # (transformers' own rope leaves YaRN's correction range unrounded, llama.cpp rounds it: 2e-4)
    assert max(_prompt_errors(model, path)) <= 1e-3


def test_yarn_attention_factor_and_layer_pattern_reach_llamacpp(tiny_tokenizer, tmp_path):
    """A YaRN attention factor other than the default (llama.cpp multiplies its own by
    `rope.scaling.attn_factor`), llama.cpp's rounding of the correction range, and a sliding
    pattern other than the default one (written per layer)."""
    rope = {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "original_max_position_embeddings": 4096,
            "beta_fast": 32.0, "beta_slow": 1.0, "truncate": True}
    layers = ["full_attention", "sliding_attention"]
    model = _gpt_oss(len(tiny_tokenizer), rope_parameters={**rope, "attention_factor": 1.5}, layer_types=layers)
    path = save_gguf(model, tmp_path / "yarn.gguf", tokenizer=tiny_tokenizer)
    assert read_gguf(path).metadata["gpt-oss.attention.sliding_window_pattern"] == [False, True]
    errors = _prompt_errors(model, path)
    assert max(errors) <= 1e-3
    # the same weights with the default factor are far from llama.cpp's logits on this file
    default = _gpt_oss(len(tiny_tokenizer), rope_parameters=rope, layer_types=layers)
    assert min(_prompt_errors(default, path)) > 10 * max(errors)


@pytest.fixture(scope="module", params=list(MIXES))
def quantized(request, float_gpt_oss):
    _, folder, _ = float_gpt_oss
    model = AutoModelForCausalLM.from_pretrained(
        folder, dtype=torch.float32, quantization_config=GgufQuantizeConfig(quant_type=request.param)
    )
    return request.param, model


def test_quantize_on_load_equals_llama_quantize(quantized, float_gpt_oss, tmp_path):
    mix, ours = quantized
    model, _, f32 = float_gpt_oss
    assert all(isinstance(layer.mlp.experts, GgufExperts) for layer in ours.model.layers)
    assert ours.gguf_report.unpacked == {}
    path = quantize_with_llamacpp(f32, tmp_path / f"{mix}.gguf", mix)
    theirs = AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file=path.name, dtype=torch.float32)
    _assert_same_packed(ours, theirs)
    # the float tensors too (expert biases in llama.cpp's order, router, sinks, norms)
    a, b = ours.state_dict(), theirs.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    ids = torch.tensor([list(range(1, 40, 3))])
    with torch.no_grad():
        logits, dense = (m(ids).logits[0].numpy() for m in (ours, model))
    print(mix, "relative L2 to the float model:", rel_l2(logits, dense))
    assert rel_l2(logits, dense) <= MIXES[mix]


def test_quantized_save_reload_is_identical(quantized, tmp_path):
    _, model = quantized
    model.save_pretrained(tmp_path / "saved")
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "saved", dtype=torch.float32)
    _assert_same_packed(model, reloaded)
    ids = torch.tensor([list(range(1, 40, 3))])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, reloaded(ids).logits)


def test_quantized_export_agrees_with_llamacpp(quantized, tiny_tokenizer, tmp_path):
    mix, model = quantized
    path = save_gguf(model, tmp_path / f"{mix}.gguf", tokenizer=tiny_tokenizer)
    written = read_gguf(path)
    assert {t.type.name for t in written.tensors.values() if t.type.quantized} == set(model.gguf_report.packed.values())
    if mix == "MXFP4_MOE":
        assert written.metadata["general.file_type"] == 38  # LLAMA_FTYPE_MOSTLY_MXFP4_MOE, as llama-quantize names it
    # llama.cpp rounds activations to 8 bits for these matmuls: measured 0.010-0.030
    assert max(_prompt_errors(model, path)) <= 0.08


def test_experts_kept_float_in_one_layer_export(float_gpt_oss, tiny_tokenizer, tmp_path):
    """One layer's experts packed, the other's transformers' own (transposed, interleaved): both
    written in llama.cpp's layout."""
    _, folder, _ = float_gpt_oss
    cfg = GgufQuantizeConfig(quant_type="MXFP4_MOE", modules_to_not_convert=["layers.1.mlp.experts"])
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, quantization_config=cfg)
    assert [type(layer.mlp.experts).__name__ for layer in model.model.layers] == ["GgufExperts", "GptOssExperts"]
    path = save_gguf(model, tmp_path / "mixed.gguf", tokenizer=tiny_tokenizer)
    types = {n: t.type.name for n, t in read_gguf(path).tensors.items()}
    assert (types["blk.0.ffn_up_exps.weight"], types["blk.1.ffn_up_exps.weight"]) == ("MXFP4", "F32")
    assert max(_prompt_errors(model, path)) <= 0.08
