"""Quantizing while loading (bit-exact with llama-quantize), save_pretrained round trips."""
import pytest
import torch
from transformers import AutoModelForCausalLM

from gguf_quant import GgufQuantizeConfig
from gguf_quant.modules import GgufEmbedding, GgufExperts, GgufLinear

from test_archs import IDS, transformers_own_loader
from tiny_gguf import Shape, quantize_with_llamacpp, write_tiny


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _gguf(path, **kwargs):
    return AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, **kwargs)


def _logits(model, ids=IDS):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits


def _packed(model) -> dict[str, tuple[int, torch.Tensor]]:
    out = {}
    for name, module in model.named_modules():
        if isinstance(module, (GgufLinear, GgufEmbedding)):
            out[f"{name}.weight"] = (module.qtype, module.weight)
        elif isinstance(module, GgufExperts):
            out[f"{name}.gate_up_proj"] = (module.gate_up_qtype, module.gate_up_proj)
            out[f"{name}.down_proj"] = (module.down_qtype, module.down_proj)
    return out


def _float_checkpoint(model, folder):
    """Save a model as an ordinary float checkpoint (no quantization config)."""
    model.hf_quantizer.remove_quantization_config(model)
    model.save_pretrained(folder)
    return folder


def _assert_same_packed(a, b):
    pa, pb = _packed(a), _packed(b)
    assert pa.keys() == pb.keys() and pa
    for name in pa:
        assert pa[name][0] == pb[name][0], name
        assert torch.equal(pa[name][1], pb[name][1]), name


@pytest.mark.slow
def test_gguf_save_reload_is_byte_identical(smollm2_path, tmp_path):
    model = _gguf(smollm2_path, dtype=torch.float32)
    model.save_pretrained(tmp_path / "saved", max_shard_size="40MB")
    assert len(list((tmp_path / "saved").glob("*.safetensors"))) > 1  # sharded
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "saved", dtype=torch.float32)
    _assert_same_packed(model, reloaded)
    assert reloaded.lm_head.weight.data_ptr() == reloaded.model.embed_tokens.weight.data_ptr()
    assert torch.equal(_logits(model), _logits(reloaded))


@pytest.mark.parametrize("how", ["deepcopy", "torch.save"])
def test_loaded_model_copies(llama_source, how):
    """`copy.deepcopy` and `torch.save` / `torch.load` of a whole GGUF-loaded model (its quantizer holds
    the file's memory map): an independent copy with the same packed weights and logits."""
    import copy
    import io

    model = _gguf(llama_source, dtype=torch.float32)
    if how == "deepcopy":
        twin = copy.deepcopy(model)
    else:
        buf = io.BytesIO()
        torch.save(model, buf)
        buf.seek(0)
        twin = torch.load(buf, weights_only=False)
        assert twin.hf_quantizer.gguf.raw("blk.0.ffn_down.weight").shape == model.hf_quantizer.gguf.raw("blk.0.ffn_down.weight").shape
    _assert_same_packed(model, twin)
    assert twin.model.layers[0].mlp.down_proj.weight.data_ptr() != model.model.layers[0].mlp.down_proj.weight.data_ptr()
    assert torch.equal(_logits(model), _logits(twin))


@pytest.mark.parametrize("arch, qtype", [("qwen3moe", "Q4_0"), ("gpt-oss", "MXFP4_MOE")])
def test_moe_gguf_save_reload_is_byte_identical(arch, qtype, tmp_path):
    path = write_tiny(tmp_path / "moe.gguf", arch, qtype, Shape(experts=4, ff_exp=64, window=4), tied=False)
    model = _gguf(path, dtype=torch.float32)
    model.save_pretrained(tmp_path / "saved")
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "saved", dtype=torch.float32)
    assert any(isinstance(m, GgufExperts) for m in reloaded.modules())
    _assert_same_packed(model, reloaded)
    assert torch.equal(_logits(model), _logits(reloaded))


@pytest.mark.slow
def test_bf16_quantize_on_load_save_reload(smollm2_path, tmp_path):
    with transformers_own_loader():
        dense = _gguf(smollm2_path, dtype=torch.bfloat16)
    folder = _float_checkpoint(dense, tmp_path / "bf16")
    q = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16, quantization_config=GgufQuantizeConfig(quant_type="Q8_0"))
    assert q.gguf_report.packed and not any(isinstance(m, torch.nn.Linear) for m in q.modules())
    q.save_pretrained(tmp_path / "q8")
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "q8", dtype=torch.bfloat16)
    _assert_same_packed(q, reloaded)
    assert torch.equal(_logits(q), _logits(reloaded))


