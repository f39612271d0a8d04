"""Each kernel's main loop counted by the pipe that issues its instructions, from the SASS, no GPU:

    pip install nvidia-cuda-nvdisasm       # nvdisasm alone (PyPI), where the toolkit has none
    python benchmarks/sass_pipes.py kernels-src/gguf_kernels/csrc/fast_iq4_xs.cu \
        --kernel 'gemv_stream_kernelILi23E13__nv_bfloat16' [--mix] [--src OTHER_TREE/csrc] [--diff BASE_TREE/csrc]

compiles the .cu as build_kernels.py does (its nvcc flags, sm_90a) into a cubin, or takes a .cubin,
disassembles it, and prints for each kernel whose mangled name matches --kernel the instructions of its
stage loop (the innermost loop that holds its mma, else its largest loop) by pipe: ALU (LOP3, PRMT, SHF,
ISETP, FSEL, ...: 64 lanes a cycle an SM on Hopper), FMA (FFMA, FMUL, FADD, IMAD, VIADD, HADD2: IMAD at 64, the float
ones at 128), CONV (I2F, F2I, I2FP, F2FP: 16), MMA, LDS and the rest; --mix adds the opcodes. A
decode bound by issue shows as ALU well above FMA (NOTES.md v95: IQ4_XS 785 ALU to 251 FMA a stage
of 32 mma at MT = 2, where MXFP4, at the same bits a weight and 1.3x its speed, has 564 to 376).
--diff adds each kernel's stage loop in the same .cu from another csrc folder, or "same" where the whole kernel is
the same code: an A/B's rows whose kernels are the same in both trees measure drift between builds, not the patch
(session 95: the IQ4_XS MoE gate moved 1-2% between trees whose kernels for it were the same).
"""
from __future__ import annotations

import argparse
import collections
import importlib.util
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path


