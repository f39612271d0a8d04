"""Kernel build naming and the loader's resolution order, on CPU (no CUDA, no network)."""
from __future__ import annotations

import json
import logging
import platform
import uuid

import pytest
import torch
from packaging.version import Version

from gguf_quant import build_kernels as bk
from gguf_quant import kernel_loader as kl

from random_blocks import random_blocks
from script_module import load_script

CUDA = torch.device("cuda")  # kernel_op only looks at device.type; nothing runs on it
Q8_0, Q4_K, IQ2_XXS = 8, 12, 16


# --- build naming and metadata ------------------------------------------------------------------

def test_variant_name_matches_what_kernels_accepts():
    try:  # kernels >= 0.19 keeps its resolver under _internals, with the same leading arguments
        from kernels._internals.backends import CUDA as KCUDA
        from kernels._internals.variants import _resolve_variant_for_system, parse_variant
    except ImportError:
        from kernels.backends import CUDA as KCUDA
        from kernels.variants import _resolve_variant_for_system, parse_variant

    name = bk.variant_name("2.11.0+cu130", "13.0", "x86_64", "Linux")
    assert name == "torch211-cxx11-cu130-x86_64-linux"
    v = parse_variant(name)
    assert v.variant_str == name
    ok, _ = _resolve_variant_for_system([v], KCUDA(version=Version("13.0")), "x86_64", "linux", Version("2.11"), True, None)
    assert ok == [v]
    # another torch minor or an older CUDA runtime must not pick it up
    assert not _resolve_variant_for_system([v], KCUDA(version=Version("13.0")), "x86_64", "linux", Version("2.12"), True, None)[0]
    assert not _resolve_variant_for_system([v], KCUDA(version=Version("12.8")), "x86_64", "linux", Version("2.11"), True, None)[0]


def test_variant_name_other_systems():
    assert bk.variant_name("2.9.1", "12.8", "aarch64", "linux") == "torch29-cxx11-cu128-aarch64-linux"
    assert bk.variant_name("2.11.0", "13.0", "x86_64", "linux", cxx11_abi=False) == "torch211-cxx98-cu130-x86_64-linux"
    assert bk.variant_name("2.11.0", "13.0", "AMD64", "Windows") == "torch211-cu130-AMD64-windows"


def _fake_sources(tmp_path):
    src = tmp_path / "src"
    (src / "csrc").mkdir(parents=True)
    (src / "torch-ext" / "gguf_kernels").mkdir(parents=True)
    (src / "build.toml").write_text("[general]\nname = 'gguf-kernels'\n")
    (src / "csrc" / "a.cu").write_text("// kernel\n")
    (src / "torch-ext" / "torch_binding.cpp").write_text("// binding\n")
    (src / "torch-ext" / "gguf_kernels" / "__init__.py").write_text("")
    return src


def test_source_hash_follows_sources_and_flags(tmp_path):
    src = _fake_sources(tmp_path)
    h1 = bk.source_hash(src)
    assert h1 == bk.source_hash(src) and len(h1) == 12
    assert bk.source_hash(src, extra="-O2") != h1
    (src / "csrc" / "a.cu").write_text("// kernel, changed\n")
    h2 = bk.source_hash(src)
    assert h2 != h1
    (src / "csrc" / "b.cuh").write_text("// new header\n")
    assert bk.source_hash(src) != h2
    (tmp_path / "src" / "unrelated.txt").write_text("not a source")
    assert [p.name for p in bk.source_files(src)] == ["build.toml", "a.cu", "b.cuh", "__init__.py", "torch_binding.cpp"]


def test_real_sources_are_found():
    files = {p.name for p in bk.source_files(bk.default_source_dir())}
    assert {"build.toml", "ggml_blocks.cuh", "kernels.cuh", "torch_binding.cpp", "__init__.py"} <= files


