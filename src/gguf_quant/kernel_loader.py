"""Finds the compiled GGUF kernels, if any, and says which op/type pairs they cover.

Resolution, done once per process on the first op call on a CUDA device:

1. an explicit local build: `GGUF_QUANT_KERNELS=<path>` (the folder holding `build/`, `build/`
   itself, or one variant folder), loaded with `kernels.get_local_kernel`;
2. `LOCAL_KERNELS=gguf-quant/gguf-kernels=<path>`, honoured by `kernels.get_kernel`;
3. the Hub: `kernels.get_kernel("gguf-quant/gguf-kernels", version=1)` (skipped when
   `GGUF_QUANT_KERNELS_HUB=0`, or when `LOCAL_KERNELS` already names the repository);
4. none: every op runs the pure-torch path.

`GGUF_QUANT_KERNELS=0` (or `off`, `none`) turns the kernels off. Which one is used is logged
once, at INFO level, on the `gguf_quant.kernel_loader` logger. Any failure along the way is
caught (and logged) and the next source is tried: the kernel is an accelerator, never a
requirement.
"""
from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from types import ModuleType
from typing import Callable

import torch

logger = logging.getLogger(__name__)

REPO_ID = "gguf-quant/gguf-kernels"
KERNEL_VERSION = 1
ENV_PATH = "GGUF_QUANT_KERNELS"
ENV_HUB = "GGUF_QUANT_KERNELS_HUB"
# "quantize" is looked up only when the module has it (builds before it lack the function).
OPS = ("dequantize", "get_rows", "matmul", "moe_matmul", "quantize")
_OFF = {"0", "off", "none", "false", "no"}

_lock = threading.Lock()
_resolved = False
_module: ModuleType | None = None
_source: str = "pure torch"
_table: dict[tuple[str, int], Callable] = {}


def _load_local(path: str) -> ModuleType:
    import kernels

    return kernels.get_local_kernel(Path(path))


def _load_repo() -> ModuleType:
    import kernels

    # Our own repository: trusted explicitly (kernels trusts only a few organisations by default).
    return kernels.get_kernel(REPO_ID, version=KERNEL_VERSION, trust_remote_code=[REPO_ID])


def _candidates() -> list[tuple[str, Callable[[], ModuleType]]]:
    """(description, loader) in resolution order, from the environment as it is now."""
    out: list[tuple[str, Callable[[], ModuleType]]] = []
    path = os.environ.get(ENV_PATH, "").strip()
    if path:
        out.append((f"local build {path} ({ENV_PATH})", lambda: _load_local(path)))
    local = os.environ.get("LOCAL_KERNELS", "")
    if any(entry.split("=", 1)[0] == REPO_ID for entry in local.split(":") if "=" in entry):
        # kernels.get_kernel resolves the override itself; with it set, the Hub is not asked.
        out.append((f"local build for {REPO_ID} (LOCAL_KERNELS)", _load_repo))
    elif os.environ.get(ENV_HUB, "1").strip().lower() not in _OFF:
        out.append((f"the Hub ({REPO_ID}, version {KERNEL_VERSION})", _load_repo))
    return out


def _build_table(module: ModuleType) -> dict[tuple[str, int], Callable]:
    supported = getattr(module, "SUPPORTED_TYPES", None)
    supports = getattr(module, "supports", None)
    table = {}
    for op in OPS:
        fn = getattr(module, op, None)
        if fn is None or supported is None:
            continue
        for qtype in supported:
            if supports is None or supports(op, qtype):
                table[(op, int(qtype))] = fn
    return table


def _resolve() -> None:
    global _resolved, _module, _source, _table
    with _lock:
        if _resolved:
            return
        module, source, errors = None, "pure torch", []
        if os.environ.get(ENV_PATH, "").strip().lower() in _OFF and os.environ.get(ENV_PATH, "").strip():
            source = f"pure torch ({ENV_PATH}={os.environ[ENV_PATH]})"
        else:
            for desc, load in _candidates():
                try:
                    module = load()
                    table = _build_table(module)
                    if not table:
                        raise RuntimeError("the module exposes no supported ops")
                    source = desc
                    break
                except Exception as e:  # noqa: BLE001 - any failure means: try the next source
                    module = None
                    errors.append(f"{desc}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
                    level = logging.WARNING if ENV_PATH in desc else logging.DEBUG
                    logger.log(level, "gguf_quant: could not load kernels from %s: %s", desc, e)
        _module = module
        _source = source
        _table = _build_table(module) if module is not None else {}
        _resolved = True
        if module is not None:
            logger.info("gguf_quant: using CUDA kernels from %s (%d op/type pairs)", source, len(_table))
        else:
            detail = f" ({'; '.join(errors)})" if errors else ""
            logger.info("gguf_quant: no CUDA kernels loaded, using the pure-torch path%s", detail)


def kernel_module() -> ModuleType | None:
    """The loaded kernel module, resolving it first if needed (None: pure-torch path)."""
    if not _resolved:
        _resolve()
    return _module


def kernel_source() -> str:
    """Where the kernels came from ("pure torch" when none)."""
    if not _resolved:
        _resolve()
    return _source


def kernel_op(op: str, qtype: int, device: torch.device) -> Callable | None:
    """The kernel's implementation of `op` for `qtype` on `device`, or None for the torch path.

    Called on every op call: after the first call on a CUDA device it is one dict lookup.
    """
    if device.type != "cuda":
        return None
    if not _resolved:
        _resolve()
    return _table.get((op, int(qtype)))


def reset() -> None:
    """Forget the resolution (tests; or after changing the environment)."""
    global _resolved, _module, _source, _table
    with _lock:
        _resolved, _module, _source, _table = False, None, "pure torch", {}
