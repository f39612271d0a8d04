"""Sibling projections stacked into one matmul (`gguf_quant.fusion`): the same outputs as each
module on its own, whatever the call order and inputs, through compile, moves and save/reload."""
import copy
import io

import pytest
import torch
from gguf import GGMLQuantizationType
from gguf.quants import dequantize as np_dequantize
from gguf.quants import quantize as np_quantize
from torch import nn
from transformers import AutoModelForCausalLM

from gguf_quant import GgufQuantizeConfig, ops, save_gguf
from gguf_quant.fusion import fuse_siblings
from gguf_quant.ggml.types import ggml_type
from gguf_quant.modules import GgufLinear

from test_archs import IDS
from tiny_gguf import Shape, write_tiny

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _linear(rows, cols, name, bias=False):
    """A GgufLinear of gguf-py-quantized random rows, and its dense weight by gguf-py's dequantizer."""
    q = np_quantize(torch.randn(rows, cols).numpy(), GGMLQuantizationType[name])
    m = GgufLinear(cols, rows, ggml_type(name).id, bias=bias)
    m.weight.data = torch.from_numpy(q.copy())
    if bias:
        m.bias.data = torch.randn(rows)
    return m, torch.from_numpy(np_dequantize(q, GGMLQuantizationType[name]).copy()).double()


def _attention(types=("Q8_0", "Q8_0", "Q8_0"), bias=False):
    parent, dense = nn.Module(), {}
    for name, rows, t in zip(("q_proj", "k_proj", "v_proj"), (64, 32, 32), types):
        m, dense[name] = _linear(rows, 96, t, bias)
        setattr(parent, name, m)
    return parent, dense


def _expected(parent, dense, name, x):
    m = getattr(parent, name)
    out = x.double() @ dense[name].T
    return out + m.bias.double() if m.bias is not None else out


def _load(path, fuse=False):
    return AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32,
        quantization_config=GgufQuantizeConfig(gguf_file=path.name, fuse_siblings=fuse),
    )


def _logits(model, ids=IDS):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits


def _count_matmuls(monkeypatch):
    calls = []
    run = ops.run_matmul
    monkeypatch.setattr(ops, "run_matmul", lambda x, packed, qtype: calls.append(packed.shape) or run(x, packed, qtype))
    return calls


@pytest.mark.parametrize("bias", [False, True])
def test_any_call_order_and_input_gets_its_own_product(bias, monkeypatch):
    """Against gguf-py's dequantized weights: the first caller computes all three, a sibling with
    the same tensor takes its part, one with another input (cross-attention) computes afresh."""
    parent, dense = _attention(bias=bias)
    (group,) = fuse_siblings(parent, cpu=True)
    assert group.fused is not None and group.names == ["q_proj", "k_proj", "v_proj"]
    calls = _count_matmuls(monkeypatch)
    for order, two in [
        (("q_proj", "k_proj", "v_proj"), (0, 0, 0)),
        (("v_proj", "q_proj", "k_proj"), (0, 0, 0)),
        (("q_proj", "k_proj", "v_proj"), (0, 1, 1)),
        (("k_proj", "k_proj", "q_proj"), (0, 0, 0)),
    ]:
        fresh = torch.randn(2, 3, 96), torch.randn(2, 3, 96)
        inputs = [fresh[i] for i in two]
        calls.clear()
        for name, t in zip(order, inputs):
            out = getattr(parent, name)(t)
            assert out.shape == (2, 3, getattr(parent, name).out_features)
            ref = _expected(parent, dense, name, t)
            assert (out.double() - ref).norm() / ref.norm() < 1e-5, (order, name)
        assert len(calls) == len({id(t) for t in inputs}) + (order[0] == order[1]), order
        assert all(shape[0] == 128 for shape in calls)


def test_held_products_go_with_their_input(monkeypatch):
    """The siblings' products wait on the input tensor: taken by a call on that tensor while it is
    unchanged, computed again after an in-place write to it (or without a version, in inference
    mode, as the tensor is), and gone from it once every sibling took its own."""
    from gguf_quant.fusion import _HELD
    parent, dense = _attention()
    fuse_siblings(parent, cpu=True)
    calls = _count_matmuls(monkeypatch)
    x = torch.randn(4, 96)
    parent.q_proj(x)
    assert len(getattr(x, _HELD)) == 1
    x.mul_(2)  # what k and v must see now
    for name in ("k_proj", "v_proj", "q_proj"):
        ref = _expected(parent, dense, name, x)
        assert (getattr(parent, name)(x).double() - ref).norm() / ref.norm() < 1e-5, name
    assert len(calls) == 2 and getattr(x, _HELD) == {}
    with torch.inference_mode():
        x = torch.randn(4, 96)
        outs = [getattr(parent, n)(x) for n in ("v_proj", "k_proj", "q_proj")]
    for name, out in zip(("v_proj", "k_proj", "q_proj"), outs):
        ref = _expected(parent, dense, name, x)
        assert (out.double() - ref).norm() / ref.norm() < 1e-5, name
    assert len(calls) == 3 and getattr(x, _HELD) == {}


