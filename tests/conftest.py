import pytest
import torch

from gguf_quant import samples


def _path_or_skip(fn):
    try:
        return fn()
    except FileNotFoundError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="session")
def smollm2_path():
    return _path_or_skip(samples.smollm2_path)


@pytest.fixture(scope="session")
def gemma3_path():
    return _path_or_skip(samples.gemma3_path)


@pytest.fixture(scope="session")
def llama_source(tmp_path_factory):
    """A tiny llama GGUF with SmolLM2's vocabulary (tests/data/vocab.gguf)."""
    from tiny_gguf import write_tiny

    return write_tiny(tmp_path_factory.mktemp("llama") / "tied-llama.gguf", "llama", "Q8_0")


@pytest.fixture
def stop_checks_built(monkeypatch):
    """The class names of the stop checks that `generate` builds while the test runs (transformers' StopCheck
    or its DeferredStopCheck), in order."""
    from transformers.generation import utils as generation_utils

    built = []
    init = generation_utils.StopCheck.__init__

    def record(self, *args, **kwargs):
        built.append(type(self).__name__)
        init(self, *args, **kwargs)

    monkeypatch.setattr(generation_utils.StopCheck, "__init__", record)
    return built


@pytest.fixture(scope="session")
def tiny_tokenizer(llama_source):
    """That vocabulary as a transformers tokenizer, for exports of models built in transformers."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(llama_source.parent), gguf_file=llama_source.name)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(scope="module")
def one_torch_thread():
    """Small tensors on 2 shared cores: a second intra-op thread only adds contention."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
