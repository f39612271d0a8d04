"""Reading GGUF files: metadata, the tensor table, and zero-copy views of the tensor data.

Follows the published GGUF layout (ggml's docs/gguf.md): a little-endian header (magic, version,
tensor count, key/value count), the key/value pairs, the tensor table, padding to
`general.alignment`, then the tensor data. Split files (`name-00001-of-00003.gguf`, written by
llama.cpp's gguf-split) load as one: every shard's tensor table is read and the tensors merged.

Tensor data are never copied here: each tensor is a view of a copy-on-write memory map, so the
OS pages bytes in only when something reads them, and writes (which nothing should do) stay
private to the process instead of reaching the file.
"""
from __future__ import annotations

import mmap
import re
import struct
from dataclasses import dataclass, field
from math import prod
from pathlib import Path

import torch

from ..ggml.types import FLOAT_TYPES, GgmlType, ggml_type

__all__ = ["GgufError", "GgufFile", "TensorInfo", "read_gguf", "split_paths"]

_MAGIC = b"GGUF"
_VERSIONS = (2, 3)  # v1 used 32-bit counts and is long gone
_DEFAULT_ALIGNMENT = 32

# GGUF metadata value types -> struct format (fixed-size ones); 8 is a string, 9 an array.
_SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9

_SPLIT_RE = re.compile(r"^(?P<stem>.*)-(?P<index>\d{5})-of-(?P<count>\d{5})\.gguf$")


class GgufError(ValueError):
    """A GGUF file that cannot be read as it claims to be; the message names the file and tensor."""


@dataclass(frozen=True)
class TensorInfo:
    """Where one tensor lives and how it is stored. `shape` is in torch order (rows first)."""

    name: str
    shape: tuple[int, ...]
    type: GgmlType
    path: Path
    offset: int  # absolute, in the file at `path`
    nbytes: int

    @property
    def packed_shape(self) -> tuple[int, ...]:
        """The shape of the raw uint8 view: rows of blocks along the last dimension."""
        if not self.type.quantized:
            return self.shape
        return (*self.shape[:-1], self.type.row_bytes(self.shape[-1]))


@dataclass
class GgufFile:
    """A GGUF checkpoint (one file or all shards of a split one)."""

    path: Path
    metadata: dict
    tensors: dict[str, TensorInfo]
    _maps: dict[Path, mmap.mmap] = field(default_factory=dict, repr=False)

    @property
    def architecture(self) -> str:
        return self.metadata["general.architecture"]

    def __deepcopy__(self, memo) -> "GgufFile":
        # `copy.deepcopy(model)` reaches this through the model's quantizer; an mmap cannot be
        # copied, and need not be: the mapping is copy-on-write and only read, so copies share it.
        return self

    def __getstate__(self) -> dict:
        # `torch.save(model)` pickles the quantizer too: the maps are left out (they are not
        # picklable) and `raw` opens them again if it is ever asked for a tensor.
        return {**self.__dict__, "_maps": {}}

    @property
    def tensor_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values())

    def raw(self, name: str) -> torch.Tensor:
        """The tensor's bytes as stored, zero-copy: uint8 `packed_shape` for block types, the
        element dtype for plain ones."""
        info = self.tensors[name]
        buf = self._maps.get(info.path)
        if buf is None:
            with open(info.path, "rb") as f:
                buf = self._maps[info.path] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
        data = torch.frombuffer(buf, dtype=torch.uint8, count=info.nbytes, offset=info.offset)
        if info.type.quantized:
            return data.view(info.packed_shape)
        return data.view(FLOAT_TYPES[info.type.name]).view(info.shape)


