"""gpt-oss as openai ships it: experts in MXFP4 (`*_blocks` / `*_scales`, `quant_method: mxfp4` in
config.json). Loaded with `GgufQuantizeConfig(quant_type=...)`, MXFP4 experts are repacked byte for
byte into ggml's MXFP4 blocks (llama.cpp's layout); other types requantize the exact values.
transformers' own dequantizer is the reference."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, Mxfp4Config
from transformers.integrations.mxfp4 import convert_moe_packed_tensors

from gguf_quant import GgufQuantizeConfig, save_gguf
from gguf_quant.archs.conversions import gpt_oss_llamacpp_parts
from gguf_quant.ggml import dequantize, quantize
from gguf_quant.modules import GgufExperts

from llamacpp_ref import rel_l2
from test_gptoss_export import _gpt_oss, _prompt_errors
from test_roundtrip import _assert_same_packed

pytestmark = pytest.mark.usefixtures("one_torch_thread")

IDS = torch.tensor([list(range(1, 40, 3))])
_NOT_EXPERTS = ["q_proj", "k_proj", "v_proj", "o_proj", "embed_tokens", "lm_head"]
_MXFP4_CONFIG = {  # as in openai/gpt-oss-20b's config.json
    "quant_method": "mxfp4",
    "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"],
}


def _mxfp4_tensors(shape: tuple[int, ...], g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Random openai MXFP4 `[E, rows, cols]`: blocks `[E, rows, cols/32, 16]`, scales around 2^-7."""
    e, rows, cols = shape
    blocks = torch.randint(0, 256, (e, rows, cols // 32, 16), generator=g, dtype=torch.uint8)
    scales = torch.randint(127 - 9, 127 - 5, (e, rows, cols // 32), generator=g, dtype=torch.uint8)
    return blocks, scales


@pytest.fixture(scope="module")
def mxfp4_dir(tiny_tokenizer, tmp_path_factory):
    """A tiny gpt-oss checkpoint in openai's format: the float experts replaced by MXFP4 ones."""
    folder = tmp_path_factory.mktemp("gpt-oss-mxfp4")
    model = _gpt_oss(len(tiny_tokenizer))
    model.save_pretrained(folder)
    tensors = load_file(folder / "model.safetensors")
    g = torch.Generator().manual_seed(1)
    text = model.config
    e, h, i = text.num_local_experts, text.hidden_size, text.intermediate_size
    for layer in range(text.num_hidden_layers):
        prefix = f"model.layers.{layer}.mlp.experts"
        for param, shape in (("gate_up_proj", (e, 2 * i, h)), ("down_proj", (e, h, i))):
            del tensors[f"{prefix}.{param}"]
            tensors[f"{prefix}.{param}_blocks"], tensors[f"{prefix}.{param}_scales"] = _mxfp4_tensors(shape, g)
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "quantization_config": _MXFP4_CONFIG}))
    return folder


@pytest.fixture(scope="module")
def reference(mxfp4_dir):
    """transformers' own MXFP4 load, dequantized to float32 (its CPU path without kernels)."""
    return AutoModelForCausalLM.from_pretrained(
        mxfp4_dir, dtype=torch.float32, quantization_config=Mxfp4Config(dequantize=True)
    ).eval()


def _load(folder, **config):
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, quantization_config=GgufQuantizeConfig(**config))


@pytest.fixture(scope="module")
def mxfp4_moe(mxfp4_dir):
    return _load(mxfp4_dir, quant_type="MXFP4_MOE")


def _source(folder, layer: int, param: str) -> tuple[torch.Tensor, torch.Tensor]:
    t = load_file(folder / "model.safetensors")
    prefix = f"model.layers.{layer}.mlp.experts.{param}"
    return t[f"{prefix}_blocks"], t[f"{prefix}_scales"]


def _llamacpp_float(folder, layer: int, param: str) -> torch.Tensor:
    """transformers' dequantization of one expert weight, in llama.cpp's layout (gate rows, up rows)."""
    dense = convert_moe_packed_tensors(*_source(folder, layer, param), dtype=torch.float32)
    return torch.cat(gpt_oss_llamacpp_parts(dense, "gate_up" if param == "gate_up_proj" else "down"), dim=1)


def _logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(IDS).logits[0]