def test_one_name_for_namespace_so_and_id():
    name = bk.extension_name("0123456789ab")
    assert name == "_gguf_kernels_0123456789ab" and name.isidentifier()
    meta = bk.metadata(name, ["9.0a"])
    assert meta["id"] == name and meta["name"] == "gguf-kernels" and meta["version"] == 1
    assert meta["backend"] == {"type": "cuda", "archs": ["9.0a"]}
    ops = bk.ops_py(name)
    assert f"from . import {name}" in ops and f"torch.ops.{name}" in ops and f'"{name}::' in ops
    compile(ops, "_ops.py", "exec")


def test_metadata_is_read_by_kernels(tmp_path):
    from kernels import Metadata

    path = tmp_path / "metadata.json"
    path.write_text(json.dumps(bk.metadata("_gguf_kernels_abc", ["9.0a", "8.0"])))
    meta = Metadata.read_from_file(path)
    assert meta.id == "_gguf_kernels_abc" and meta.name.python_name == "gguf_kernels"
    assert list(meta.backend.archs) == ["9.0a", "8.0"]


def test_arch_flags_and_parsing(monkeypatch):
    assert bk.parse_archs("9.0a; 8.0,") == ["9.0a", "8.0"]
    assert bk.arch_flags(["9.0a", "8.6"]) == ["-gencode=arch=compute_90a,code=sm_90a",
                                              "-gencode=arch=compute_86,code=sm_86"]
    with pytest.raises(ValueError):
        bk.parse_archs("sm_90")
    monkeypatch.setenv("GGUF_KERNELS_ARCHS", "8.9")
    assert bk.detect_archs() == ["8.9"]


# --- resolution order -----------------------------------------------------------------------

def fake_build(root, supported=(Q8_0, Q4_K), tag="local"):
    """A pure-Python kernel build that `kernels` can load here: the variant of the backend it selects,
    the CUDA one under a CUDA build of torch (the GPU machine), else the CPU one."""
    ident = f"_gguf_kernels_fake_{uuid.uuid4().hex[:10]}"
    meta = bk.metadata(ident, [])
    if torch.version.cuda:
        name = bk.variant_name(torch.__version__, torch.version.cuda)
    else:
        major, minor = torch.__version__.split("+")[0].split(".")[:2]
        name = f"torch{major}{minor}-cxx11-cpu-{platform.machine()}-{platform.system().lower()}"
        meta["backend"] = {"type": "cpu"}
    variant = root / "build" / name
    variant.mkdir(parents=True)
    (variant / "metadata.json").write_text(json.dumps(meta))
    (variant / "__init__.py").write_text(
        f"SUPPORTED_TYPES = frozenset({set(supported)!r})\n"
        f"TAG = {tag!r}\n"
        "def supports(op, qtype):\n"
        "    return op in ('dequantize', 'get_rows', 'matmul', 'moe_matmul') and qtype in SUPPORTED_TYPES\n"
        "def dequantize(packed, qtype, dtype): return ('dequantize', TAG)\n"
        "def get_rows(packed, ids, qtype, dtype): return ('get_rows', TAG)\n"
        "def matmul(x, packed, qtype): return ('matmul', TAG)\n"
        "def moe_matmul(x, packed, ids, qtype): return ('moe_matmul', TAG)\n"
    )
    return root


@pytest.fixture
def env(monkeypatch):
    for var in (kl.ENV_PATH, kl.ENV_HUB, "LOCAL_KERNELS"):
        monkeypatch.delenv(var, raising=False)
    kl.reset()
    yield monkeypatch
    kl.reset()


@pytest.fixture
def no_hub(env):
    calls = []

    def hub():
        calls.append(1)
        raise OSError("no network here")

    env.setattr(kl, "_load_repo", hub)
    return calls


def test_explicit_local_build_first(env, tmp_path, caplog, no_hub):
    env.setenv(kl.ENV_PATH, str(fake_build(tmp_path)))
    with caplog.at_level(logging.INFO, logger="gguf_quant.kernel_loader"):
        fn = kl.kernel_op("matmul", Q4_K, CUDA)
        kl.kernel_op("matmul", Q8_0, CUDA)
    assert fn(None, None, Q4_K) == ("matmul", "local")
    assert no_hub == []  # the Hub is not asked when a local build loads
    msgs = [r.getMessage() for r in caplog.records if "gguf_quant" in r.getMessage()]
    assert len(msgs) == 1 and "local build" in msgs[0] and kl.ENV_PATH in msgs[0]
    assert kl.kernel_source().startswith("local build")


