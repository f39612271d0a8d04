"""Build the CUDA kernels in `kernels-src/gguf_kernels` with the local CUDA toolkit.

    python -m gguf_quant.build_kernels [--out DIR] [--src DIR] [--archs 9.0a,8.0] [--jobs N]

writes `DIR/build/<variant>/` (default DIR: the kernel source folder itself), the tree that
`kernels` loads: the Python package, `_ops.py`, the compiled `.so` and `metadata.json`.
Point the plugin at it with `GGUF_QUANT_KERNELS=DIR` or
`LOCAL_KERNELS=gguf-quant/gguf-kernels=DIR`.

The op namespace, the `.so` name and `metadata.json`'s id are one string, `_gguf_kernels_<hash>`,
where the hash covers the sources, the compile flags and the target archs: two different builds
never share a namespace (torch allows one `TORCH_LIBRARY` per namespace per process), and
`kernels` never reuses a stale `.so` loaded under the same id.

Everything except `build()` is a plain function that runs without CUDA (tested on CPU).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path

logger = logging.getLogger(__name__)

KERNEL_NAME = "gguf-kernels"
PYTHON_NAME = "gguf_kernels"
REPO_ID = "gguf-quant/gguf-kernels"
KERNEL_VERSION = 1
LICENSE = "Apache-2.0"

NVCC_FLAGS = ["-O3", "--expt-relaxed-constexpr", "-Xptxas=-warn-spills"]
CXX_FLAGS = ["-O3", "-fno-gnu-unique"]


def default_source_dir() -> Path:
    """`kernels-src/gguf_kernels` of the checkout this module lives in."""
    return Path(__file__).resolve().parents[2] / "kernels-src" / PYTHON_NAME


def source_files(src_dir: Path) -> list[Path]:
    """Every file that goes into a build, sorted (the hash depends on this order)."""
    src_dir = Path(src_dir)
    files = [src_dir / "build.toml"] if (src_dir / "build.toml").exists() else []
    for sub, patterns in (("csrc", ("*.cu", "*.cuh", "*.h", "*.cpp")), ("torch-ext", ("*.cpp", "*.h", "*.py"))):
        for pattern in patterns:
            files.extend((src_dir / sub).rglob(pattern))
    files = sorted(set(files), key=lambda p: p.relative_to(src_dir).as_posix())
    if not files:
        raise FileNotFoundError(f"no kernel sources under {src_dir}")
    return files


def source_hash(src_dir: Path, extra: str = "", length: int = 12) -> str:
    """Short sha256 of the sources' paths and contents, plus `extra` (flags, archs)."""
    h = hashlib.sha256()
    for path in source_files(src_dir):
        h.update(path.relative_to(src_dir).as_posix().encode())
        h.update(b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")
    h.update(extra.encode())
    return h.hexdigest()[:length]


def extension_name(digest: str) -> str:
    """Op namespace == .so name == metadata id."""
    return f"_{PYTHON_NAME}_{digest}"


def variant_name(torch_version: str, cuda_version: str, machine: str | None = None, system: str | None = None,
                 cxx11_abi: bool = True) -> str:
    """The build variant `kernels` looks for, e.g. `torch211-cxx11-cu130-x86_64-linux`.

    `torch_version` like "2.11.0+cu130", `cuda_version` like "13.0" (torch.version.cuda).
    """
    major, minor = torch_version.split("+")[0].split(".")[:2]
    cmajor, cminor = cuda_version.split(".")[:2]
    machine = machine or platform.machine()
    system = (system or platform.system()).lower()
    abi = ("-cxx11" if cxx11_abi else "-cxx98") if system == "linux" else ""
    return f"torch{major}{minor}{abi}-cu{cmajor}{cminor}-{machine}-{system}"


def parse_archs(spec: str) -> list[str]:
    """"9.0a,8.0" or "9.0a;8.0" -> ["9.0a", "8.0"]."""
    archs = [a.strip() for a in spec.replace(";", ",").split(",") if a.strip()]
    for a in archs:
        base = a.rstrip("af")
        if base.count(".") != 1 or not all(p.isdigit() for p in base.split(".")):
            raise ValueError(f"bad CUDA arch {a!r}; expected e.g. 9.0, 9.0a, 8.6")
    return archs


def arch_flags(archs: list[str]) -> list[str]:
    """nvcc -gencode flags: "9.0a" -> -gencode=arch=compute_90a,code=sm_90a."""
    flags = []
    for a in archs:
        suffix = a[-1] if a[-1] in "af" else ""
        num = a.rstrip("af").replace(".", "")
        flags.append(f"-gencode=arch=compute_{num}{suffix},code=sm_{num}{suffix}")
    return flags


def metadata(ext_name: str, archs: list[str]) -> dict:
    """metadata.json of a build variant."""
    return {
        "name": KERNEL_NAME,
        "id": ext_name,
        "version": KERNEL_VERSION,
        "license": LICENSE,
        "python-depends": [],
        "backend": {"type": "cuda", "archs": list(archs)},
    }


def ops_py(ext_name: str) -> str:
    """_ops.py of a build variant: the op namespace of this build."""
    return (
        "import torch\n"
        f"from . import {ext_name}  # noqa: F401  (loading the .so registers the ops)\n\n"
        f"ops = torch.ops.{ext_name}\n\n\n"
        "def add_op_namespace_prefix(op_name: str) -> str:\n"
        f'    return f"{ext_name}::{{op_name}}"\n'
    )


def detect_archs() -> list[str]:
    """Archs of the visible GPUs ("9.0a" for Hopper, whose kernels may use sm_90a features)."""
    env = os.environ.get("GGUF_KERNELS_ARCHS")
    if env:
        return parse_archs(env)
    import torch

    caps = sorted({torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())})
    if not caps:
        return ["9.0a"]
    return [f"{ma}.{mi}a" if (ma, mi) == (9, 0) else f"{ma}.{mi}" for ma, mi in caps]


