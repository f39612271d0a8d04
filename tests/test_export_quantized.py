"""A real model quantized while it loads and exported with `save_gguf` runs in llama.cpp and
agrees with us: SmolLM2's weights unpacked to bf16 by transformers' own loader, saved as an
ordinary checkpoint, then loaded with `GgufQuantizeConfig(quant_type=...)`."""
import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from gguf_quant import GgufQuantizeConfig, save_gguf
from gguf_quant.gguf_io.reader import read_gguf

from llamacpp_ref import PROMPTS, LlamaCppModel, rel_l2
from test_archs import transformers_own_loader

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]


@pytest.fixture(scope="module")
def bf16_checkpoint(smollm2_path, tmp_path_factory):
    with transformers_own_loader():
        dense = AutoModelForCausalLM.from_pretrained(str(smollm2_path.parent), gguf_file=smollm2_path.name, dtype=torch.bfloat16)
    dense.hf_quantizer.remove_quantization_config(dense)
    folder = tmp_path_factory.mktemp("smollm2-bf16")
    dense.save_pretrained(folder)
    return folder


@pytest.mark.parametrize("mix", ["Q8_0", "Q4_K_M"])
def test_quantized_on_load_exports_and_agrees_with_llamacpp(mix, bf16_checkpoint, smollm2_path, tmp_path):
    model = AutoModelForCausalLM.from_pretrained(
        bf16_checkpoint, dtype=torch.float32, quantization_config=GgufQuantizeConfig(quant_type=mix)
    )
    tokenizer = AutoTokenizer.from_pretrained(str(smollm2_path.parent), gguf_file=smollm2_path.name)
    path = save_gguf(model, tmp_path / f"smollm2-{mix}.gguf", tokenizer=tokenizer)
    written = read_gguf(path)
    assert {t.type.name for t in written.tensors.values() if t.type.quantized} == set(model.gguf_report.packed.values())

    ref = LlamaCppModel(path)
    errors, agree, total = [], 0, 0
    for prompt in PROMPTS:
        ids = ref.tokenize(prompt)
        with torch.no_grad():
            ours = model(torch.tensor([ids])).logits[0].numpy()
        theirs = ref.logits(ids)
        errors.append(rel_l2(ours, theirs))
        agree += int((ours.argmax(-1) == theirs.argmax(-1)).sum())
        total += len(ids)
    print(mix, "relative L2 per prompt:", np.round(errors, 4), "argmax agreement:", agree / total)
    assert max(errors) <= 0.08
    assert np.mean(errors) <= 0.06
    assert agree / total >= 0.93