def test_mxfp4_experts_are_repacked_byte_for_byte(mxfp4_moe, mxfp4_dir):
    model = mxfp4_moe
    assert all(isinstance(layer.mlp.experts, GgufExperts) for layer in model.model.layers)
    assert model.gguf_report.unpacked == {}
    assert isinstance(model.config.quantization_config, GgufQuantizeConfig)
    for layer, experts in enumerate(model.model.layers):
        experts = experts.mlp.experts
        for param in ("gate_up_proj", "down_proj"):
            packed = getattr(experts, param)
            assert getattr(experts, param.replace("_proj", "_qtype")) == 39  # GGML_TYPE_MXFP4
            blocks, scales = _source(mxfp4_dir, layer, param)
            if param == "gate_up_proj":  # openai interleaves gate and up rows; llama.cpp stacks them
                blocks, scales = (torch.cat((t[:, 0::2], t[:, 1::2]), dim=1) for t in (blocks, scales))
            ggml = packed.unflatten(-1, (-1, 17))
            assert torch.equal(ggml[..., 0], scales)
            # element j: openai's nibble j % 2 of byte j // 2; ggml's nibble j // 16 of qs[j % 16]
            for j in range(32):
                theirs = (blocks[..., j // 2] >> (4 * (j % 2))) & 15
                ours = (ggml[..., 1 + j % 16] >> (4 * (j // 16))) & 15
                assert torch.equal(ours, theirs), (layer, param, j)
            # and the values are transformers' (signed zeros included: same codes)
            assert torch.equal(dequantize(packed, "MXFP4"), _llamacpp_float(mxfp4_dir, layer, param))


def test_mxfp4_logits_equal_transformers_dequantized(mxfp4_dir, reference):
    assert type(reference.model.layers[0].mlp.experts).__name__ == "GptOssExperts"
    # only the experts packed (the mix puts the rest in Q8_0): the same values as transformers' model
    model = _load(mxfp4_dir, quant_type="MXFP4_MOE", modules_to_not_convert=_NOT_EXPERTS)
    assert set(model.gguf_report.packed) == {f"model.layers.{i}.mlp.experts.{p}" for i in (0, 1) for p in ("gate_up_proj", "down_proj")}
    ours, theirs = _logits(model), _logits(reference)
    print("MXFP4_MOE vs transformers' dequantized: relative L2", rel_l2(ours.numpy(), theirs.numpy()))
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-5)


def test_mxfp4_save_reload_and_export(mxfp4_moe, tiny_tokenizer, tmp_path):
    model = mxfp4_moe
    model.save_pretrained(tmp_path / "saved")
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "saved", dtype=torch.float32)
    _assert_same_packed(model, reloaded)
    assert torch.equal(_logits(model), _logits(reloaded))
    path = save_gguf(model, tmp_path / "mxfp4.gguf", tokenizer=tiny_tokenizer)
    # llama.cpp rounds activations to 8 bits for these matmuls (as in test_gptoss_export)
    assert max(_prompt_errors(model, path)) <= 0.08


def test_q8_0_requantizes_the_exact_values(mxfp4_dir, reference):
    model = _load(mxfp4_dir, quant_type="Q8_0")
    for layer, block in enumerate(model.model.layers):
        experts = block.mlp.experts
        assert isinstance(experts, GgufExperts) and experts.gate_up_qtype == experts.down_qtype == 8  # Q8_0
        for param in ("gate_up_proj", "down_proj"):
            assert torch.equal(getattr(experts, param), quantize(_llamacpp_float(mxfp4_dir, layer, param), "Q8_0"))
    assert rel_l2(_logits(model).numpy(), _logits(reference).numpy()) <= 0.02


def test_experts_kept_float_are_transformers_dequantized(mxfp4_dir, reference):
    model = _load(mxfp4_dir, quant_type="MXFP4_MOE", modules_to_not_convert=["layers.1.mlp.experts", *_NOT_EXPERTS])
    assert [type(layer.mlp.experts).__name__ for layer in model.model.layers] == ["GgufExperts", "GptOssExperts"]
    ours, theirs = model.model.layers[1].mlp.experts, reference.model.layers[1].mlp.experts
    for param in ("gate_up_proj", "down_proj", "gate_up_proj_bias"):
        assert torch.equal(getattr(ours, param), getattr(theirs, param)), param
    torch.testing.assert_close(_logits(model), _logits(reference), rtol=1e-4, atol=1e-5)
