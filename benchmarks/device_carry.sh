#!/bin/bash
# Here, on a machine with PyPI, from the repository root: fill the ignored folders that the device
# scripts need carried (the device tool's `carry`: [".whl", ".dev"]); a fresh checkout has neither.
#   [REFS="branch ..."] bash benchmarks/device_carry.sh [SHARED_TOOLS]      (default ../shared/tools)
# .whl/             gguf, kernels and transformers wheels (the GPU machine has torch, not these)
# .dev/llama.tgz    llama.cpp from the llama-cpp-python sdist (SHARED_TOOLS/llamacpp-on-device.sh pack)
# .dev/gen_gguf.py  the random-weight GGUF writer behind device_e2e.sh
# .dev/base/        main's kernel sources, the B side of device_ab.sh
# .dev/REF/         each of REFS' kernel sources ('/' as '_'), for device_ab.sh's BASE or BASE2
# .dev/ggml/        libggml-base from the llama-cpp-python wheel the tests build (pip's cache: ~8 min the
#                   first time), for test_kernel_matches_ggml on the GPU machine (GGUF_QUANT_GGML_LIB)
set -e
TOOLS=${1:-../shared/tools}
mkdir -p .whl .dev
python3 -m pip download -q --no-deps --only-binary=:all: -d .whl gguf==0.19.0 kernels==0.17.2 transformers==5.24.0
[ -f .dev/llama.tgz ] || bash "$TOOLS/llamacpp-on-device.sh" pack .dev
cp "$TOOLS/gen_gguf.py" .dev/gen_gguf.py
if [ ! -f .dev/ggml/libggml-base.so ]; then
  W=$(mktemp -d) && python3 -m pip wheel -q --no-deps -w "$W" llama-cpp-python==0.3.36 \
    && mkdir -p .dev/ggml && unzip -q -j -o "$W"/llama_cpp_python-*.whl 'llama_cpp/lib/libggml-base.so' -d .dev/ggml
  rm -rf "$W"
fi
for r in main ${REFS}; do
  d=.dev/$([ "$r" = main ] && echo base || echo "${r//\//_}")
  rm -rf "$d" && mkdir -p "$d" && git archive "$r" kernels-src/gguf_kernels | tar -x -C "$d"
done
du -sh .whl .dev
