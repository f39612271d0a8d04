"""Quantizing a float GGUF file into another GGUF file: the library's `llama-quantize`.

Per-tensor types come from `gguf_quant.mixes.choose_types` and the blocks from
`gguf_quant.ggml.quantize`, so the tensor data equal llama-quantize's (no importance matrix)
byte for byte. The job is bound by moving bytes, not by quantizing, so the file is streamed:

- the output layout (header, key/values, tensor table, aligned data offsets) is fixed up front,
  the header part written with gguf-py's writer and the file sized to its final length;
- the tensors are cut into row chunks of about `chunk_bytes` and handed to a few worker threads.
  Each worker owns its buffers (pinned on CUDA) and its CUDA stream, and per chunk: `preadv`s the
  source bytes into its buffer, copies them to the device, quantizes, copies the blocks back, and
  `pwrite`s them at their offset. preadv, pwrite and stream waits release the GIL, so one worker
  reads while another waits for the device and a third writes; memory stays a few chunks per
  worker, never the model.

The result is written to a hidden temporary file beside `dst` and moved into place once
complete, so a failure leaves no half-written file and an existing one is replaced only with
`overwrite=True`.

    python -m gguf_quant.gguf_io.requantize model-f16.gguf model-Q4_K_M.gguf Q4_K_M [--device cuda]
"""
from __future__ import annotations

import argparse
import os
import queue
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from math import prod
from pathlib import Path

import numpy as np
import torch
from gguf import GGML_QUANT_VERSION, GGMLQuantizationType, GGUFValueType, GGUFWriter, Keys, LlamaFileType
from gguf.gguf_writer import GGUFValue
from tqdm import tqdm

from ..ggml import quantize
from ..ggml.types import FLOAT_TYPES, GgmlType, ggml_type
from ..mixes import ModelFacts, choose_types
from .files import check_destination, move_into_place, partial_path
from .reader import GgufError, GgufFile, read_gguf
from .writer import copied_metadata, source_tokenizer

__all__ = ["quantize_gguf", "facts_of"]

_ALIGNMENT = 32  # GGUF's default when general.alignment is absent
# Keys the output sets itself besides those `copied_metadata` leaves out: the new file type and
# quantization version.
_OWN_KEYS = {Keys.General.FILE_TYPE, Keys.General.QUANTIZATION_VERSION}
_QUANTIZABLE_SOURCES = ("F32", "F16", "BF16")


