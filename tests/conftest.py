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