def test_local_kernels_override_through_get_kernel(env, tmp_path, caplog):
    env.setenv("LOCAL_KERNELS", f"{kl.REPO_ID}={fake_build(tmp_path, tag='override')}")
    with caplog.at_level(logging.INFO, logger="gguf_quant.kernel_loader"):
        fn = kl.kernel_op("dequantize", Q8_0, CUDA)
    assert fn(None, Q8_0, torch.float32) == ("dequantize", "override")
    assert any("LOCAL_KERNELS" in r.getMessage() for r in caplog.records)


def test_explicit_path_beats_local_kernels(env, tmp_path, no_hub):
    env.setenv(kl.ENV_PATH, str(fake_build(tmp_path / "a", tag="explicit")))
    env.setenv("LOCAL_KERNELS", f"{kl.REPO_ID}={fake_build(tmp_path / 'b', tag='override')}")
    assert kl.kernel_op("matmul", Q8_0, CUDA)(None, None, Q8_0) == ("matmul", "explicit")


def test_hub_is_next(env, tmp_path):
    seen = []

    def hub():
        seen.append(1)
        import kernels

        return kernels.get_local_kernel(fake_build(tmp_path, tag="hub"))

    env.setattr(kl, "_load_repo", hub)
    assert kl.kernel_op("moe_matmul", Q4_K, CUDA)(None, None, None, Q4_K) == ("moe_matmul", "hub")
    assert seen == [1]
    assert kl.kernel_source().startswith("the Hub")


def test_falls_back_to_torch_and_says_so(env, caplog, no_hub):
    with caplog.at_level(logging.INFO, logger="gguf_quant.kernel_loader"):
        assert kl.kernel_op("matmul", Q4_K, CUDA) is None
        assert kl.kernel_op("matmul", Q4_K, CUDA) is None
    assert no_hub == [1]  # tried once, failure caught, cached
    msgs = [r.getMessage() for r in caplog.records]
    assert sum("pure-torch path" in m for m in msgs) == 1
    assert kl.kernel_module() is None and kl.kernel_source() == "pure torch"


def test_bad_local_path_warns_then_falls_back(env, tmp_path, caplog, no_hub):
    env.setenv(kl.ENV_PATH, str(tmp_path / "missing"))
    with caplog.at_level(logging.INFO, logger="gguf_quant.kernel_loader"):
        assert kl.kernel_op("matmul", Q4_K, CUDA) is None
    assert any(r.levelno == logging.WARNING and "missing" in r.getMessage() for r in caplog.records)
    assert no_hub == [1]


def test_switched_off(env, tmp_path):
    env.setattr(kl, "_load_repo", lambda: pytest.fail("must not load"))
    env.setenv(kl.ENV_PATH, "0")
    assert kl.kernel_op("matmul", Q4_K, CUDA) is None
    assert "GGUF_QUANT_KERNELS=0" in kl.kernel_source()


def test_hub_can_be_skipped(env):
    env.setattr(kl, "_load_repo", lambda: pytest.fail("must not ask the Hub"))
    env.setenv(kl.ENV_HUB, "0")
    assert kl.kernel_op("matmul", Q4_K, CUDA) is None


def test_none_for_cpu_devices_unsupported_types_and_ops(env, tmp_path):
    env.setattr(kl, "_load_repo", lambda: pytest.fail("no lookup for CPU tensors"))
    env.setenv(kl.ENV_PATH, str(fake_build(tmp_path)))
    assert kl.kernel_op("matmul", Q4_K, torch.device("cpu")) is None
    assert kl.kernel_op("matmul", Q4_K, torch.device("meta")) is None
    assert not kl._resolved  # CPU calls do not even resolve
    assert kl.kernel_op("matmul", IQ2_XXS, CUDA) is None
    assert kl.kernel_op("quantize", Q4_K, CUDA) is None
    assert kl.kernel_op("get_rows", Q8_0, CUDA) is not None