def facts_of(gguf: GgufFile) -> ModelFacts:
    """What llama-quantize's rules need to know about a model, from its GGUF metadata."""
    arch = gguf.architecture
    meta = gguf.metadata
    missing = [k for k in (f"{arch}.attention.head_count", f"{arch}.block_count") if k not in meta]
    if missing:
        raise GgufError(f"{gguf.path}: no {' or '.join(missing)} in the metadata; is it a model file?")
    heads = meta[f"{arch}.attention.head_count"]
    kv = meta.get(f"{arch}.attention.head_count_kv", heads)
    return ModelFacts(meta[f"{arch}.block_count"], meta.get(f"{arch}.expert_count", 0), heads // kv, "output.weight" not in gguf.tensors)


@dataclass(frozen=True)
class _Chunk:
    """A run of whole rows of one tensor: where they are read and where their result goes."""

    name: str
    path: Path  # the source file (shard) holding the tensor
    src_offset: int
    dst_offset: int
    rows: int
    cols: int
    src_type: GgmlType
    dst_type: GgmlType | None  # None: the bytes are copied as they are

    @property
    def in_bytes(self) -> int:
        return self.rows * self.src_type.row_bytes(self.cols)

    @property
    def out_bytes(self) -> int:
        return self.rows * (self.dst_type or self.src_type).row_bytes(self.cols)


def quantize_gguf(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    mix_or_type: str,
    device: str | torch.device | None = None,
    progress: bool = True,
    *,
    overwrite: bool = False,
    chunk_bytes: int = 32 << 20,
    workers: int | None = None,
) -> dict:
    """Quantize the float GGUF `src` (F32/F16/BF16 tensors; a split set given by any shard) to
    `dst` as llama-quantize would with the file type `mix_or_type` (`"Q4_K_M"`, `"Q8_0"`, ...; a
    plain ggml type such as `"Q4_K"` quantizes every eligible matrix to it).

    `device`: where to quantize (default CUDA when available, else CPU). `chunk_bytes`: source
    bytes per work item (larger tensors are split by rows); `workers`: threads in the pipeline
    (default 4 on CUDA, 1 on CPU).
    Returns a report: seconds, bytes read and written, tensor count, tensors per output type, and
    the workers' time per phase (read, quantize, write).
    """
    start = time.perf_counter()
    if chunk_bytes <= 0:
        raise ValueError(f"quantize_gguf: chunk_bytes must be positive, got {chunk_bytes}")
    src, dst = Path(src), check_destination(dst, overwrite, "quantize_gguf")
    gguf = read_gguf(src)
    out_types = _output_types(gguf, mix_or_type)
    dev = torch.device(device) if device is not None else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())  # the worker threads set it by index
    # Buffered writes to one file are serialized by the kernel, so a few workers keep the writer
    # busy (an 8B Q8_0 on the H200: 4 workers 2.7 s, 8 workers 2.9 s). On CPU the quantizer
    # already uses every core (torch's intra-op threads), and more workers would oversubscribe them.
    workers = workers or (min(4, os.cpu_count() or 1) if dev.type == "cuda" else 1)

    partial = partial_path(dst)
    try:
        alignment = int(gguf.metadata.get(Keys.General.ALIGNMENT, _ALIGNMENT))
        data_start = _write_header(partial, gguf, out_types, mix_or_type, alignment)
        chunks, size = _plan(gguf, out_types, data_start, alignment, chunk_bytes)
        fd = os.open(partial, os.O_WRONLY)
        try:
            os.ftruncate(fd, size)  # the padding between tensors stays zero, as gguf-py writes it
            busy = _run(chunks, fd, dev, workers, progress, dst.name)
        finally:
            os.close(fd)
        move_into_place(partial, dst, overwrite, "quantize_gguf")
    finally:
        partial.unlink(missing_ok=True)
    return {
        "seconds": time.perf_counter() - start,
        "bytes_read": sum(c.in_bytes for c in chunks),
        "bytes_written": size,
        "tensors": len(out_types),
        "types": dict(Counter(t.name for t in out_types.values())),
        "device": str(dev),
        "busy_seconds": busy,  # per phase, summed over the worker threads
    }


def _output_types(gguf: GgufFile, mix: str) -> dict[str, GgmlType]:
    """Every tensor's output type: the mix's choice, or its own type when the mix keeps it."""
    chosen = choose_types(mix, {n: t.shape for n, t in gguf.tensors.items()}, facts_of(gguf))
    out = {}
    for name, info in gguf.tensors.items():
        t = ggml_type(chosen.get(name, info.type))
        if t != info.type and info.type.name not in _QUANTIZABLE_SOURCES:
            raise GgufError(
                f"{info.path}: tensor {name!r} is stored as {info.type.name}; only F32, F16 and BF16 tensors "
                f"can be quantized (here to {t.name}), requantizing is not supported"
            )
        out[name] = t
    return out


def _file_type(mix: str) -> int | None:
    """`general.file_type`: llama-quantize's value for a mix; for a plain ggml type, the
    `MOSTLY_` file type of that name (K types read as their _M mix), if there is one."""
    key = mix.upper()
    members = LlamaFileType.__members__
    for name in (f"MOSTLY_{key}", f"MOSTLY_{key}_M", f"MOSTLY_{key}_MOE"):
        if name in members:
            return int(members[name])
    return None