def test_types_that_differ_are_not_stacked():
    """As llama.cpp's Q4_K_M gives some layers' v a Q6_K: q and k are stacked, v keeps its own weight."""
    parent, dense = _attention(types=("Q4_0", "Q4_0", "Q8_0"))
    (group,) = fuse_siblings(parent, cpu=True)
    assert group.names == ["q_proj", "k_proj"] and parent.v_proj.group is None
    x = torch.randn(5, 96)
    for name in ("q_proj", "k_proj", "v_proj"):
        ref = _expected(parent, dense, name, x)
        assert (getattr(parent, name)(x).double() - ref).norm() / ref.norm() < 1e-5
    parent, _ = _attention(types=("Q4_0", "Q5_1", "Q8_0"))
    assert fuse_siblings(parent, cpu=True) == []


def test_weights_become_views_and_nothing_is_added():
    parent, _ = _attention()
    before = {n: p.clone() for n, p in parent.named_parameters()}
    (group,) = fuse_siblings(parent, cpu=True)
    for name, p in parent.named_parameters():
        assert torch.equal(p, before[name]), name
        assert p.untyped_storage().data_ptr() == group.fused.untyped_storage().data_ptr(), name
    assert group.fused.numel() == sum(p.numel() for p in before.values())


def test_left_alone_on_the_cpu_by_default(llama_source):
    """A CPU load keeps its blocks in the file's mapping: grouped, not copied; a move stacks them
    (here: to the CPU again, with `cpu`)."""
    model = _load(llama_source, fuse=True)
    q = model.model.layers[0].self_attn.q_proj
    assert q.group is not None and q.group.fused is None
    ref = _logits(model)
    for group in {id(m.group): m.group for m in model.modules() if getattr(m, "group", None)}.values():
        group.cpu = True
    model._apply(lambda t: t.clone())
    assert q.group.fused is not None
    torch.testing.assert_close(_logits(model), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("arch, qtype, shape", [
    ("llama", "Q4_1", Shape()),
    ("qwen2", "Q8_0", Shape()),
    ("qwen2moe", "Q4_0", Shape(experts=4, used=2, ff_exp=64, ff_shexp=96)),
])
def test_stacked_model_gives_the_same_logits(arch, qtype, shape, tmp_path, monkeypatch):
    path = write_tiny(tmp_path / f"{arch}.gguf", arch, qtype, shape, tied=False)
    model = _load(path)
    calls = _count_matmuls(monkeypatch)
    ref = _logits(model)
    unstacked = len(calls)
    groups = fuse_siblings(model, cpu=True)
    layers = len(model.model.layers)
    assert len(groups) == 2 * layers
    calls.clear()
    torch.testing.assert_close(_logits(model), ref, rtol=1e-5, atol=1e-5)
    assert len(calls) == unstacked - 3 * layers


def test_real_checkpoint_stacked_logits(gemma3_path):
    """gemma-3-270m's Q4_K_M: 9 layers stack q/k/v, 9 only q/k (their v is Q6_K), 18 gate/up."""
    model = _load(gemma3_path)
    ref = _logits(model, [2, *IDS[1:]])
    groups = fuse_siblings(model, cpu=True)
    names = sorted("/".join(g.names) for g in groups)
    assert names.count("q_proj/k_proj/v_proj") == 9 and names.count("q_proj/k_proj") == 9
    assert names.count("gate_proj/up_proj") == 18
    torch.testing.assert_close(_logits(model, [2, *IDS[1:]]), ref, rtol=1e-5, atol=1e-5)


def test_compiles_fullgraph_with_nothing_written_back(tmp_path):
    """One graph, each group's buffer a static input (as parameters are: CUDA graphs must not copy
    it in at every replay), and no state of the groups (or anything else) that the compiled frame
    writes back after the graph at every call: the products a sibling leaves stay inside it."""
    import dis

    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    path = write_tiny(tmp_path / "m.gguf", "llama", "Q4_0", tied=False)
    model = _load(path)
    ref = _logits(model)
    groups = fuse_siblings(model, cpu=True)
    static = {}

    def backend(gm, example_inputs):
        for node in gm.graph.find_nodes(op="placeholder"):
            if node.name.endswith("group_fused"):
                static[node.name] = node.meta["tensor_dict"].get("_dynamo_static_input_type")
        return gm

    torch._dynamo.reset()
    with torch.no_grad():
        out = torch.compile(model, fullgraph=True, backend=backend)(torch.tensor([IDS]), use_cache=False).logits
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    assert len(static) == len(groups) and all(static.values()), static
    (entry,) = _debug_get_cache_entry_list(model.forward.__func__.__code__)
    stores = [i.opname for i in dis.get_instructions(entry.code) if i.opname in ("STORE_ATTR", "STORE_SUBSCR")]
    assert stores == [], stores


def test_moves_and_copies_keep_the_stack(tmp_path):
    """`_apply` that copies every tensor (what `.to(device)` does) stacks again once all members
    have moved; a cast leaves the blocks and their buffer; a deep copy (each parameter cloned on
    its own) starts unstacked and stacks at its first `.to()`; `torch.save` keeps the views."""
    path = write_tiny(tmp_path / "m.gguf", "llama", "Q8_0", tied=False)
    model = _load(path)
    fuse_siblings(model, cpu=True)
    q = model.model.layers[1].self_attn.q_proj
    buffer = q.group.fused
    model.to(torch.bfloat16).to(torch.float32)  # (rounds the float weights: the reference comes after)
    assert q.group.fused is buffer
    ref = _logits(model)
    model._apply(lambda t: t.clone())
    assert q.group.fused is not buffer and q.group._holds(q)
    assert q.group.fused.data_ptr() == model.model.layers[1].self_attn.k_proj.weight.data_ptr() - q.weight.nbytes
    torch.testing.assert_close(_logits(model), ref, rtol=1e-5, atol=1e-5)
    twin = copy.deepcopy(model)
    tq = twin.model.layers[1].self_attn.q_proj
    assert tq.group is not q.group and tq.group.members[0] is tq and tq.group.fused is None
    torch.testing.assert_close(_logits(twin), ref, rtol=1e-5, atol=1e-5)
    twin.to(torch.float32)
    assert tq.group._holds(tq) and not q.group.fused.data_ptr() == tq.group.fused.data_ptr()
    torch.testing.assert_close(_logits(twin), ref, rtol=1e-5, atol=1e-5)
    buf = io.BytesIO()
    torch.save(model, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    lq = loaded.model.layers[1].self_attn.q_proj
    assert lq.group._holds(lq) and lq.group._holds(loaded.model.layers[1].self_attn.v_proj)  # pickled as views
    torch.testing.assert_close(_logits(loaded), ref, rtol=1e-5, atol=1e-5)


def test_saved_stacked_model_reloads_byte_identical(tmp_path):
    path = write_tiny(tmp_path / "m.gguf", "llama", "Q5_0", tied=False)
    plain = _load(path)
    stacked = _load(path)
    fuse_siblings(stacked, cpu=True)
    stacked.save_pretrained(tmp_path / "saved")
    back = AutoModelForCausalLM.from_pretrained(tmp_path / "saved", dtype=torch.float32)
    mine, theirs = dict(back.named_parameters()), dict(plain.named_parameters())
    assert mine.keys() == theirs.keys()
    for name, p in theirs.items():
        assert torch.equal(mine[name], p), name
    torch.testing.assert_close(_logits(back), _logits(plain), rtol=1e-5, atol=1e-5)


def test_stacked_model_exports_the_same_gguf(tmp_path):
    """`save_gguf` reads each member's weight (a view of its rows): the same file as the unstacked model's."""
    path = write_tiny(tmp_path / "m.gguf", "llama", "Q4_0", tied=False)
    plain, stacked = _load(path), _load(path)
    fuse_siblings(stacked, cpu=True)
    save_gguf(plain, tmp_path / "plain.gguf")
    save_gguf(stacked, tmp_path / "stacked.gguf")
    assert (tmp_path / "plain.gguf").read_bytes() == (tmp_path / "stacked.gguf").read_bytes()


@pytest.mark.parametrize("how", ["load_state_dict", "data"])
def test_replaced_weights_are_stacked_again(how):
    """A member whose weight is replaced (`load_state_dict(assign=True)`, in a compiled forward too; `.data =`,
    eagerly) is never served from the old buffer."""
    parent, dense = _attention()
    fuse_siblings(parent, cpu=True)
    x = torch.randn(4, 96)
    compiled = torch.compile(lambda x: [parent.q_proj(x), parent.k_proj(x), parent.v_proj(x)], fullgraph=True,
                             backend="eager")
    compiled(x)
    fresh, dense["k_proj"] = _linear(32, 96, "Q8_0")
    if how == "data":
        parent.k_proj.weight.data = fresh.weight.data
    else:
        parent.load_state_dict({"k_proj.weight": fresh.weight}, strict=False, assign=True)
        assert parent.k_proj.group._holds(parent.k_proj)
    for outs in [[getattr(parent, n)(x) for n in ("q_proj", "k_proj", "v_proj")]] + ([compiled(x)] if how != "data" else []):
        for name, out in zip(("q_proj", "k_proj", "v_proj"), outs):
            ref = _expected(parent, dense, name, x)
            assert (out.double() - ref).norm() / ref.norm() < 1e-5, name
    assert parent.k_proj.group._holds(parent.k_proj)


def test_stacked_model_dequantizes(tmp_path):
    """`model.dequantize()` reads each member's rows of the buffer: the unstacked model's float weights."""
    path = write_tiny(tmp_path / "m.gguf", "llama", "Q4_0", tied=False)
    plain, stacked = _load(path), _load(path)
    fuse_siblings(stacked, cpu=True)
    plain.dequantize()
    stacked.dequantize()
    theirs = plain.state_dict()
    assert all(torch.equal(t, theirs[n]) for n, t in stacked.state_dict().items())
    assert type(stacked.model.layers[0].self_attn.q_proj) is nn.Linear
