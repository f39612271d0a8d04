"""A script of this repository (benchmarks/, kernels-src/gguf_kernels/tools and tests/) imported by its path: they
are not in a package, and some need neither torch nor a GPU to be tested."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_script(path: Path) -> ModuleType:
    """The module that path's file makes, named for its stem, run afresh."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