def test_resolution_is_cached(env, tmp_path):
    calls = []
    real = kl._load_local

    def counting(path):
        calls.append(path)
        return real(path)

    env.setattr(kl, "_load_local", counting)
    env.setenv(kl.ENV_PATH, str(fake_build(tmp_path)))
    for _ in range(100):
        kl.kernel_op("matmul", Q4_K, CUDA)
    assert len(calls) == 1
    kl.reset()
    kl.kernel_op("matmul", Q4_K, CUDA)
    assert len(calls) == 2


def test_module_without_ops_is_rejected(env, tmp_path, no_hub):
    env.setenv(kl.ENV_PATH, str(fake_build(tmp_path, supported=())))
    assert kl.kernel_op("matmul", Q4_K, CUDA) is None


# --- the CUDA block decoders, compiled for the host ------------------------------------------

_DECODER_TYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
                  "IQ4_NL", "IQ4_XS", "MXFP4", "NVFP4", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M"]


_SCALED = {"IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M"}  # finite test data (random_blocks)


@pytest.fixture(scope="module")
def host_decoders(tmp_path_factory):
    import ctypes
    import shutil
    import subprocess

    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not on PATH")
    src = bk.default_source_dir() / "tests" / "decode_host.cu"
    lib = tmp_path_factory.mktemp("dec") / "libdecode_host.so"
    subprocess.run([nvcc, "-O1", "-shared", "-Xcompiler", "-fPIC", "-o", str(lib), str(src)], check=True,
                   capture_output=True)
    return ctypes.CDLL(str(lib))


def _rows_and_reference(name: str, rows: int, cols: int, rng):
    """Random packed rows of a type (finite for the scaled IQ types) and gguf-py's fp32 dequantization."""
    import numpy as np
    from gguf.constants import GGMLQuantizationType
    from gguf.quants import dequantize

    packed = np.ascontiguousarray(random_blocks(name, (rows,), cols, rng, e8m0=(110, 140), ue4m3=(0, 256)))
    return packed, dequantize(packed, GGMLQuantizationType[name]).reshape(rows, cols).astype(np.float32)


@pytest.mark.parametrize("name", _DECODER_TYPES)
def test_cuda_decoders_match_gguf_py_bit_for_bit(host_decoders, name):
    import ctypes

    import numpy as np
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    qt = GGMLQuantizationType[name]
    bs, _ = GGML_QUANT_SIZES[qt]
    rng = np.random.default_rng()
    for cols in {256: [256, 768], 64: [64, 192, 2880]}.get(bs, [32, 96, 2880]):  # 96: a half 64-element unit
        rows = 64
        packed, ref = _rows_and_reference(name, rows, cols, rng)
        assert name not in _SCALED or np.isfinite(ref).all()
        out = np.full((rows, cols), np.nan, np.float32)
        rc = host_decoders.decode_rows(int(qt), packed.ctypes.data_as(ctypes.c_void_p), rows, packed.shape[1], cols,
                                       out.ctypes.data_as(ctypes.c_void_p))
        assert rc == 0
        np.testing.assert_array_equal(out, ref)


# A child decodes rows placed so that they end where an inaccessible page begins: a decoder reading past
# the last block dies of SIGSEGV (the GPU's dequantize and get_rows read blocks in place in global memory,
# where such a read goes past the tensor). `short` bytes of the rows are left out, under the guard, to
# show that the guard does catch a read of the rows' own last bytes.
_GUARDED_DECODE = """
import ctypes, mmap, sys
import numpy as np
lib = ctypes.CDLL(sys.argv[1])
data = np.load(sys.argv[2])
t, rows, rb, k, short = map(int, sys.argv[3:8])
page, n = mmap.PAGESIZE, data.nbytes
npg = -(-n // page)
buf = mmap.mmap(-1, (npg + 1) * page)
base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
libc = ctypes.CDLL(None)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
assert libc.mprotect(base + npg * page, page, 0) == 0
start = base + npg * page - n + short
ctypes.memmove(start, data.ctypes.data, n - short)
out = np.zeros((rows, k), np.float32)
assert lib.decode_rows(t, ctypes.c_void_p(start), rows, rb, k, out.ctypes.data_as(ctypes.c_void_p)) == 0
np.save(sys.argv[8], out)
"""


