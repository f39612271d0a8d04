"""quantize_gguf (file in, file out) against llama.cpp's own llama-quantize, on CPU."""
import numpy as np
import pytest
import torch
from gguf import GGUFWriter

from gguf_quant import quantize_gguf
from gguf_quant.gguf_io import requantize
from gguf_quant.gguf_io.reader import GgufError, read_gguf

from tiny_gguf import VOCAB, Shape, quantize_with_llamacpp, write_tiny

pytestmark = pytest.mark.usefixtures("one_torch_thread")

LLAMA = Shape(hidden=256, ff=512, heads=4, kv_heads=1, head_dim=64, layers=8)
CASES = [
    ("llama", "F16", "Q4_K_M", LLAMA, True),
    ("llama", "F32", "Q8_0", LLAMA, False),
    # rows of 80 and 160 elements: llama.cpp's Q5_0 / Q8_0 fallbacks and F32 -> F16 conversions
    ("llama", "F32", "Q4_K_M", Shape(hidden=80, ff=160, heads=5, kv_heads=1, head_dim=16), True),
    ("qwen3moe", "F16", "Q4_K_M", Shape(hidden=256, heads=4, kv_heads=2, head_dim=64, experts=4, ff_exp=256), False),
    ("qwen3moe", "BF16", "Q8_0", Shape(hidden=256, heads=4, kv_heads=2, head_dim=64, experts=4, ff_exp=256), False),
]


def _bytes(gguf, name):
    return gguf.raw(name).view(torch.uint8).flatten()


def _assert_same_file(ours, theirs):
    a, b = read_gguf(ours), read_gguf(theirs)
    assert a.metadata == b.metadata
    assert a.tensors.keys() == b.tensors.keys()
    for name, t in b.tensors.items():
        assert (a.tensors[name].type, a.tensors[name].shape) == (t.type, t.shape), name
        assert torch.equal(_bytes(a, name), _bytes(b, name)), name


@pytest.mark.parametrize("arch, ftype, mix, shape, tied", CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in CASES])
def test_equals_llama_quantize(arch, ftype, mix, shape, tied, tmp_path):
    src = write_tiny(tmp_path / "src.gguf", arch, ftype, shape, tied=tied)
    theirs = quantize_with_llamacpp(src, tmp_path / "theirs.gguf", mix)
    report = quantize_gguf(src, tmp_path / "ours.gguf", mix, "cpu", progress=False)
    _assert_same_file(tmp_path / "ours.gguf", theirs)
    assert report["tensors"] == len(read_gguf(src).tensors) == sum(report["types"].values())
    assert report["bytes_written"] == (tmp_path / "ours.gguf").stat().st_size
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ours.gguf", "src.gguf", "theirs.gguf"]


@pytest.mark.parametrize("mix, chunk_bytes", [("Q8_0", 64 << 10), ("Q4_K_M", 1 << 20)])
def test_row_chunks_give_the_same_bytes(mix, chunk_bytes, tmp_path):
    """The 24 MiB embedding cut into many row chunks is written exactly as in one piece."""
    src = write_tiny(tmp_path / "src.gguf", "llama", "F16", LLAMA, tied=True)
    whole = quantize_gguf(src, tmp_path / "whole.gguf", mix, "cpu", progress=False, chunk_bytes=1 << 30, workers=1)
    cut = quantize_gguf(src, tmp_path / "cut.gguf", mix, "cpu", progress=False, chunk_bytes=chunk_bytes, workers=3)
    assert cut["bytes_read"] == whole["bytes_read"]
    assert (tmp_path / "cut.gguf").read_bytes() == (tmp_path / "whole.gguf").read_bytes()


def _aligned_64(path):
    """A small F32 llama-named file with a 64-byte alignment and rows of 96 elements."""
    w = GGUFWriter(path, "llama")
    w.add_custom_alignment(64)
    for key, value in (("llama.block_count", 1), ("llama.attention.head_count", 2)):
        w.add_uint32(key, value)
    w.add_tensor("token_embd.weight", np.linspace(-1, 1, 32 * 96, dtype=np.float32).reshape(32, 96))
    w.add_tensor("output_norm.weight", np.ones(96, dtype=np.float32))
    w.add_tensor("blk.0.attn_q.weight", np.linspace(-1, 1, 96 * 96, dtype=np.float32).reshape(96, 96))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_alignment_is_kept(tmp_path):
    src = _aligned_64(tmp_path / "src.gguf")
    quantize_gguf(src, tmp_path / "out.gguf", "Q4_0", "cpu", progress=False)
    out = read_gguf(tmp_path / "out.gguf")
    assert out.metadata["general.alignment"] == 64
    assert all(t.offset % 64 == 0 for t in out.tensors.values())
    assert out.tensors["blk.0.attn_q.weight"].type.name == "Q4_0"
    assert out.tensors["token_embd.weight"].type.name == "Q8_0"  # tied: Q6_K, which rows of 96 do not fit
    assert torch.equal(out.raw("output_norm.weight"), torch.ones(96))
    # chunks smaller than a row: one row each
    quantize_gguf(src, tmp_path / "rows.gguf", "Q4_0", "cpu", progress=False, chunk_bytes=1)
    assert (tmp_path / "rows.gguf").read_bytes() == (tmp_path / "out.gguf").read_bytes()


