"""The loaded CUDA kernel build, or a module-level skip for the GPU-only test files."""
import pytest
import torch

from gguf_quant import kernel_loader


def kernel_module_or_skip():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device", allow_module_level=True)
    module = kernel_loader.kernel_module()
    if module is None:
        pytest.skip("no GGUF kernel build found (build one and set GGUF_QUANT_KERNELS)", allow_module_level=True)
    return module
