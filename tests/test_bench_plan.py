"""benchmarks/bench_matmul.py on the CPU: its plan for `--shapes` (a K that a type's blocks, gguf's GGML_QUANT_SIZES,
do not divide is refused by name before anything is timed, not left to fail inside a device call's A/B), and the
reference each timed row's output is checked against."""
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


@pytest.mark.parametrize("name", ["Q4_K", "Q6_K", "IQ4_XS", "MXFP4"])
def test_reference_checks(name):
    """The check each timed row gets: `dequantized` matches gguf-py's dequantizer, `moe_reference` matches each pair's
    row times its expert by gguf-py's weights (token rows and pair rows), and `wrong_rows` flags a row whose output came
    from other weights (what a kernel reading a half-overwritten stage gives) while passing the right one."""
    import numpy as np
    import torch
    from gguf.constants import GGMLQuantizationType
    from gguf.quants import dequantize as np_dequant
    from random_blocks import random_blocks

    bench = load_bench()
    rng = np.random.default_rng(7)
    E, N, K, T, k = 4, 8, 256 if name != "MXFP4" else 64, 3, 2
    packed = random_blocks(name, (E, N), K, rng)
    w_np = np_dequant(packed.reshape(E * N, -1), GGMLQuantizationType[name]).reshape(E, N, K).astype(np.float64)
    w = bench.dequantized(name, torch.from_numpy(packed))
    np.testing.assert_allclose(w.numpy(), w_np, rtol=1e-6, atol=1e-6)

    ids = torch.tensor([[0, 3], [2, 2], [1, 0]])
    for x in (torch.randn(T, K), torch.randn(T, k, K)):
        rows = x.unsqueeze(1).expand(T, k, K) if x.dim() == 2 else x
        want = np.stack([[rows[t, s].double().numpy() @ w_np[ids[t, s]].T for s in range(k)] for t in range(T)])
        got = bench.moe_reference(x, w, ids)
        np.testing.assert_allclose(got.double().numpy(), want, rtol=1e-4, atol=1e-4)

        other = torch.from_numpy(np_dequant(random_blocks(name, (E * N,), K, rng), GGMLQuantizationType[name])
                                 .reshape(E, N, K)).float()
        right = bench.rel_err(bench.moe_reference(x, w, ids).bfloat16(), got)  # a bf16 output of the right weights
        wrong = bench.rel_err(bench.moe_reference(x, other, ids), got)
        rows_out = [dict(kind="moe", type=name, K=K, N=N, M=T, err=right),
                    dict(kind="moe", type=name, K=K, N=N, M=T + 1, err=wrong)]
        bad = bench.wrong_rows(rows_out, None)
        assert [r["M"] for r in bad] == [T + 1], rows_out


def test_saved_rows_keep_the_verdict(tmp_path):
    """A table rewritten from saved rows (device_run.sh adds llama.cpp's column that way) keeps a wrong row's line and
    exits 1; rows saved before the check (no `err`) pass."""
    import json

    bench = load_bench()
    rows = [dict(kind="dense", type="Q4_K", K=4096, N=4096, M=1, us=5.0, gbs=1900.0, tflops=6.7, err=3e-3),
            dict(kind="dense", type="Q4_K", K=4096, N=4096, M=8, us=6.0, gbs=1600.0, tflops=44.0, err=0.41),
            dict(kind="dense", type="Q6_K", K=4096, N=4096, M=1, us=7.0, gbs=1900.0, tflops=4.8)]
    saved, out = tmp_path / "rows.json", tmp_path / "bench.md"
    saved.write_text(json.dumps({"header": "test", "rows": rows}))
    assert bench.main(["--load-rows", str(saved), "--out", str(out)]) == 1
    text = out.read_text()
    assert "WRONG RESULT: dense Q4_K 4096 -> 4096 M = 8: rel err 4.10e-01" in text
    assert text.count("WRONG RESULT") == 1
    saved.write_text(json.dumps({"header": "test", "rows": [rows[0], rows[2]]}))
    assert bench.main(["--load-rows", str(saved), "--out", str(out)]) == 0
    assert "WRONG" not in out.read_text()