def test_cli(tmp_path, capsys):
    src = write_tiny(tmp_path / "src.gguf", "llama", "F16", Shape(hidden=64, ff=128), tied=True)
    requantize.main([str(src), str(tmp_path / "q.gguf"), "Q8_0", "--device", "cpu"])
    assert "q.gguf" in capsys.readouterr().out
    assert read_gguf(tmp_path / "q.gguf").tensors["blk.0.attn_q.weight"].type.name == "Q8_0"


# --- errors: named file and tensor, and nothing left half-written ---------------------------------


@pytest.fixture(scope="module")
def tiny_src(tmp_path_factory):
    return write_tiny(tmp_path_factory.mktemp("src") / "src.gguf", "llama", "F16", Shape(hidden=64, ff=128), tied=True)


def test_missing_source(tmp_path):
    with pytest.raises(GgufError, match=r"nope\.gguf.*cannot open"):
        quantize_gguf(tmp_path / "nope.gguf", tmp_path / "out.gguf", "Q8_0", "cpu", progress=False)
    assert list(tmp_path.iterdir()) == []


def test_not_a_model(tmp_path):
    with pytest.raises(GgufError, match=r"vocab\.gguf: no llama\.attention\.head_count"):
        quantize_gguf(VOCAB, tmp_path / "out.gguf", "Q8_0", "cpu", progress=False)
    assert list(tmp_path.iterdir()) == []


def test_truncated_source_leaves_dst_alone(tiny_src, tmp_path):
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(tiny_src.read_bytes()[:-1000])
    dst = tmp_path / "out.gguf"
    dst.write_bytes(b"the user's file")
    with pytest.raises(GgufError, match=r"cut\.gguf.*truncated"):
        quantize_gguf(cut, dst, "Q8_0", "cpu", progress=False, overwrite=True)
    assert dst.read_bytes() == b"the user's file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cut.gguf", "out.gguf"]


def test_failure_while_streaming_leaves_dst_alone(tiny_src, tmp_path, monkeypatch):
    real = requantize.quantize

    def failing(x, t):
        if x.shape[1] == 128:  # ffn_down, 16 rows a chunk
            raise RuntimeError("device fell over")
        return real(x, t)

    monkeypatch.setattr(requantize, "quantize", failing)
    dst = tmp_path / "out.gguf"
    dst.write_bytes(b"the user's file")
    with pytest.raises(RuntimeError, match="device fell over"):
        quantize_gguf(tiny_src, dst, "Q8_0", "cpu", progress=False, overwrite=True, chunk_bytes=4096)
    assert dst.read_bytes() == b"the user's file"
    assert [p.name for p in tmp_path.iterdir()] == ["out.gguf"]


def test_existing_dst_needs_overwrite(tiny_src, tmp_path):
    dst = tmp_path / "out.gguf"
    dst.write_bytes(b"the user's file")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        quantize_gguf(tiny_src, dst, "Q8_0", "cpu", progress=False)
    assert dst.read_bytes() == b"the user's file"
    quantize_gguf(tiny_src, dst, "Q8_0", "cpu", progress=False, overwrite=True)
    assert read_gguf(dst).tensors["blk.0.attn_q.weight"].type.name == "Q8_0"


def test_bad_mix_and_quantized_source(tiny_src, tmp_path):
    with pytest.raises(ValueError, match="Q9_9"):
        quantize_gguf(tiny_src, tmp_path / "out.gguf", "Q9_9", "cpu", progress=False)
    q8 = write_tiny(tmp_path / "q8.gguf", "llama", "Q8_0", Shape(hidden=64, ff=128), tied=True)
    with pytest.raises(GgufError, match=r"q8\.gguf: tensor '[\w.]+' is stored as Q8_0.*not supported"):
        quantize_gguf(q8, tmp_path / "out.gguf", "Q4_0", "cpu", progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q8.gguf"]