MIX_CASES = [
    ("llama", "Q4_K_M", Shape(hidden=256, ff=512, heads=4, kv_heads=1, head_dim=64, layers=8), True),
    ("llama", "Q3_K_M", Shape(hidden=256, ff=512, heads=4, kv_heads=1, head_dim=64, layers=8), False),
    ("qwen3moe", "Q4_K_M", Shape(hidden=256, heads=4, kv_heads=2, head_dim=64, experts=4, ff_exp=256), False),
    ("qwen2", "Q5_K_M", Shape(hidden=256, ff=512, heads=4, kv_heads=2, head_dim=64), True),
    ("llama", "Q4_0", Shape(hidden=96, ff=160), True),  # rows that fit no 256-block: llama.cpp's fallbacks
    ("gemma3", "Q6_K", Shape(hidden=256, ff=512, heads=4, kv_heads=1, head_dim=64), True),
    ("llama", "IQ4_XS", Shape(hidden=256, ff=512, heads=4, kv_heads=1, head_dim=64), False),
]


@pytest.mark.parametrize("arch, mix, shape, tied", MIX_CASES, ids=[f"{c[0]}-{c[1]}" for c in MIX_CASES])
def test_quantize_on_load_equals_llama_quantize(arch, mix, shape, tied, tmp_path):
    """A float model quantized while it loads holds exactly the blocks, with exactly the types,
    that llama.cpp's llama-quantize writes for the same weights."""
    f32 = write_tiny(tmp_path / "f32.gguf", arch, "F32", shape, tied=tied)
    theirs = _gguf(quantize_with_llamacpp(f32, tmp_path / f"{mix}.gguf", mix), dtype=torch.float32)
    folder = _float_checkpoint(_gguf(f32, dtype=torch.float32), tmp_path / "float")
    ours = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, quantization_config=GgufQuantizeConfig(quant_type=mix))
    _assert_same_packed(ours, theirs)


def test_overrides_and_modules_to_not_convert(tmp_path):
    f32 = write_tiny(tmp_path / "f32.gguf", "llama", "F32", Shape(), tied=False)
    folder = _float_checkpoint(_gguf(f32, dtype=torch.float32), tmp_path / "float")
    cfg = GgufQuantizeConfig(quant_type="Q4_0", modules_to_not_convert=["lm_head"], module_types={"v_proj": "Q8_0"})
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, quantization_config=cfg)
    assert type(model.lm_head) is torch.nn.Linear
    assert model.model.layers[0].self_attn.v_proj.qtype == 8  # Q8_0
    assert model.model.layers[0].self_attn.q_proj.qtype == 2  # Q4_0


def test_quant_type_on_a_gguf_file_is_refused(tmp_path):
    path = write_tiny(tmp_path / "t.gguf", "llama", "Q8_0")
    with pytest.raises(ValueError, match=r"t\.gguf.*quant_type='Q4_0'.*already a GGUF file"):
        _gguf(path, quantization_config=GgufQuantizeConfig(quant_type="Q4_0"))


def test_dequantized_load_saves_and_reloads_as_floats(tmp_path):
    path = write_tiny(tmp_path / "t.gguf", "llama", "Q8_0")
    model = _gguf(path, dtype=torch.float32, quantization_config=GgufQuantizeConfig(dequantize=True))
    assert not _packed(model) and set(model.gguf_report.unpacked)
    model.save_pretrained(tmp_path / "saved")
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "saved", dtype=torch.float32)
    assert not _packed(reloaded)
    assert torch.equal(_logits(model), _logits(reloaded))


@pytest.mark.parametrize("arch, qtype, shape", [
    ("qwen3moe", "Q4_0", Shape(experts=4, used=2, ff_exp=64)),
    ("gpt-oss", "MXFP4_MOE", Shape(experts=4, used=2, ff_exp=64)),
])
def test_dequantize_in_place_equals_a_dequantized_load(arch, qtype, shape, tmp_path):
    """`model.dequantize()` with experts (gpt-oss's transposed, interleaved layout and biases included):
    the same float modules and tensors as `GgufQuantizeConfig(dequantize=True)`, and it saves and reloads
    as an ordinary float checkpoint."""
    path = write_tiny(tmp_path / f"{arch}.gguf", arch, qtype, shape, tied=False)
    model = _gguf(path, dtype=torch.float32)
    ref = _logits(model)
    model.dequantize()
    loaded = _gguf(path, dtype=torch.float32, quantization_config=GgufQuantizeConfig(dequantize=True))
    mine, theirs = model.state_dict(), loaded.state_dict()
    assert not _packed(model) and mine.keys() == theirs.keys()
    for name, t in theirs.items():
        assert torch.equal(mine[name], t), name
    assert type(model.model.layers[0].mlp.experts) is type(loaded.model.layers[0].mlp.experts)
    torch.testing.assert_close(_logits(model), ref, rtol=1e-4, atol=1e-4)
    model.save_pretrained(tmp_path / "saved")
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "saved", dtype=torch.float32)
    assert not _packed(reloaded) and getattr(reloaded.config, "quantization_config", None) is None
    assert torch.equal(_logits(model), _logits(reloaded))
