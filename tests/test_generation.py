"""gguf_quant.deferred_stop_check(): transformers' DeferredStopCheck on CUDA inside the block, by transformers'
own rule for MPS, and nothing changed outside it. (Same tokens on a GPU: test_gpu_models.py.)"""
import pytest
import torch
from transformers import AutoModelForCausalLM, DynamicCache, StaticCache
from transformers.generation import utils as generation_utils

import gguf_quant

from test_archs import IDS

CUDA, MPS, CPU = torch.device("cuda"), torch.device("mps"), torch.device("cpu")
supported = generation_utils.DeferredStopCheck.is_supported


def test_cuda_takes_the_mps_rule_inside_the_block_only(llama_source):
    model = AutoModelForCausalLM.from_pretrained(str(llama_source.parent), gguf_file=llama_source.name)
    caches = [None, DynamicCache(config=model.config), StaticCache(config=model.config, max_cache_len=16)]
    cases = [(cache, returned, assistant) for cache in caches for returned in (False, True) for assistant in (False, True)]
    # transformers' own answers, before the block: CUDA never, MPS by its rule (which says yes to some of these)
    mps = [supported(MPS, *case) for case in cases]
    assert not any(supported(CUDA, *case) for case in cases) and any(mps) and not all(mps)
    with gguf_quant.deferred_stop_check():
        assert [generation_utils.DeferredStopCheck.is_supported(CUDA, *case) for case in cases] == mps
        assert not any(generation_utils.DeferredStopCheck.is_supported(CPU, *case) for case in cases)
    assert not any(generation_utils.DeferredStopCheck.is_supported(CUDA, *case) for case in cases)


def test_restored_when_the_block_raises():
    own = generation_utils.DeferredStopCheck.__dict__["is_supported"]
    with pytest.raises(KeyError):
        with gguf_quant.deferred_stop_check():
            assert generation_utils.DeferredStopCheck.__dict__["is_supported"] is not own
            raise KeyError("inside")
    assert generation_utils.DeferredStopCheck.__dict__["is_supported"] is own


def test_cpu_generate_unchanged(llama_source, stop_checks_built):
    """On the CPU the block changes nothing: the same stop check class, the same tokens."""
    model = AutoModelForCausalLM.from_pretrained(str(llama_source.parent), gguf_file=llama_source.name)
    ids = torch.tensor([IDS[:4]])
    plain = model.generate(ids, max_new_tokens=6, do_sample=False, cache_implementation="static")
    with gguf_quant.deferred_stop_check():
        inside = model.generate(ids, max_new_tokens=6, do_sample=False, cache_implementation="static")
    assert torch.equal(plain, inside) and stop_checks_built == ["StopCheck", "StopCheck"]


def test_clear_error_without_the_class(monkeypatch):
    monkeypatch.delattr(generation_utils, "DeferredStopCheck")
    with pytest.raises(RuntimeError, match="DeferredStopCheck"):
        with gguf_quant.deferred_stop_check():
            pass