def split_paths(path: str | Path) -> list[Path]:
    """All shards of a split GGUF given any one of them, or `[path]` for an ordinary file."""
    path = Path(path)
    m = _SPLIT_RE.match(path.name)
    if m is None:
        return [path]
    count = int(m["count"])
    shards = [path.with_name(f"{m['stem']}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]
    missing = [str(p) for p in shards if not p.is_file()]
    if missing:
        raise GgufError(f"{path}: split GGUF of {count} shards, but these are missing: {', '.join(missing)}")
    return shards


def read_gguf(path: str | Path) -> GgufFile:
    """Parse a GGUF file's (or split set's) metadata and tensor tables, validating every entry."""
    shards = split_paths(path)
    metadata: dict = {}
    tensors: dict[str, TensorInfo] = {}
    for shard in shards:
        meta, infos = _read_one(shard)
        for key, value in meta.items():
            metadata.setdefault(key, value)  # the first shard holds the model's metadata
        for info in infos:
            if info.name in tensors:
                raise GgufError(f"{shard}: tensor {info.name!r} also appears in {tensors[info.name].path}")
            tensors[info.name] = info
    if "general.architecture" not in metadata:
        raise GgufError(f"{shards[0]}: no general.architecture key in the metadata")
    return GgufFile(shards[0], metadata, tensors)


class _Cursor:
    """Bounds-checked little-endian reads over a memory map."""

    def __init__(self, buf: mmap.mmap, path: Path):
        self.buf, self.path, self.pos = buf, path, 0

    def take(self, fmt: str):
        size = struct.calcsize("<" + fmt)
        if self.pos + size > len(self.buf):
            raise GgufError(f"{self.path}: truncated header (needed {size} bytes at offset {self.pos}, file has {len(self.buf)})")
        values = struct.unpack_from("<" + fmt, self.buf, self.pos)
        self.pos += size
        return values if len(values) > 1 else values[0]

    def string(self) -> str:
        n = self.take("Q")
        if self.pos + n > len(self.buf):
            raise GgufError(f"{self.path}: truncated header (string of {n} bytes at offset {self.pos})")
        raw = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return raw.decode("utf-8", errors="replace")

    def value(self, vtype: int, key: str):
        if vtype in _SCALAR:
            return self.take(_SCALAR[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            etype, count = self.take("IQ")
            if etype in _SCALAR:
                fmt = _SCALAR[etype]
                size = struct.calcsize("<" + fmt) * count
                if self.pos + size > len(self.buf):
                    raise GgufError(f"{self.path}: truncated header in the array of key {key!r}")
                values = list(struct.unpack_from(f"<{count}{fmt}", self.buf, self.pos))
                self.pos += size
                return values
            return [self.value(etype, key) for _ in range(count)]
        raise GgufError(f"{self.path}: key {key!r} has unknown value type {vtype}")


def _read_one(path: Path) -> tuple[dict, list[TensorInfo]]:
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            if size == 0:
                raise GgufError(f"{path}: empty file, not a GGUF")
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as e:
        raise GgufError(f"{path}: cannot open ({e.strerror})") from e
    try:
        return _parse(buf, path)
    finally:
        buf.close()


def _parse(buf: mmap.mmap, path: Path) -> tuple[dict, list[TensorInfo]]:
    cur = _Cursor(buf, path)
    if len(buf) < 4 or bytes(buf[:4]) != _MAGIC:
        raise GgufError(f"{path}: not a GGUF file (bad magic {bytes(buf[:4])!r})")
    cur.pos = 4
    version, n_tensors, n_kv = cur.take("IQQ")
    if version not in _VERSIONS:
        raise GgufError(f"{path}: GGUF version {version} is not supported (only {_VERSIONS})")
    # Each entry takes at least 8+4 bytes (kv) or 8+4+4+8 (tensor): a count that cannot fit is
    # a corrupt header, caught here rather than after a very long loop.
    if n_kv * 12 + n_tensors * 24 > len(buf):
        raise GgufError(f"{path}: header claims {n_kv} keys and {n_tensors} tensors, more than the file can hold")
    metadata = {}
    for _ in range(n_kv):
        key = cur.string()
        metadata[key] = cur.value(cur.take("I"), key)

    entries = []
    for _ in range(n_tensors):
        name = cur.string()
        n_dims = cur.take("I")
        if not 1 <= n_dims <= 4:
            raise GgufError(f"{path}: tensor {name!r} has {n_dims} dimensions (ggml allows 1 to 4)")
        dims = cur.take(f"{n_dims}Q") if n_dims > 1 else (cur.take("Q"),)
        type_id, offset = cur.take("IQ")
        entries.append((name, dims, type_id, offset))

    alignment = int(metadata.get("general.alignment", _DEFAULT_ALIGNMENT))
    if alignment <= 0 or alignment & (alignment - 1):
        raise GgufError(f"{path}: general.alignment {alignment} is not a power of two")
    data_start = -(-cur.pos // alignment) * alignment

    infos = []
    for name, dims, type_id, offset in entries:
        try:
            t = ggml_type(type_id)
        except ValueError:
            raise GgufError(f"{path}: tensor {name!r} has unknown ggml type id {type_id}") from None
        # ggml lists dimensions fastest-varying first; torch wants them the other way round.
        shape = tuple(int(d) for d in reversed(dims))
        if shape[-1] % t.block_size:
            raise GgufError(
                f"{path}: tensor {name!r} of type {t.name} has rows of {shape[-1]} elements, "
                f"not a multiple of the block size {t.block_size}"
            )
        nbytes = prod(shape) // t.block_size * t.type_size
        start = data_start + offset
        if offset % alignment:
            raise GgufError(f"{path}: tensor {name!r} data offset {offset} is not aligned to {alignment}")
        if start + nbytes > len(buf):
            raise GgufError(
                f"{path}: tensor {name!r} ({t.name}, {nbytes} bytes at offset {start}) runs past the end "
                f"of the file ({len(buf)} bytes): the file is truncated"
            )
        infos.append(TensorInfo(name, shape, t, path, start, nbytes))
    return metadata, infos
