"""Finds the compiled GGUF kernels, if any, and says which op/type pairs they cover.

Placeholder until the CUDA kernels land: no kernel is ever found, so every op runs the
pure-torch path.
"""
from __future__ import annotations

from typing import Callable

import torch


def kernel_op(op: str, qtype: int, device: torch.device) -> Callable | None:
    """The kernel's implementation of `op` for `qtype` on `device`, or None for the torch path."""
    return None
