"""Whole models on the GPU: the CUDA kernels (dense and MoE) give the CPU torch path's logits."""
import pytest
import torch
from transformers import AutoModelForCausalLM

from gguf_quant import kernel_loader

from test_archs import IDS
from tiny_gguf import Shape, write_tiny

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

CASES = [
    ("llama", "Q4_0", Shape()),
    ("qwen3moe", "Q8_0", Shape(experts=8, used=2, ff_exp=96)),
    ("qwen2moe", "Q4_1", Shape(experts=8, used=2, ff_exp=64, ff_shexp=96)),
    ("gpt-oss", "MXFP4_MOE", Shape(experts=4, used=2, ff_exp=64)),
]


def _logits(path, device, dtype=torch.float32):
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=dtype, device_map=device)
    with torch.no_grad():
        return model(torch.tensor([IDS], device=device)).logits[0].float().cpu(), model


@pytest.mark.parametrize("arch, qtype, shape", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_gpu_logits_match_cpu(arch, qtype, shape, tmp_path):
    path = write_tiny(tmp_path / f"{arch}.gguf", arch, qtype, shape, tied=False)
    cpu, _ = _logits(path, "cpu")
    gpu, model = _logits(path, "cuda")
    assert kernel_loader.kernel_module() is not None, "no CUDA kernel was loaded"
    assert (gpu - cpu).norm() / cpu.norm() < 1e-3
    out = model.generate(torch.tensor([IDS[:4]], device="cuda"), max_new_tokens=6, do_sample=False)
    assert out.shape == (1, 10)


def split_map(model, first, second) -> dict:
    """A device_map for `model`'s checkpoint: the embeddings and the first half of the layers on
    `first`, the other layers, the final norm and lm_head on `second`."""
    n = len(model.model.layers)
    dm = {f"model.{name}": second if name == "norm" else first for name, _ in model.model.named_children() if name != "layers"}
    dm.update({f"model.layers.{i}": first if i < n // 2 else second for i in range(n)})
    dm["lm_head"] = second
    return dm


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
@pytest.mark.parametrize("arch, qtype, shape", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_model_split_over_two_gpus(arch, qtype, shape, tmp_path):
    """A model split over two GPUs by a device_map (accelerate moves the activations between them), its
    packed layers on each: the same logits as on one GPU, and greedy generation runs."""
    path = write_tiny(tmp_path / f"{arch}.gguf", arch, qtype, shape, tied=False)
    one, model = _logits(path, "cuda:0")
    dm = split_map(model, 0, 1)
    del model
    two = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32, device_map=dm)
    assert {p.device.index for p in two.parameters()} == {0, 1}
    with torch.no_grad():
        logits = two(torch.tensor([IDS], device="cuda:0")).logits[0].float().cpu()
    assert (logits - one).norm() / one.norm() < 1e-4
    out = two.generate(torch.tensor([IDS[:4]], device="cuda:0"), max_new_tokens=6, do_sample=False)
    assert out.shape == (1, 10)


@pytest.mark.slow
def test_smollm2_bf16_on_gpu(smollm2_path):
    cpu, _ = _logits(smollm2_path, "cpu")
    gpu, _ = _logits(smollm2_path, "cuda", torch.bfloat16)
    assert (gpu.argmax(-1) == cpu.argmax(-1)).float().mean() >= 0.9
    assert (gpu - cpu).norm() / cpu.norm() < 0.05


@pytest.fixture(params=["tiny-llama", "smollm2"])
def gpu_source(request, tmp_path):
    """A tiny llama GGUF (always there, the GPU machine has no PyPI) and SmolLM2 from PyPI where installed."""
    if request.param == "smollm2":
        return request.getfixturevalue("smollm2_path")
    return write_tiny(tmp_path / "llama.gguf", "llama", "Q4_0", Shape(), tied=False)


def test_stacked_siblings_on_gpu(gpu_source, tmp_path):
    """A CUDA load stacks q/k/v and gate/up (one kernel launch each): the logits of the same model
    loaded unstacked, and, moved to the CPU and back, stacked again on the device; saved (the stacked
    weights handed over as host copies) and reloaded, the unstacked model's weights."""
    from gguf_quant import GgufQuantizeConfig

    def load(fuse):
        cfg = GgufQuantizeConfig(gguf_file=gpu_source.name, fuse_siblings=fuse)
        return AutoModelForCausalLM.from_pretrained(
            str(gpu_source.parent), gguf_file=gpu_source.name, dtype=torch.bfloat16, device_map="cuda", quantization_config=cfg
        )

    ids = torch.tensor([IDS], device="cuda")
    start = torch.cuda.memory_allocated()
    stacked = load(True)
    held = torch.cuda.memory_allocated()
    plain = load(False)
    assert held - start <= torch.cuda.memory_allocated() - held  # the stacked buffers add nothing
    q = stacked.model.layers[0].self_attn.q_proj
    assert q.group.fused.is_cuda and q.group._holds(q) and plain.model.layers[0].self_attn.q_proj.group is None
    with torch.no_grad():
        ref, out = plain(ids).logits.float(), stacked(ids).logits.float()
        assert (out - ref).norm() / ref.norm() < 1e-2
        stacked.to("cpu").to("cuda")
        assert q.group.fused.is_cuda and q.group._holds(q)
        again = stacked(ids).logits.float()
    assert (again - ref).norm() / ref.norm() < 1e-2
    assert stacked.generate(ids[:, :4], max_new_tokens=8, do_sample=False).shape == (1, 12)
    stacked.save_pretrained(tmp_path / "saved")
    back = AutoModelForCausalLM.from_pretrained(tmp_path / "saved", dtype=torch.bfloat16, device_map="cuda")
    theirs = dict(plain.named_parameters())
    assert all(torch.equal(p, theirs[n]) for n, p in back.named_parameters())


@pytest.mark.cuda_graph  # (the static cache's compiled steps capture graphs: the caching allocator must be on under memcheck)
def test_deferred_stop_check_on_gpu(gpu_source, stop_checks_built):
    """gguf_quant.deferred_stop_check(): generate builds transformers' DeferredStopCheck on CUDA inside the block
    (StopCheck outside it) and returns the same tokens, with the static cache (compiled) and the dynamic one."""
    import gguf_quant

    model = AutoModelForCausalLM.from_pretrained(
        str(gpu_source.parent), gguf_file=gpu_source.name, dtype=torch.bfloat16, device_map="cuda"
    )
    ids = torch.tensor([IDS[:4]], device="cuda")
    for cache in ("static", "dynamic"):
        stop_checks_built.clear()
        plain = model.generate(ids, max_new_tokens=24, do_sample=False, cache_implementation=cache)
        with gguf_quant.deferred_stop_check():
            late = model.generate(ids, max_new_tokens=24, do_sample=False, cache_implementation=cache)
        assert stop_checks_built == ["StopCheck", "DeferredStopCheck"], cache
        assert torch.equal(plain, late), cache
