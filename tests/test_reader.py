"""Our GGUF reader against files written by gguf-py's GGUFWriter, and its errors on bad files."""
import struct

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader, GGUFWriter
from gguf.quants import quantize

from gguf_quant.gguf_io.reader import GgufError, read_gguf, split_paths


def _tensors():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 64)).astype(np.float32)
    return {
        "token_embd.weight": (quantize(w, T.Q8_0), T.Q8_0, w.shape),
        "blk.0.attn_q.weight": (quantize(w, T.Q4_0), T.Q4_0, w.shape),
        "blk.0.attn_norm.weight": (rng.standard_normal(64).astype(np.float32), None, None),
        "blk.0.ffn_up.weight": (rng.standard_normal((4, 32)).astype(np.float16), None, None),
    }


def _write(path, split_max_tensors=0):
    w = GGUFWriter(str(path), "llama", split_max_tensors=split_max_tensors)
    w.add_block_count(1)
    w.add_string("general.name", "tiny")
    w.add_array("tokenizer.ggml.tokens", ["a", "b", "c"])
    w.add_array("llama.some_ints", [3, 1, 4])
    for name, (data, dtype, shape) in _tensors().items():
        w.add_tensor(name, data, raw_dtype=dtype) if dtype is not None else w.add_tensor(name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.gguf"
    _write(path)
    return path


def test_reads_what_gguf_py_wrote(tiny):
    ours = read_gguf(tiny)
    theirs = GGUFReader(str(tiny))
    assert ours.architecture == "llama"
    assert ours.metadata["general.name"] == "tiny"
    assert ours.metadata["tokenizer.ggml.tokens"] == ["a", "b", "c"]
    assert ours.metadata["llama.some_ints"] == [3, 1, 4]
    assert set(ours.tensors) == {t.name for t in theirs.tensors}
    for t in theirs.tensors:
        info = ours.tensors[t.name]
        assert info.type.id == int(t.tensor_type)
        assert info.nbytes == t.n_bytes
        raw = ours.raw(t.name)
        expected = np.asarray(t.data)
        if info.type.quantized:
            assert raw.dtype == torch.uint8
            assert tuple(raw.shape) == expected.shape
            assert np.array_equal(raw.numpy(), expected)
        else:
            assert tuple(raw.shape) == info.shape == expected.shape
            assert np.array_equal(raw.numpy(), expected)


def test_views_share_the_mapped_file(tiny):
    g = read_gguf(tiny)
    a, b = g.raw("token_embd.weight"), g.raw("token_embd.weight")
    assert a.data_ptr() == b.data_ptr()  # zero-copy: both views of one mapping


def test_split_files_load_as_one(tmp_path):
    _write(tmp_path / "tiny.gguf", split_max_tensors=2)
    shards = sorted(tmp_path.glob("*.gguf"))
    assert [p.name for p in shards] == ["tiny-00001-of-00002.gguf", "tiny-00002-of-00002.gguf"]
    for shard in shards:
        assert split_paths(shard) == shards
    merged = read_gguf(shards[1])
    assert set(merged.tensors) == set(_tensors())
    assert {t.path for t in merged.tensors.values()} == set(shards)
    for name, (data, dtype, _) in _tensors().items():
        assert np.array_equal(merged.raw(name).numpy(), data)


def test_missing_shard_is_named(tmp_path):
    _write(tmp_path / "tiny.gguf", split_max_tensors=2)
    (tmp_path / "tiny-00002-of-00002.gguf").unlink()
    with pytest.raises(GgufError, match="tiny-00002-of-00002.gguf"):
        read_gguf(tmp_path / "tiny-00001-of-00002.gguf")


def _patch_tensor_entry(path, name, field, value):
    """Overwrite one field of a tensor-table entry: 'type' (u32) or 'dim0' (u64)."""
    blob = bytearray(path.read_bytes())
    key = struct.pack("<Q", len(name)) + name.encode()
    pos = blob.index(key) + len(key)
    n_dims = struct.unpack_from("<I", blob, pos)[0]
    if field == "dim0":
        struct.pack_into("<Q", blob, pos + 4, value)
    else:
        struct.pack_into("<I", blob, pos + 4 + 8 * n_dims, value)
    path.write_bytes(bytes(blob))


def test_unknown_type_names_file_and_tensor(tiny):
    _patch_tensor_entry(tiny, "blk.0.attn_q.weight", "type", 77)
    with pytest.raises(GgufError, match=r"tiny\.gguf.*blk\.0\.attn_q\.weight.*unknown ggml type id 77"):
        read_gguf(tiny)


def test_row_not_a_block_multiple(tiny):
    _patch_tensor_entry(tiny, "blk.0.attn_q.weight", "dim0", 60)
    with pytest.raises(GgufError, match=r"blk\.0\.attn_q\.weight.*not a multiple of the block size 32"):
        read_gguf(tiny)


def test_truncated_data_names_the_tensor(tiny):
    blob = tiny.read_bytes()
    tiny.write_bytes(blob[:-100])
    with pytest.raises(GgufError, match=r"tiny\.gguf.*blk\.0\.ffn_up\.weight.*truncated"):
        read_gguf(tiny)


def test_truncated_header(tiny):
    tiny.write_bytes(tiny.read_bytes()[:200])
    with pytest.raises(GgufError, match=r"tiny\.gguf.*truncated header"):
        read_gguf(tiny)


@pytest.mark.parametrize(
    "blob, message",
    [
        (b"", "empty file"),
        (b"GGML" + bytes(40), "not a GGUF file"),
        (b"GGUF" + struct.pack("<IQQ", 1, 0, 0), "version 1"),
        (b"GGUF" + struct.pack("<IQQ", 3, 10**12, 0), "more than the file can hold"),
    ],
)
def test_malformed_headers(tmp_path, blob, message):
    path = tmp_path / "bad.gguf"
    path.write_bytes(blob)
    with pytest.raises(GgufError, match=rf"bad\.gguf.*{message}"):
        read_gguf(path)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(GgufError, match="cannot open"):
        read_gguf(tmp_path / "nope.gguf")


def test_a_type_we_cannot_compute_with_fails_at_load(tmp_path):
    """gguf-py writes Q8_1 (an activation type), which no dequantizer here handles: loading the
    file must name the tensor at once rather than fail at the first forward."""
    from transformers import AutoModelForCausalLM

    import gguf_quant  # noqa: F401
    from tiny_gguf import write_tiny

    path = write_tiny(tmp_path / "t.gguf", "llama", "Q8_0")
    _patch_tensor_entry(path, "blk.0.attn_q.weight", "type", int(T.Q8_1))
    with pytest.raises(GgufError, match=r"t\.gguf.*blk\.0\.attn_q\.weight.*Q8_1, which gguf_quant cannot compute with"):
        AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name)