def _metadata(gguf: GgufFile, mix: str) -> dict[str, GGUFValue]:
    """The source's key/values (typed as llama.cpp reads them), with the file type and
    quantization version of the new file, as llama-quantize writes them."""
    meta = copied_metadata(gguf.metadata, _OWN_KEYS) | source_tokenizer(gguf.metadata)
    ftype = _file_type(mix)
    if ftype is not None:
        meta[Keys.General.FILE_TYPE] = GGUFValue(ftype, GGUFValueType.UINT32)
    meta[Keys.General.QUANTIZATION_VERSION] = GGUFValue(GGML_QUANT_VERSION, GGUFValueType.UINT32)
    return meta


def _write_header(path: Path, gguf: GgufFile, types: dict[str, GgmlType], mix: str, alignment: int) -> int:
    """Write header, key/values and tensor table to `path`; returns where the tensor data start."""
    w = GGUFWriter(path, gguf.architecture)
    try:
        if Keys.General.ALIGNMENT in gguf.metadata:
            w.add_custom_alignment(alignment)
        for key, v in _metadata(gguf, mix).items():
            w.add_key_value(key, v.value, v.type, v.sub_type)
        for name, info in gguf.tensors.items():
            t = types[name]
            # byte shape (rows of blocks) with raw_dtype: gguf-py turns it back into elements
            w.add_tensor_info(name, (*info.shape[:-1], t.row_bytes(info.shape[-1])), np.uint8,
                              t.row_bytes(info.shape[-1]) * prod(info.shape[:-1]), raw_dtype=GGMLQuantizationType(t.id))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        end = w.fout[0].tell()
    finally:
        w.close()
    return GGUFWriter.ggml_pad(end, alignment)


