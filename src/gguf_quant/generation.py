"""Opt-in help for transformers' `generate` on CUDA: the stop check a step late.

transformers 5.24's `generate` checks after every decoded token whether to stop, and on CUDA it reads that
flag on the host (`StopCheck`), so the GPU idles through the host's whole step before the next one is queued.
Its `DeferredStopCheck` reads the flag and the token one step late, which lets the host queue the next step
while the GPU runs this one; transformers uses it on MPS only. On the H200 an 8B Q4_K_M model decodes at
1.36x the rate with it (`benchmarks/results/e2e_h200.md`, session 66). The tokens are the same: a step taken
past the stop is dropped from the output and from the cache, by transformers' own rule for MPS.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def deferred_stop_check() -> Iterator[None]:
    """`generate` calls inside this block use transformers' `DeferredStopCheck` on CUDA too, with the rule it
    applies on MPS (not for assistant models; with a cache returned to the caller, only one it can crop). The
    class is patched for the whole process while the block runs, and restored when it exits.

        with gguf_quant.deferred_stop_check():
            out = model.generate(ids, max_new_tokens=256, cache_implementation="static")
    """
    from transformers.generation import utils as generation_utils

    cls = getattr(generation_utils, "DeferredStopCheck", None)
    if cls is None or "is_supported" not in cls.__dict__:
        import transformers

        raise RuntimeError(
            f"transformers {transformers.__version__} has no DeferredStopCheck.is_supported in "
            "transformers.generation.utils, which deferred_stop_check() patches (it was written against 5.24)"
        )
    own = cls.__dict__["is_supported"]

    def is_supported(device: torch.device, cache, cache_is_returned: bool, is_assistant: bool) -> bool:
        if device.type == "cuda" and not is_assistant:
            device = torch.device("mps")  # MPS's rule, for the cache it is given
        return own.__func__(device, cache, cache_is_returned, is_assistant)

    cls.is_supported = staticmethod(is_supported)
    try:
        yield
    finally:
        cls.is_supported = own
