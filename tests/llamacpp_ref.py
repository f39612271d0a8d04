"""llama.cpp (through llama-cpp-python, built on CPU) as the reference for logits."""
from __future__ import annotations

import numpy as np
import pytest

PROMPTS = [
    "The capital of France is Paris, and the capital of Germany is",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return",
    "Once upon a time, in a small village at the edge of the forest, there lived",
    "Water boils at 100 degrees Celsius at sea level. At higher altitudes,",
    "Translate to French: 'Good morning, how are you today?' ->",
    "The three primary colors are red, blue and",
    "In 1969, Neil Armstrong became the first person to",
    "Question: What is 17 multiplied by 3? Answer:",
]


def open_llama(path, **kwargs):
    """llama_cpp.Llama on path with llama.cpp's plain CPU kernels: no extra buffer types (its AMX and repacked
    weights). A build made with GGML_NATIVE on an AMX machine routes the matmuls to the AMX backend, which
    segfaulted in decode on a Sapphire Rapids host (session 95; ggml-org/llama.cpp#20824, closed unfixed).
    Llama() has no argument for it, so its model parameters' defaults are wrapped while it loads."""
    llama_cpp = pytest.importorskip("llama_cpp")
    low = llama_cpp.llama_cpp
    defaults = low.llama_model_default_params

    def plain():
        params = defaults()
        params.use_extra_bufts = False
        return params

    low.llama_model_default_params = plain
    try:
        return llama_cpp.Llama(model_path=str(path), verbose=False, **kwargs)
    finally:
        low.llama_model_default_params = defaults


class LlamaCppModel:
    """One GGUF file loaded in llama.cpp, answering teacher-forced logits for token ids."""

    def __init__(self, path, n_ctx: int = 128, n_threads: int = 2):
        self.llm = open_llama(path, logits_all=True, n_ctx=n_ctx, n_batch=n_ctx, n_threads=n_threads,
                              n_threads_batch=n_threads)

    def tokenize(self, text: str) -> list[int]:
        return self.llm.tokenize(text.encode(), add_bos=True)

    def logits(self, ids: list[int]) -> np.ndarray:
        self.llm.reset()
        self.llm.eval(ids)
        return np.array(self.llm.scores[: len(ids)], dtype=np.float32)


def rel_l2(ours: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(ours - ref) / np.linalg.norm(ref))