def _plan(gguf: GgufFile, types: dict[str, GgmlType], data_start: int, alignment: int, chunk_bytes: int) -> tuple[list[_Chunk], int]:
    """The work items, and the output file's size. Tensor offsets follow gguf-py's tensor table:
    in order, each padded to the alignment."""
    chunks = []
    offset = data_start
    for name, info in gguf.tensors.items():
        t = types[name]
        cols, rows = info.shape[-1], prod(info.shape[:-1])
        dst_type = None if t == info.type else t
        src_row, dst_row = info.type.row_bytes(cols), t.row_bytes(cols)
        step = max(1, chunk_bytes // src_row)
        for r in range(0, rows, step):
            n = min(step, rows - r)
            chunks.append(_Chunk(name, info.path, info.offset + r * src_row, offset + r * dst_row, n, cols, info.type, dst_type))
        offset += GGUFWriter.ggml_pad(rows * dst_row, alignment)
    return chunks, offset


class _Slot:
    """One worker's buffers: source bytes in, blocks out (pinned, for async copies, on CUDA)."""

    def __init__(self, device: torch.device, in_bytes: int, out_bytes: int):
        cuda = device.type == "cuda"
        self.inp = torch.empty(in_bytes, dtype=torch.uint8, pin_memory=cuda)
        self.out = torch.empty(out_bytes, dtype=torch.uint8, pin_memory=True) if cuda else None
        self.stream = torch.cuda.Stream(device) if cuda else None


def _run(chunks: list[_Chunk], out_fd: int, device: torch.device, workers: int, progress: bool, label: str) -> dict[str, float]:
    """Process every chunk; returns the seconds the workers spent reading, on the device (or CPU)
    and writing, summed over workers: where a slow run waits."""
    busy = {"read": 0.0, "quantize": 0.0, "write": 0.0}
    if not chunks:
        return busy
    todo: queue.SimpleQueue[_Chunk] = queue.SimpleQueue()
    for c in chunks:
        todo.put(c)
    failed = threading.Event()
    lock = threading.Lock()
    workers = min(workers, len(chunks))
    slots = [_Slot(device, max(c.in_bytes for c in chunks), max(c.out_bytes for c in chunks)) for _ in range(workers)]
    fds = {p: os.open(p, os.O_RDONLY) for p in {c.path for c in chunks}}
    bar = tqdm(total=sum(c.out_bytes for c in chunks), unit="B", unit_scale=True, desc=label, disable=not progress)

    def work(slot: _Slot) -> None:
        try:
            if slot.stream is not None:
                torch.cuda.set_device(device)  # a new thread starts on the default device
            while not failed.is_set():
                try:
                    c = todo.get_nowait()
                except queue.Empty:
                    return
                spent = _process(c, fds[c.path], out_fd, device, slot)
                with lock:
                    bar.update(c.out_bytes)
                    for key, sec in zip(busy, spent):
                        busy[key] += sec
        except BaseException:
            failed.set()  # the other workers stop after their current chunk
            raise

    try:
        with ThreadPoolExecutor(workers, thread_name_prefix="quantize_gguf") as pool:
            futures = [pool.submit(work, s) for s in slots]
            try:
                for f in futures:
                    f.result()
            except BaseException:
                failed.set()
                raise
    finally:
        bar.close()
        for fd in fds.values():
            os.close(fd)
    return busy


def _process(c: _Chunk, in_fd: int, out_fd: int, device: torch.device, slot: _Slot) -> tuple[float, float, float]:
    """Read, quantize and write one chunk; returns the seconds each of the three took."""
    t0 = time.perf_counter()
    raw = slot.inp[: c.in_bytes]
    _read_exactly(in_fd, memoryview(raw.numpy()), c.src_offset, c)
    t1 = time.perf_counter()
    if c.dst_type is None:
        data = raw
    elif slot.stream is None:
        data = quantize(_as_float(raw, c), c.dst_type).reshape(-1)
    else:
        with torch.cuda.stream(slot.stream):
            packed = quantize(_as_float(raw.to(device, non_blocking=True), c), c.dst_type)
            data = slot.out[: c.out_bytes]
            data.copy_(packed.reshape(-1), non_blocking=True)
        slot.stream.synchronize()  # also frees the input buffer for this worker's next read
    t2 = time.perf_counter()
    _write_all(out_fd, memoryview(data.contiguous().numpy()), c.dst_offset)
    return t1 - t0, t2 - t1, time.perf_counter() - t2


def _as_float(raw: torch.Tensor, c: _Chunk) -> torch.Tensor:
    return raw.view(FLOAT_TYPES[c.src_type.name]).view(c.rows, c.cols)


def _read_exactly(fd: int, buf: memoryview, offset: int, c: _Chunk) -> None:
    done = 0
    while done < len(buf):
        n = os.preadv(fd, [buf[done:]], offset + done)
        if n == 0:
            raise GgufError(f"{c.path}: tensor {c.name!r}: the file ends at byte {offset + done}, before its data do: the file is truncated")
        done += n


def _write_all(fd: int, buf: memoryview, offset: int) -> None:
    done = 0
    while done < len(buf):
        done += os.pwrite(fd, buf[done:], offset + done)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m gguf_quant.gguf_io.requantize", description="Quantize a float GGUF file as llama-quantize does.")
    p.add_argument("src", type=Path, help="float GGUF (F32/F16/BF16), or any shard of a split one")
    p.add_argument("dst", type=Path, help="output .gguf")
    p.add_argument("mix", help="llama-quantize file type (Q4_K_M, Q8_0, ...) or a ggml type (Q4_K, ...)")
    p.add_argument("--device", default=None, help="cuda, cuda:1, cpu (default: cuda when available)")
    p.add_argument("--overwrite", action="store_true", help="replace dst if it exists")
    args = p.parse_args(argv)
    report = quantize_gguf(args.src, args.dst, args.mix, args.device, overwrite=args.overwrite)
    gb = report["bytes_read"] / 1e9
    print(f"{args.dst}: {report['tensors']} tensors {report['types']}, {gb:.2f} GB read in {report['seconds']:.1f} s on {report['device']}")


if __name__ == "__main__":
    main()
