"""benchmarks/bench_matmul.py's plan for `--shapes`: a K that a type's blocks (gguf's GGML_QUANT_SIZES) do not divide
is refused by name before anything is timed, not left to fail inside a device call's A/B."""
import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def load_bench():
    sys.path.insert(0, str(BENCH))  # its sibling random_blocks
    try:
        spec = importlib.util.spec_from_file_location("bench_matmul", BENCH / "bench_matmul.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(BENCH))


def test_shapes_plan_and_refusal():
    bench = load_bench()
    plan = bench.make_plan(["Q6_K", "MXFP4", "Q4_0"], [1, 8], False, False, [(2816, 4096)])
    assert [(kind, name, K, N, ms) for kind, name, K, N, ms, _ in plan] == [
        ("dense", "Q6_K", 2816, 4096, [1, 8]), ("dense", "MXFP4", 2816, 4096, [1, 8]),
        ("dense", "Q4_0", 2816, 4096, [1, 8])]
    with pytest.raises(SystemExit, match=r"--shapes 2880x2880: K = 2880 is not a multiple of IQ4_XS's 256-element"):
        bench.make_plan(["MXFP4", "IQ4_XS"], [1], False, False, [(2880, 2880)])