def build(out_dir: Path | None = None, src_dir: Path | None = None, archs: list[str] | None = None,
          jobs: int | None = None, verbose: bool = False) -> Path:
    """Compile the kernels and write `out_dir/build/<variant>/`. Returns the variant folder."""
    import torch
    from setuptools import Distribution
    from torch.utils.cpp_extension import BuildExtension, CUDAExtension

    if torch.version.cuda is None:
        raise RuntimeError("this torch has no CUDA; the kernels need a CUDA build of torch")
    src_dir = Path(src_dir or default_source_dir()).resolve()
    out_dir = Path(out_dir or src_dir).resolve()
    archs = archs or detect_archs()
    nvcc = NVCC_FLAGS + arch_flags(archs)
    digest = source_hash(src_dir, extra=json.dumps([nvcc, CXX_FLAGS, archs, torch.__version__]))
    name = extension_name(digest)
    variant = variant_name(torch.__version__, torch.version.cuda, cxx11_abi=torch.compiled_with_cxx11_abi())
    variant_dir = out_dir / "build" / variant

    sources = [str(p) for p in source_files(src_dir) if p.suffix in (".cu", ".cpp")]
    ext = CUDAExtension(
        name=name,
        sources=sources,
        include_dirs=[str(src_dir / "csrc")],
        extra_compile_args={"cxx": CXX_FLAGS, "nvcc": nvcc},
        define_macros=[("Py_LIMITED_API", "0x03090000")],
        py_limited_api=True,
    )
    if jobs:
        os.environ["MAX_JOBS"] = str(jobs)
    with tempfile.TemporaryDirectory(prefix="gguf_kernels_build_") as tmp:
        dist = Distribution({"name": name, "ext_modules": [ext],
                             "cmdclass": {"build_ext": BuildExtension.with_options(use_ninja=True)}})
        dist.script_args = ["build_ext"]
        dist.parse_command_line()
        cmd = dist.get_command_obj("build_ext")
        cmd.build_lib = str(Path(tmp) / "lib")
        cmd.build_temp = str(Path(tmp) / "temp")
        cmd.inplace = False
        dist.verbose = verbose
        logger.info("building %s for %s (archs %s)", name, variant, ",".join(archs))
        dist.run_command("build_ext")
        built = list((Path(tmp) / "lib").rglob(f"{name}*.so"))
        if len(built) != 1:
            raise RuntimeError(f"expected one {name}*.so, found {built}")
        if variant_dir.exists():
            shutil.rmtree(variant_dir)
        variant_dir.mkdir(parents=True)
        shutil.copy2(built[0], variant_dir / built[0].name)
    for py in (src_dir / "torch-ext" / PYTHON_NAME).glob("*.py"):
        shutil.copy2(py, variant_dir / py.name)
    (variant_dir / "_ops.py").write_text(ops_py(name))
    (variant_dir / "metadata.json").write_text(json.dumps(metadata(name, archs), indent=2) + "\n")
    return variant_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gguf_quant.build_kernels", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="folder to hold build/<variant>/ (default: the source folder)")
    parser.add_argument("--src", type=Path, default=None, help="kernel sources (default: kernels-src/gguf_kernels)")
    parser.add_argument("--archs", default=None, help="CUDA archs, e.g. 9.0a,8.0 (default: the visible GPUs')")
    parser.add_argument("--jobs", type=int, default=None, help="parallel compile jobs (default: all cores)")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    path = build(args.out, args.src, parse_archs(args.archs) if args.archs else None, args.jobs, args.verbose)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
