"""Packed GGUF matmul on the GPU: time, weight GB/s and TFLOP/s for the shapes of ANCHORS.md.

    GGUF_QUANT_KERNELS=<build dir> python benchmarks/bench_matmul.py [--quick] [--out FILE.md]
        [--llama FILE.json]

Weights are random valid blocks, rotated over more than 2 GB of copies (so L2 never holds
them), the timed calls captured back to back in one CUDA graph, replayed; the median replay time
over the copies is reported. The M <= 8 stream kernels start as programmatic dependent launches, so
each call's first CTAs overlap the previous call's last ones, as consecutive projections (k and v
after q, up after gate) do in a decode step; `benchmarks/gemv_probe.cu layer` times a whole layer's
sequence with the kernels that write x in between. GB/s counts packed weight bytes once per call (MoE: the
experts its routing hits, each once; tables before session 79 counted min(E, T * top_k) experts); TFLOP/s counts
2*M*N*K. Each row's kernel also runs once on its first weight copy against the fp32 product of the dequantized
weights; a row past the kernel tests' bf16 tolerance is printed as WRONG RESULT (and added to --out), and the script
exits 1.
llama.cpp's figures come from `--llama` (a JSON written by benchmarks/llama_mm_bench, its column
labelled `--llama-label`, "same run" from device_run.sh, else the file's name) when given, otherwise
from ANCHORS.md (another day: compare ratios with care).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import torch

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from random_blocks import SCALE_FIELDS  # noqa: E402
from moe_reference import moe_reference  # noqa: E402

DEV = torch.device("cuda")
DENSE_SHAPES = [(4096, 14336), (14336, 4096), (4096, 4096), (4096, 1024), (4096, 128256)]
MS = [1, 2, 4, 8, 16, 32, 64, 512, 2048]  # ANCHORS.md's M, and 32 (the tile kernel's upper end)
TYPES = ["Q4_0", "Q4_K", "Q5_K", "Q6_K", "Q8_0", "MXFP4", "IQ4_XS"]
# (name, K, N, experts, top_k, types, x rows): Q4_K_M files keep Qwen3-MoE's expert down projections in
# Q4_K or Q6_K; IQ4_XS files keep every expert in IQ4_XS. x rows as the model gives them: the gate
# projections one a token, shared by its top_k pairs (x [T, K]); the down projection one a pair, each
# slot's own gate output (x [T, top_k, K]).
MOE_SHAPES = [("qwen3-30b-a3b gate", 2048, 768, 128, 8, ["Q4_K", "Q8_0", "IQ4_XS"], "token"),
              ("qwen3-30b-a3b down", 768, 2048, 128, 8, ["Q4_K", "Q6_K", "IQ4_XS"], "pair"),
              ("gpt-oss-20b gate", 2880, 2880, 32, 4, ["MXFP4"], "token")]
MOE_TS = [1, 8, 32, 512]
ROTATE_BYTES = 2.2e9


# llama.cpp on this H200 (ANCHORS.md, Nov 2026): microseconds per call.
def _anchors() -> dict:
    a = {}
    m1 = {"Q4_0": (17.3, 7.0, 3.7), "Q4_K": (19.6, 7.8, 4.0), "Q5_K": (21.5, 8.3, 4.1), "Q6_K": (31.1, 11.3, 5.8),
          "Q8_0": (23.1, 8.8, 4.4), "MXFP4": (21.3, 8.3, 4.1), "IQ4_XS": (18.6, 7.9, 4.4), "BF16": (32.8, 11.0, 4.1)}
    gbs_14336 = {"Q4_0": 2125, "Q4_K": 1916, "Q5_K": 2061, "Q6_K": 1687, "Q8_0": 2732, "MXFP4": 1506,
                 "IQ4_XS": 2017, "BF16": 3889}
    m8 = {"Q4_0": 35.0, "Q4_K": 71.3, "Q5_K": 73.5, "Q6_K": 62.1, "Q8_0": 44.4, "MXFP4": 41.4, "IQ4_XS": 39.8,
          "BF16": 33.7}
    for t, (u1, u2, u3) in m1.items():
        a[("dense", t, 4096, 14336, 1)] = u1
        a[("dense", t, 4096, 4096, 1)] = u2
        a[("dense", t, 4096, 1024, 1)] = u3
        a[("dense", t, 14336, 4096, 1)] = weight_bytes(t, 4096, 14336) / gbs_14336[t] / 1e3
        a[("dense", t, 4096, 14336, 8)] = m8[t]
    flop512 = 2 * 512 * 4096 * 14336
    for t, tf in {"Q4_0": 188, "Q4_K": 164, "Q8_0": 191, "BF16": 445}.items():
        a[("dense", t, 4096, 14336, 512)] = flop512 / tf / 1e6
    a[("dense", "Q6_K", 4096, 128256, 1)] = 248.0
    a[("dense", "Q8_0", 4096, 128256, 1)] = 184.0
    a[("dense", "Q4_K", 4096, 14336, 16)] = 37.8
    for t_, us in {1: 7.8, 8: 25.0, 32: 141.0, 512: 335.0}.items():
        a[("moe", "Q4_K", 2048, 768, t_)] = us
    a[("moe", "Q8_0", 2048, 768, 512)] = 311.0
    a[("moe", "MXFP4", 2880, 2880, 1)] = 16.2
    a[("moe", "MXFP4", 2880, 2880, 512)] = 421.0
    return a


def qid(name: str) -> int:
    return int(GGMLQuantizationType[name])


def weight_bytes(name: str, K: int, N: int) -> int:
    if name in ("BF16", "F16"):
        return 2 * K * N
    bs, ts = GGML_QUANT_SIZES[GGMLQuantizationType[name]]
    return N * (K // bs) * ts


def random_weights(name: str, shape: tuple[int, ...], K: int) -> torch.Tensor:
    """uint8 [*shape, row_bytes] of random valid blocks (sane fp16 scales), made on the GPU."""
    if name in ("BF16", "F16"):
        return (torch.randn(*shape, K, device=DEV) * 0.02).to(torch.bfloat16)
    bs, ts = GGML_QUANT_SIZES[GGMLQuantizationType[name]]
    nb = K // bs
    raw = torch.randint(0, 256, (*shape, nb, ts), dtype=torch.uint8, device=DEV)
    if name == "MXFP4":
        raw[..., 0] = torch.randint(118, 134, raw.shape[:-1], dtype=torch.uint8, device=DEV)
    for off in SCALE_FIELDS.get(name, []):
        h = (torch.randn(raw.shape[:-1], device=DEV) * 0.01).half()
        raw[..., off : off + 2] = h.view(torch.uint8).reshape(*raw.shape[:-1], 2)
    return raw.reshape(*shape, nb * ts)


def copies_for(nbytes: int, cap: int = 256) -> int:
    return max(2, min(cap, math.ceil(ROTATE_BYTES / nbytes)))


def time_calls(calls, reps: int = 15) -> float:
    """Median microseconds per call: all calls captured in one CUDA graph, replayed `reps` times."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for c in calls:
            c()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for c in calls:
            c()
    g.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        g.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / len(calls))
    del g
    times.sort()
    return times[len(times) // 2]


def copy_bandwidth() -> float:
    """GB/s (read + write) of a 2 GB copy by an elementwise kernel, the card's copy rate that issue 3's M = 1 floor
    takes 80% of. (Before session 73: `copy_`, a graph's memcpy node, which read 2706 GB/s on the H200 whose copy
    rate ANCHORS.md measured at 4.3 TB/s.)"""
    a = torch.empty(int(5e8), dtype=torch.float32, device=DEV)
    b = torch.empty_like(a)
    us = time_calls([lambda: torch.add(a, 0.0, out=b)], reps=10)
    del a, b
    return 2 * 2e9 / us / 1e3


# The bf16 tolerance of the kernel tests (tests/test_kernels.py TOL): each row's kernel is also run once eagerly on its
# first weight copy and compared with the fp32 reference, since a timing says nothing of the numbers (session 97: the
# stage knob GGUF_KERNELS_FAST_S=1 timed 1-16% "faster" on every MoE row while its one buffer was overwritten as read)
CHECK_TOL = 1e-2


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in fp32; inf where out holds a non-finite value."""
    out = out.float()
    if not torch.isfinite(out).all():
        return math.inf
    return ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def dequantized(name: str, packed: torch.Tensor) -> torch.Tensor:
    """fp32 weights [..., K] of packed rows, by the project's pure-torch dequantizer (tested against gguf-py)."""
    from gguf_quant.ggml import dequantize
    return dequantize(packed.reshape(-1, packed.shape[-1]), qid(name), torch.float32).reshape(*packed.shape[:-1], -1)


def bench_dense(kmod, name: str, K: int, N: int, ms: list[int]) -> list[dict]:
    rows = []
    nbytes = weight_bytes(name, K, N)
    C = copies_for(nbytes)
    ws = [random_weights(name, (N,), K) for _ in range(C)]
    # BF16: torch's own matmul, a row with no packed weights to check
    q, w0 = (None, None) if name == "BF16" else (qid(name), dequantized(name, ws[0]))
    for M in ms:
        x = torch.randn(M, K, device=DEV, dtype=torch.bfloat16)
        c = C if M <= 64 else min(C, 4)
        if q is None:
            calls = [lambda w=w: torch.matmul(x, w.T) for w in ws[:c]]
        else:
            calls = [lambda w=w: kmod.matmul(x, w, q) for w in ws[:c]]
        us = time_calls(calls)
        err = 0.0 if q is None else rel_err(kmod.matmul(x, ws[0], q), x.float() @ w0.T)
        rows.append(dict(kind="dense", type=name, K=K, N=N, M=M, us=us, gbs=nbytes / us / 1e3,
                         tflops=2 * M * N * K / us / 1e6, err=err))
    del ws, w0
    torch.cuda.empty_cache()
    return rows


def bench_moe(kmod, name: str, label: str, K: int, N: int, E: int, top_k: int, ts: list[int],
              x_rows: str = "token") -> list[dict]:
    rows = []
    nbytes = weight_bytes(name, K, N) * E
    C = copies_for(nbytes, cap=64)
    ws = [random_weights(name, (E, N), K) for _ in range(C)]
    w0 = dequantized(name, ws[0])
    q = qid(name)
    for T in ts:
        x = torch.randn((T, top_k, K) if x_rows == "pair" else (T, K), device=DEV, dtype=torch.bfloat16)
        # a fixed routing per T: the grouped path's tile count depends on it (Qwen3's down projection
        # at T = 8 measured 44-50 us across calls with a fresh draw each; NOTES.md v15)
        g = torch.Generator(device=DEV).manual_seed(1000 + T)
        ids = torch.rand(T, E, device=DEV, generator=g).argsort(dim=1)[:, :top_k].contiguous()
        c = C if T <= 64 else min(C, 4)
        us = time_calls([lambda w=w: kmod.moe_matmul(x, w, ids, q) for w in ws[:c]])
        err = rel_err(kmod.moe_matmul(x, ws[0], ids, q), moe_reference(x, w0, ids))
        hit = int(ids.unique().numel())  # the experts read (random routing hits ~52 of 128 at Qwen3's T = 8, not 64)
        rows.append(dict(kind="moe", type=name, K=K, N=N, M=T, us=us,
                         gbs=weight_bytes(name, K, N) * hit / us / 1e3,
                         tflops=2 * T * top_k * N * K / us / 1e6, label=f"{label} x{E} top-{top_k}, x row a {x_rows}",
                         err=err))
    del ws, w0
    torch.cuda.empty_cache()
    return rows


def make_plan(types: list[str], ms: list[int], quick: bool, moe: bool,
              shapes: list[tuple[int, int]] | None = None, moe_types: list[str] | None = None,
              moe_ts: list[int] | None = None) -> list[tuple]:
    """(kind, type, K, N, Ms, extra) to run: the full M sweep on 4096 -> 14336, decode sizes and
    M=512 elsewhere, the output projection for the types llama.cpp uses there, MoE gate shapes.
    With `shapes`: exactly those dense shapes, each with all of `ms`. With `moe_types`: those types on
    every MoE shape whose K their blocks divide, instead of the types each shape names; with `moe_ts`, those token
    counts instead of MOE_TS."""
    plan = []
    for name in types:
        if shapes:
            bs = GGML_QUANT_SIZES[GGMLQuantizationType[name]][0]
            for K, N in shapes:
                if K % bs:
                    raise SystemExit(f"--shapes {K}x{N}: K = {K} is not a multiple of {name}'s {bs}-element blocks")
            plan += [("dense", name, K, N, list(ms), None) for K, N in shapes]
            continue
        for K, N in DENSE_SHAPES:
            if quick:
                if (K, N) in ((4096, 14336), (4096, 4096)):
                    plan.append(("dense", name, K, N, [1, 8], None))
                continue
            if (K, N) == (4096, 14336):
                sel = ms if name in ("Q4_0", "Q4_K", "Q8_0", "BF16") else [m for m in ms if m in (1, 8, 16, 32, 512)]
            elif N == 128256:
                if name not in ("Q4_K", "Q6_K", "Q8_0", "BF16"):
                    continue
                sel = [m for m in ms if m in (1, 8)]
            else:
                sel = [m for m in ms if m in ((1, 2, 4, 8, 512) if name in ("Q4_0", "Q4_K", "Q8_0") else (1, 8))]
            plan.append(("dense", name, K, N, sel, None))
    if moe:
        ts = moe_ts or ([1, 8] if quick else [t for t in MOE_TS if t in ms])
        for label, K, N, E, k, shape_types, x_rows in MOE_SHAPES:
            names = ([t for t in moe_types if K % GGML_QUANT_SIZES[GGMLQuantizationType[t]][0] == 0] if moe_types
                     else [t for t in shape_types if t in types])
            plan += [("moe", name, K, N, ts, (label, E, k, x_rows)) for name in names]
    return plan


def read_llama(path: str) -> dict:
    """llama_mm_bench's JSON; a run cut short leaves it unterminated, so read it line by line."""
    import re

    out = {}
    with open(path) as f:
        for line in f:
            m = re.match(r'\s*"(\[.*\])": ([0-9.eE+-]+)', line)
            if m:
                out[tuple(json.loads(m.group(1).replace('\\"', '"')))] = float(m.group(2))
    return out


def fmt_table(rows: list[dict], llama: dict, llama_src: str, us_digits: int = 1) -> str:
    out = [f"| kind | type | K -> N | M | ours us | weight GB/s | TFLOP/s | llama.cpp us ({llama_src}) | llama / ours |",
           "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        key = (r["kind"], r["type"], r["K"], r["N"], r["M"])
        ll = llama.get(key)
        shape = f"{r['K']} -> {r['N']}" + (f" ({r['label']})" if r.get("label") else "")
        ll_s = "" if ll is None else f"{ll:.1f}"
        ratio = "" if ll is None else f"{ll / r['us']:.2f}x"
        out.append(f"| {r['kind']} | {r['type']} | {shape} | {r['M']} | {r['us']:.{us_digits}f} | {r['gbs']:.0f} | "
                   f"{r['tflops']:.1f} | {ll_s} | {ratio} |")
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="M=1 and 8 on the 4096-wide shapes only")
    p.add_argument("--types", default=",".join(TYPES))
    p.add_argument("--ms", default=",".join(map(str, MS)))
    p.add_argument("--no-moe", action="store_true")
    p.add_argument("--moe-only", action="store_true")
    p.add_argument("--moe-types", default=None,
                   help="time these types on every MoE shape their blocks fit (default: the shape's own types)")
    p.add_argument("--moe-ts", default=None, help="the MoE rows' token counts (default: those of 1, 8, 32, 512 in --ms)")
    p.add_argument("--shapes", default=None, help="dense shapes only, e.g. 4096x14336,14336x4096 (all of --ms each)")
    p.add_argument("--rotate-gb", type=float, default=None, help="GB of weight copies to rotate over (default 2.2)")
    p.add_argument("--bf16", action="store_true", help="also time bf16 weights through cuBLAS")
    p.add_argument("--llama", default=None, help="JSON of llama.cpp timings (benchmarks/llama_mm_bench)")
    # the table's llama.cpp column says where its times came from: "same run" where device_run.sh timed
    # llama.cpp in this call, else the file's name (session 36 labelled stored times "same run")
    p.add_argument("--llama-label", default=None, help="the llama.cpp column's source (default: the file's name)")
    p.add_argument("--out", default=None, help="also write the table (markdown) here")
    p.add_argument("--us-digits", type=int, default=1, help="decimals of the us column (A/B runs: 2)")
    p.add_argument("--emit-cases", default=None, help="write the cases for llama_mm_bench and exit")
    p.add_argument("--save-rows", default=None, help="also save the measured rows (JSON)")
    p.add_argument("--load-rows", default=None, help="print the table of saved rows (with --llama) and exit")
    args = p.parse_args(argv)

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
    from gguf_quant import kernel_loader

    kmod = kernel_loader.kernel_module() if not (args.emit_cases or args.load_rows) else None
    if kmod is None and not (args.emit_cases or args.load_rows):
        print("no kernel build found: set GGUF_QUANT_KERNELS", file=sys.stderr)
        return 1
    types = args.types.split(",")
    ms = [int(m) for m in args.ms.split(",")]
    if args.rotate_gb:
        global ROTATE_BYTES
        ROTATE_BYTES = args.rotate_gb * 1e9
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")] if args.shapes else None
    plan = make_plan(types + (["BF16"] if args.bf16 else []), ms, args.quick, not args.no_moe and not shapes, shapes,
                     args.moe_types.split(",") if args.moe_types else None,
                     [int(t) for t in args.moe_ts.split(",")] if args.moe_ts else None)
    if args.moe_only:
        plan = [entry for entry in plan if entry[0] == "moe"]
    if args.emit_cases:
        with open(args.emit_cases, "w") as f:
            for kind, name, K, N, sel, extra in plan:
                if name == "BF16":
                    continue
                for m in sel:
                    moe = f" {extra[1]} {extra[2]} {int(extra[3] == 'pair')}" if kind == "moe" else ""
                    f.write(f"{kind} {name} {K} {N} {m}{moe}\n")
        return 0
    llama, llama_src = _anchors(), "ANCHORS.md"
    if args.llama and os.path.exists(args.llama):
        llama, llama_src = read_llama(args.llama), args.llama_label or os.path.basename(args.llama)
    if args.load_rows:
        with open(args.load_rows) as f:
            saved = json.load(f)
        report(saved["header"], saved["rows"], llama, llama_src, args.out, args.us_digits)
        return 1 if wrong_rows(saved["rows"], args.out) else 0

    props = torch.cuda.get_device_properties(0)
    header = (f"{props.name}, {props.multi_processor_count} SMs, torch {torch.__version__}, "
              f"kernels from {kernel_loader.kernel_source()}; device copy {copy_bandwidth():.0f} GB/s")
    print(header, flush=True)
    t0 = time.time()
    rows = []
    for kind, name, K, N, sel, extra in plan:
        if kind == "dense":
            rows += bench_dense(kmod, name, K, N, sel)
        else:
            rows += bench_moe(kmod, name, extra[0], K, N, extra[1], extra[2], sel, extra[3])
        print(f"  {kind} {name} {K}->{N} done ({time.time() - t0:.0f}s)", flush=True)
    if args.save_rows:
        with open(args.save_rows, "w") as f:
            json.dump({"header": header, "rows": rows}, f)
    report(header, rows, llama, llama_src, args.out, args.us_digits)
    return 1 if wrong_rows(rows, args.out) else 0


def wrong_rows(rows: list, out: str | None) -> list:
    """The rows whose eager output missed the reference by more than CHECK_TOL, printed (and added to `out`): their
    times are of wrong numbers."""
    bad = [r for r in rows if r.get("err", 0.0) > CHECK_TOL]
    if bad:
        lines = [f"WRONG RESULT: {r['kind']} {r['type']} {r['K']} -> {r['N']} M = {r['M']}: rel err {r['err']:.2e}"
                 f" > {CHECK_TOL}" for r in bad]
        print("\n".join(lines))
        if out:
            with open(out, "a") as f:
                f.write("\n" + "\n".join(lines) + "\n")
    return bad


def report(header: str, rows: list, llama, llama_src: str, out: str | None, us_digits: int = 1) -> None:
    """Print the table (ours beside llama.cpp's) and write it to `out` if given."""
    table = fmt_table(rows, llama, llama_src, us_digits)
    print(header)
    print(table)
    if out:
        with open(out, "w") as f:
            f.write(f"# bench_matmul\n\n{header}\n\n{table}\n")


if __name__ == "__main__":
    sys.exit(main())