def _build_module():
    """build_kernels.py by its path, not through the package, whose import needs torch and transformers."""
    path = Path(__file__).resolve().parents[1] / "src" / "gguf_quant" / "build_kernels.py"
    spec = importlib.util.spec_from_file_location("gguf_quant_build_kernels", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_BUILD = _build_module()
NVCC_FLAGS, arch_flags = _BUILD.NVCC_FLAGS, _BUILD.arch_flags

ALU = ("LOP3", "PRMT", "SHF", "ISETP", "FSETP", "FSEL", "SEL", "IADD3", "LEA", "MOV", "FMNMX", "VIMNMX",
       "VIADDMNMX", "PLOP3", "BMSK", "SGXT", "IABS", "P2R", "R2P", "IMNMX")
FMA = ("FFMA", "FMUL", "FADD", "IMAD", "VIADD", "HADD2", "HFMA2", "HMUL2")
CONV = ("I2F", "F2I", "I2FP", "F2FP", "F2F")
MMA = ("HMMA", "IMMA")


def nvdisasm() -> str:
    """nvdisasm from PATH, else from the nvidia-cuda-nvdisasm wheel in this Python's site-packages."""
    found = shutil.which("nvdisasm")
    if found:
        return found
    for sub in ("cu13", "cu12", "cuda_nvdisasm"):
        p = Path(sysconfig.get_paths()["purelib"]) / "nvidia" / sub / "bin" / "nvdisasm"
        if p.exists():
            return str(p)
    sys.exit("nvdisasm not found: pip install nvidia-cuda-nvdisasm, or put the toolkit's on PATH")


def cubin(path: Path, out_dir: str, arch: str) -> Path:
    """path itself if a cubin, else path compiled with the build's flags."""
    if path.suffix == ".cubin":
        return path
    out = Path(out_dir) / (path.stem + ".cubin")
    subprocess.run(["nvcc", *NVCC_FLAGS, "-std=c++17", *arch_flags([arch]), "-cubin", "-o", str(out), str(path)],
                   check=True)
    return out


def kernels(sass: str) -> dict[str, list[tuple[str, str]]]:
    """Kernel name -> its lines in order: ("L", label) or ("I", instruction text)."""
    out: dict[str, list[tuple[str, str]]] = {}
    cur = None
    for line in sass.splitlines():
        m = re.match(r"^\.text\.(\S+):", line)
        if m:
            cur = out.setdefault(m.group(1), [])
            continue
        if cur is None:
            continue
        m = re.match(r"^(\.L_x_\d+):", line)
        if m:
            cur.append(("L", m.group(1)))
            continue
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;", line)
        if m:
            cur.append(("I", m.group(1)))
    return out


def stage_loop(body: list[tuple[str, str]]) -> list[str]:
    """The instructions from a label to a backward branch to it: of those ranges that hold mma instructions, the ones
    holding no other such range (the stage loops, not a range that also spans code placed after them and branching
    back, such as a shuffle's out-of-line collective path or an mbarrier wait's retry, which may span two stage
    loops), the one with the most mma, then the shortest; the longest range where none holds an mma."""
    labels, ins = {}, []
    for kind, text in body:
        if kind == "L":
            labels[text] = len(ins)
        else:
            ins.append(text)
    is_mma = [pipe(opcode(t)) == "MMA" for t in ins]
    mma_before = [0]
    for m in is_mma:
        mma_before.append(mma_before[-1] + m)
    ranges = []  # (lo, hi, mma instructions in lo..hi)
    for i, text in enumerate(ins):
        m = re.search(r"BRA\S*\s.*`\((\.L_x_\d+)\)", text)
        if m and labels.get(m.group(1), i + 1) <= i:
            lo = labels[m.group(1)]
            ranges.append((lo, i, mma_before[i + 1] - mma_before[lo]))
    if not ranges:
        return []
    with_mma = [r for r in ranges if r[2]]
    inner = [r for r in with_mma
             if not any(o != r and r[0] <= o[0] and o[1] <= r[1] for o in with_mma)]
    if inner:
        lo, hi, _ = max(inner, key=lambda r: (r[2], -(r[1] - r[0])))
    else:
        lo, hi, _ = max(ranges, key=lambda r: r[1] - r[0])
    return ins[lo:hi + 1]


def same_code(a: list[tuple[str, str]], b: list[tuple[str, str]]) -> bool:
    """Whether two kernels' lines are the same code: nvdisasm numbers labels over the whole cubin, so a change in one
    kernel renumbers the labels of those after it; each label is renamed here by its first appearance."""
    def canon(body: list[tuple[str, str]]) -> list[tuple[str, str]]:
        names: dict[str, str] = {}
        rename = lambda m: names.setdefault(m.group(0), f"L{len(names)}")  # noqa: E731
        return [(kind, re.sub(r"\.L_x_\d+", rename, text)) for kind, text in body]
    return canon(a) == canon(b)


def disassemble(path: Path, arch: str) -> dict[str, list[tuple[str, str]]]:
    """The kernels of a .cu (compiled with the build's flags) or a .cubin."""
    with tempfile.TemporaryDirectory() as tmp:
        sass = subprocess.run([nvdisasm(), "-c", str(cubin(path, tmp, arch))], check=True,
                              capture_output=True, text=True).stdout
    return kernels(sass)


def short_name(mangled: str) -> str:
    """The kernel's template as c++filt writes it, without namespaces and arguments (mangled without c++filt)."""
    if not shutil.which("c++filt"):
        return mangled
    full = subprocess.run(["c++filt", mangled], capture_output=True, text=True).stdout.strip()
    m = re.search(r"(\w+<.*?>)\(", full)
    return m.group(1) if m else full


def opcode(text: str) -> str:
    return re.sub(r"^@!?U?P\w+\s+", "", text).split()[0]


def pipe(op: str) -> str:
    base = op.split(".")[0]
    for name, ops in (("ALU", ALU), ("FMA", FMA), ("CONV", CONV), ("MMA", MMA)):
        if base in ops:
            return name
    return "LDS" if base.startswith("LDS") else "other"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("file", type=Path, help=".cu (compiled here) or .cubin")
    p.add_argument("--kernel", default=".", help="regex on the mangled kernel name")
    p.add_argument("--src", type=Path, default=None, help="compile the .cu of this name from another csrc folder")
    p.add_argument("--arch", default="9.0a")
    p.add_argument("--mix", action="store_true", help="also print the loop's opcodes")
    p.add_argument("--diff", type=Path, default=None, help="another csrc folder: its loop, or 'same' (the .cu only)")
    args = p.parse_args(argv)
    path = args.src / args.file.name if args.src else args.file
    mine = disassemble(path, args.arch)
    base = disassemble(args.diff / args.file.name, args.arch) if args.diff else None
    cols = ("ALU", "FMA", "CONV", "MMA", "LDS", "other")
    print(f"| kernel | loop | {' | '.join(cols)} |" + (" base |" if base is not None else ""))
    print("| --- | ---: |" + " ---: |" * len(cols) + (" ---: |" if base is not None else ""))
    for name, body in mine.items():
        if not re.search(args.kernel, name):
            continue
        ops = [opcode(t) for t in stage_loop(body)]
        by_pipe = collections.Counter(pipe(o) for o in ops)
        row = f"| {short_name(name)} | {len(ops)} | " + " | ".join(str(by_pipe[c]) for c in cols) + " |"
        if base is not None:
            other = base.get(name)
            row += (" absent |" if other is None else " same |" if same_code(body, other)
                    else f" {len(stage_loop(other))} |")
        print(row)
        if args.mix:
            print("  " + " ".join(f"{o}:{n}" for o, n in collections.Counter(ops).most_common()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
