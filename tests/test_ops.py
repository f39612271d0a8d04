"""The packed ops on the pure-torch path: against plain dense math on gguf-py's dequantization."""
import pytest
import torch
from gguf import GGMLQuantizationType
from gguf.quants import dequantize as np_dequantize
from gguf.quants import quantize as np_quantize

from gguf_quant import ops
from gguf_quant.ggml.types import ggml_type

TYPES = ["Q8_0", "Q4_0", "Q5_1"]


def _packed(rows, cols, name):
    w = torch.randn(rows, cols).numpy()
    q = np_quantize(w, GGMLQuantizationType[name])
    dense = torch.from_numpy(np_dequantize(q, GGMLQuantizationType[name]).copy())
    return torch.from_numpy(q.copy()), dense, ggml_type(name).id


@pytest.mark.parametrize("name", TYPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matmul_equals_dense(name, dtype):
    packed, dense, qt = _packed(48, 96, name)
    x = torch.randn(5, 96).to(dtype)
    out = ops.matmul(x, packed, qt)
    assert out.dtype == dtype and out.shape == (5, 48)
    ref = x.double() @ dense.double().T
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    assert (out.double() - ref).norm() / ref.norm() < tol


def test_matmul_chunks_rows(monkeypatch):
    # Force several chunks: the result must not depend on the chunking.
    packed, dense, qt = _packed(40, 64, "Q8_0")
    x = torch.randn(3, 64)
    whole = ops.matmul(x, packed, qt)
    monkeypatch.setattr(ops, "_CHUNK_ELEMENTS", 64 * 7)
    torch.testing.assert_close(ops._torch_matmul(x, packed, qt), whole, rtol=1e-6, atol=1e-6)


def test_get_rows_and_dequantize(name="Q4_0"):
    packed, dense, qt = _packed(16, 64, name)
    ids = torch.tensor([[3, 0], [15, 3]])
    rows = ops.get_rows(packed, ids, qt, torch.float32)
    assert rows.shape == (2, 2, 64)
    assert torch.equal(rows, dense[ids])
    assert torch.equal(ops.dequantize(packed, qt, torch.float32), dense)


@pytest.mark.parametrize("per_slot_input", [False, True])
def test_moe_matmul_equals_per_expert_loop(per_slot_input):
    experts, n, k, t, top_k = 6, 24, 64, 7, 2
    parts = [_packed(n, k, "Q8_0") for _ in range(experts)]
    packed = torch.stack([p for p, _, _ in parts])
    dense = torch.stack([d for _, d, _ in parts])
    qt = parts[0][2]
    ids = torch.randint(0, experts, (t, top_k))
    x = torch.randn(t, top_k, k) if per_slot_input else torch.randn(t, k)
    out = ops.moe_matmul(x, packed, ids, qt)
    assert out.shape == (t, top_k, n)
    for i in range(t):
        for j in range(top_k):
            row = x[i, j] if per_slot_input else x[i]
            torch.testing.assert_close(out[i, j], dense[ids[i, j]] @ row, rtol=1e-5, atol=1e-5)


def test_modules_call_the_kernel_directly_only_in_eager_inference(monkeypatch):
    """run_matmul / run_moe_matmul / run_get_rows (what GgufLinear, GgufExperts and GgufEmbedding
    call) skip the custom op's dispatch and call the kernel function, or with no kernel the torch
    path, themselves in eager inference, and go through the op where it matters: a gradient to
    record, or torch.compile tracing. A stand-in kernel (the torch path, counting its calls) takes
    the place of the CUDA one."""
    packed, dense, qt = _packed(32, 64, "Q8_0")
    experts = torch.stack([packed, packed])
    ids = torch.tensor([[0, 1], [1, 0]])
    calls = []
    kernels = {"matmul": lambda x, p, q: calls.append("matmul") or ops._torch_matmul(x, p, q),
               "get_rows": lambda p, i, q, dt: calls.append("rows") or ops._dequantize(p[i], q, dt),
               "moe_matmul": lambda x, p, i, q: calls.append("moe") or torch.stack(
                   [torch.stack([ops._torch_matmul(x[t:t + 1], p[e], q)[0] for e in i[t].tolist()])
                    for t in range(i.shape[0])])}
    monkeypatch.setattr(ops, "_kernel", lambda op, qtype, *tensors: kernels.get(op))
    via_op = []
    real_matmul, real_moe = ops.matmul, ops.moe_matmul
    monkeypatch.setattr(ops, "matmul", lambda *a: via_op.append("matmul") or real_matmul(*a))
    monkeypatch.setattr(ops, "moe_matmul", lambda *a: via_op.append("moe") or real_moe(*a))
    monkeypatch.setattr(ops, "get_rows", lambda *a: via_op.append("rows"))
    x = torch.randn(2, 64)
    with torch.no_grad():
        out = ops.run_matmul(x, packed, qt)
        moe = ops.run_moe_matmul(x, experts, ids, qt)
    rows = ops.run_get_rows(packed, torch.tensor([3, 0]), qt, torch.float32)  # ids: never a gradient
    torch.testing.assert_close(out, x @ dense.T, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(moe[0, 1], x[0] @ dense.T, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rows, dense[[3, 0]])
    assert calls == ["matmul", "moe", "rows"] and via_op == []
    xg = x.clone().requires_grad_()
    ops.run_matmul(xg, packed, qt).sum().backward()  # through the op: its autograd formula
    torch.testing.assert_close(xg.grad, dense.sum(0).expand(2, -1), rtol=1e-5, atol=1e-5)
    ops.run_moe_matmul(xg, experts, ids, qt)
    assert via_op == ["matmul", "moe"]
    assert ops._eager(x)
    traced = torch.compile(lambda x: torch.tensor(not ops._eager(x)), fullgraph=True, backend="eager")
    assert bool(traced(x))  # while torch.compile traces, the op (its fake implementation) is used
    # with no kernel at all, eager inference runs the torch path without the op's dispatch too
    monkeypatch.setattr(ops, "_kernel", lambda op, qtype, *tensors: None)
    with torch.no_grad():
        out = ops.run_matmul(x, packed, qt)
        moe = ops.run_moe_matmul(x, experts, ids, qt)
    torch.testing.assert_close(out, x @ dense.T, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(moe[1, 0], x[1] @ dense.T, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ops.run_get_rows(packed, torch.tensor([5]), qt, torch.float32), dense[[5]])
    assert via_op == ["matmul", "moe"]


def test_ops_pass_opcheck():
    packed, _, qt = _packed(16, 64, "Q8_0")
    ids = torch.tensor([1, 5])
    torch.library.opcheck(ops.matmul, (torch.randn(3, 64), packed, qt))
    torch.library.opcheck(ops.dequantize, (packed, qt, torch.float32))
    torch.library.opcheck(ops.get_rows, (packed, ids, qt, torch.float32))
    experts = torch.stack([packed, packed])
    torch.library.opcheck(ops.moe_matmul, (torch.randn(2, 64), experts, torch.tensor([[0, 1], [1, 1]]), qt))


def test_compiles_fullgraph():
    packed, dense, qt = _packed(32, 64, "Q8_0")
    fn = torch.compile(lambda x: ops.matmul(x, packed, qt).relu(), fullgraph=True, backend="eager")
    x = torch.randn(4, 64)
    torch.testing.assert_close(fn(x), (x @ dense.T).relu(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("arch, qtype, experts", [("llama", "Q4_0", 0), ("qwen3moe", "Q8_0", 4)])
def test_whole_packed_model_compiles_fullgraph(arch, qtype, experts, tmp_path):
    """No graph break anywhere in a packed model's forward, dense or MoE (the ops' fake
    implementations carry torch.compile through them)."""
    from transformers import AutoModelForCausalLM

    from tiny_gguf import Shape, write_tiny

    path = write_tiny(tmp_path / "m.gguf", arch, qtype, Shape(experts=experts, ff_exp=64), tied=False)
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    ids = torch.tensor([[1, 504, 3458, 281, 260, 1345]])
    with torch.no_grad():
        ref = model(ids).logits
        out = torch.compile(model, fullgraph=True, backend="eager")(ids).logits
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_gradients_flow_through_packed_weights():
    """Frozen blocks, trainable everything else: x gets exact gradients (gradcheck in float64)."""
    packed, dense, qt = _packed(24, 64, "Q4_0")
    x = torch.randn(3, 64, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: ops.matmul(x, packed, qt), (x,))
    experts = torch.stack([packed, _packed(24, 64, "Q4_0")[0]])
    ids = torch.tensor([[0, 1], [1, 1], [0, 0]])
    assert torch.autograd.gradcheck(lambda x: ops.moe_matmul(x, experts, ids, qt), (x,))
    x3 = torch.randn(3, 2, 64, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: ops.moe_matmul(x, experts, ids, qt), (x3,))
    torch.library.opcheck(ops.matmul, (torch.randn(3, 64, requires_grad=True), packed, qt))


@pytest.mark.parametrize("arch, experts", [("llama", 0), ("qwen3moe", 4)])
def test_backward_through_a_packed_model(arch, experts, tmp_path):
    """The float parameters around the blocks (norms, biases, routers) train; the blocks stay frozen."""
    from transformers import AutoModelForCausalLM

    from tiny_gguf import Shape, write_tiny

    path = write_tiny(tmp_path / "m.gguf", arch, "Q8_0", Shape(experts=experts, ff_exp=64), tied=False)
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    model(torch.tensor([[1, 504, 3458, 281]]), labels=torch.tensor([[1, 504, 3458, 281]])).loss.backward()
    norm = model.model.layers[0].input_layernorm.weight
    assert norm.grad is not None and norm.grad.abs().sum() > 0
    assert all(p.grad is None for p in model.parameters() if p.dtype == torch.uint8)