def test_missing_shards_of_a_hub_snapshot_are_fetched(tmp_path, monkeypatch):
    """transformers downloads only the shard `gguf_file=` names; the siblings come from the same
    repo and revision, into the same cache (huggingface_hub's download stubbed: no network here)."""
    import huggingface_hub

    from gguf_quant.gguf_io.hub import fetch_missing_shards

    made = tmp_path / "made"
    made.mkdir()
    _write(made / "tiny.gguf", split_max_tensors=2)
    snapshot = tmp_path / "hub" / "models--org--tiny-GGUF" / "snapshots" / "abc123"
    (snapshot / "Q8_0").mkdir(parents=True)
    first = snapshot / "Q8_0" / "tiny-00001-of-00002.gguf"
    first.write_bytes((made / "tiny-00001-of-00002.gguf").read_bytes())
    calls = []

    def fake_download(repo_id, filename, revision=None, repo_type=None, cache_dir=None):
        calls.append((repo_id, filename, revision, repo_type, str(cache_dir)))
        (snapshot / filename).write_bytes((made / filename.split("/")[-1]).read_bytes())
        return str(snapshot / filename)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    fetch_missing_shards(first)
    assert calls == [("org/tiny-GGUF", "Q8_0/tiny-00002-of-00002.gguf", "abc123", None, str(tmp_path / "hub"))]
    assert set(read_gguf(first).tensors) == set(_tensors())
    fetch_missing_shards(first)  # complete now: nothing more to fetch
    assert len(calls) == 1