@pytest.mark.parametrize("name", _DECODER_TYPES)
def test_cuda_decoders_read_nothing_past_the_rows(host_decoders, name, tmp_path):
    import subprocess
    import sys

    import numpy as np
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    qt = GGMLQuantizationType[name]
    bs, _ = GGML_QUANT_SIZES[qt]
    cols = {256: 768, 64: 192}.get(bs, 96)  # 96: the last 64-element unit a half one
    rows = 3
    packed, ref = _rows_and_reference(name, rows, cols, np.random.default_rng())
    np.save(tmp_path / "rows.npy", packed)

    def run(short: int) -> subprocess.CompletedProcess:
        args = [host_decoders._name, tmp_path / "rows.npy", int(qt), rows, packed.shape[1], cols, short,
                tmp_path / "out.npy"]
        return subprocess.run([sys.executable, "-c", _GUARDED_DECODE, *map(str, args)], capture_output=True,
                              text=True, timeout=120)

    r = run(0)
    assert r.returncode == 0, f"{name}: decoding rows that end at a guard page: exit {r.returncode} {r.stderr[-500:]}"
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), ref)
    assert run(1).returncode == -11  # the rows' last byte under the guard: the read of it is caught


def test_iq4_bf16_pairs_are_gguf_pys_kvalues(host_decoders):
    """The tile kernel's IQ4_XS decode under bf16 (v125) looks up each nibble of a qs word (Q4_0 layout: byte i holds
    element 4p + i low, 16 + 4p + i high) in two byte tables and joins them into bf16 pairs; every pair must be
    gguf-py's kvalues of its two elements, exactly, in the documented order."""
    import ctypes

    import numpy as np
    from gguf.quants import IQ4_NL

    words = np.random.default_rng().integers(0, 2**32, 4096, dtype=np.uint32)
    words[:2] = (0x76543210, 0xFEDCBA98)  # every nibble value in every position
    out = np.zeros((words.size, 4), np.uint32)
    host_decoders.iq4_bf16_pairs_of(words.ctypes.data_as(ctypes.c_void_p), words.size,
                                    out.ctypes.data_as(ctypes.c_void_p))
    got = (out[:, :, None] >> np.array([0, 16], np.uint32) & 0xFFFF).astype(np.uint32) << 16  # [n, pair, half]
    got = got.view(np.float32)
    nib = (words[:, None] >> (4 * np.arange(8, dtype=np.uint32))) & 0xF  # nibble k: byte k // 2, high if k odd
    kv = np.asarray(IQ4_NL.kvalues, np.float32).reshape(-1)[nib]
    # pairs: {4p, 4p + 1} = nibbles 0, 2; {16 + 4p, 17 + 4p} = 1, 3; {4p + 2, 4p + 3} = 4, 6; {18 + 4p, 19 + 4p} = 5, 7
    want = kv[:, [[0, 2], [1, 3], [4, 6], [5, 7]]]
    np.testing.assert_array_equal(got, want)


def test_iq_grid_header_is_gguf_pys_tables():
    """csrc/iq_grids.h is what tools/gen_iq_grids.py writes from the installed gguf-py."""
    src = bk.default_source_dir()
    gen = load_script(src / "tools" / "gen_iq_grids.py")
    assert (src / "csrc" / "iq_grids.h").read_text() == gen.header()


def test_fast_path_data_layout_on_the_host():
    """The fast small-M path's prep records, chunk decoders and epilogue, and the stream kernel's
    mapping for M = 1..8 and MoE flat items, run on the host with a software model of the mma fragments against
    gguf-py's dequantizer (kernels-src/gguf_kernels/tests/fast_host_check.py)."""
    import shutil

    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not on PATH")
    check = load_script(bk.default_source_dir() / "tests" / "fast_host_check.py")
    assert check.main() == 0
