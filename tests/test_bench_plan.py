"""benchmarks/bench_matmul.py's plan for `--shapes`: a K that a type's blocks (gguf's GGML_QUANT_SIZES) do not divide
is refused by name before anything is timed, not left to fail inside a device call's A/B."""
import pytest

from script_module import ROOT, load_script


def load_bench():
    return load_script(ROOT / "benchmarks" / "bench_matmul.py")


def test_shapes_plan_and_refusal():
    bench = load_bench()
    plan = bench.make_plan(["Q6_K", "MXFP4", "Q4_0"], [1, 8], False, False, [(2816, 4096)])
    assert [(kind, name, K, N, ms) for kind, name, K, N, ms, _ in plan] == [
        ("dense", "Q6_K", 2816, 4096, [1, 8]), ("dense", "MXFP4", 2816, 4096, [1, 8]),
        ("dense", "Q4_0", 2816, 4096, [1, 8])]
    with pytest.raises(SystemExit, match=r"--shapes 2880x2880: K = 2880 is not a multiple of IQ4_XS's 256-element"):
        bench.make_plan(["MXFP4", "IQ4_XS"], [1], False, False, [(2880, 2880)])
