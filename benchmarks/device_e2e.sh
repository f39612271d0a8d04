#!/bin/bash
# On the GPU machine, from the repository root: the end-to-end run behind the quantization and
# decode tables. Builds llama-quantize (CPU, from .dev/llama.tgz) in the background, our kernels,
# checks the CUDA quantizer against the torch one, writes a Llama-3-8B-shape F16 GGUF
# (.dev/gen_gguf.py, SmolLM2 vocabulary), quantizes it to Q8_0 and Q4_K_M with gguf-quant on the GPU
# and with llama-quantize (all CPU threads), compares the files byte for byte, then times decode.
# LLAMA_BENCH=1: instead of llama-quantize, llama.cpp's CUDA llama-bench; our Q4_K_M only, then decode
# timed once the build is done (a compiling CPU slows the host side of a decode step), with bench_decode.py's
# llama-bench row after ours. DECODE_ONLY=1: no llama.cpp build; our Q4_K_M and its decode only. PROFILE=1: the
# decode also splits a token's time by kind of kernel (bench_decode.py --profile). NO_TESTS=1: no GPU tests first.
# DECODE_TIMEOUT: seconds for the decode benchmark in the LLAMA_BENCH / DECODE_ONLY run (240). STACKING=both: the
# decode timed with q/k/v and gate/up each its own matmul, then stacked (bench_decode.py --stacking; default on).
# STOP_CHECK=both: each decode timed with generate's stop check every token, then a step late (--stop-check).
#   bash benchmarks/device_e2e.sh [OUTDIR]      (needs .whl/ and .dev/ carried: benchmarks/device_carry.sh)
set -o pipefail
OUTD=${1:-${OUT:-/tmp/gguf_out}}; mkdir -p "$OUTD"
source benchmarks/device_setup.sh
LL=/tmp/ll/llama.cpp
if [ -n "$LLAMA_BENCH" ]; then LLFLAGS="-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DGGML_NATIVE=OFF"; LLTARGET="llama-bench -j 14"
else LLFLAGS="-DGGML_CUDA=OFF -DGGML_NATIVE=ON"; LLTARGET="llama-quantize -j 10"; fi
[ -z "$DECODE_ONLY" ] && setsid bash -c "mkdir -p /tmp/ll && tar xzf .dev/llama.tgz -C /tmp/ll && cd $LL && \
  cmake -B build -G Ninja $LLFLAGS -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF > /tmp/ll/cmake.log 2>&1 && \
  cmake --build build --target $LLTARGET > /tmp/ll/build.log 2>&1; echo \$? > /tmp/ll/build.rc" \
  < /dev/null > /dev/null 2>&1 &
build_kernels /tmp/kb || exit 1
export GGUF_QUANT_KERNELS=/tmp/kb
# the full quantizer suite is long (its torch reference runs on CUDA too); the benchmark below
# compares every tensor of an 8B model with llama-quantize byte for byte anyway
if [ -z "$NO_TESTS" ]; then
  timeout 150 python3 -m pytest tests/test_gpu_models.py "tests/test_kernels_quantize_gpu.py::test_layouts_and_edges" \
    "tests/test_kernels_quantize_gpu.py::test_opcheck" -k "not Q2_K" -q -p no:cacheprovider 2>&1 | tail -4 | tee "$OUTD/gpu_tests.log"
  el "CUDA quantizer and whole-model GPU tests done"
fi
mkdir -p /tmp/m
python3 .dev/gen_gguf.py tests/data/vocab.gguf /tmp/m/l8b-f16.gguf llama > "$OUTD/gen.log" 2>&1 || { tail -5 "$OUTD/gen.log"; exit 1; }
el "8B-shape F16 written: $(du -h /tmp/m/l8b-f16.gguf | cut -f1)"
if [ -n "$LLAMA_BENCH$DECODE_ONLY" ]; then
  python3 benchmarks/bench_quantize.py /tmp/m/l8b-f16.gguf --mix Q4_K_M --out /tmp/m 2>&1 | tee "$OUTD/quantize_Q4_K_M.md" | tail -4
  el "Q4_K_M done"
  if [ -z "$DECODE_ONLY" ]; then
    while [ ! -f /tmp/ll/build.rc ] && [ $(( $(date +%s) - T0 )) -lt ${LLAMA_WAIT:-420} ]; do sleep 3; done
    el "llama-bench build rc: $(cat /tmp/ll/build.rc 2>/dev/null || echo timeout)"
    LB=$LL/build/bin/llama-bench; [ -x "$LB" ] && LBARG="--llama-bench $LB" || tail -5 /tmp/ll/build.log
  fi
  timeout ${DECODE_TIMEOUT:-240} python3 -u benchmarks/bench_decode.py /tmp/m/ours-Q4_K_M.gguf --new-tokens 64 $LBARG ${PROFILE:+--profile} ${STACKING:+--stacking $STACKING} ${STOP_CHECK:+--stop-check $STOP_CHECK} \
    2>&1 | grep -v Warning > "$OUTD/decode.md"; tail -40 "$OUTD/decode.md"
  el "all done"; exit 0
fi
while [ ! -f /tmp/ll/build.rc ] && [ $(( $(date +%s) - T0 )) -lt 300 ]; do sleep 3; done
el "llama-quantize build rc: $(cat /tmp/ll/build.rc 2>/dev/null || echo timeout)"
LQ=$LL/build/bin/llama-quantize; [ -x "$LQ" ] && LQARG="--llama-quantize $LQ --threads $(nproc)" || tail -5 /tmp/ll/build.log
for MIX in ${MIXES:-Q4_K_M Q8_0}; do
  [ $(( $(date +%s) - T0 )) -gt ${QUANT_BEFORE:-430} ] && { el "no time left for $MIX"; break; }
  python3 benchmarks/bench_quantize.py /tmp/m/l8b-f16.gguf --mix $MIX --out /tmp/m $LQARG 2>&1 | tee "$OUTD/quantize_$MIX.md" | tail -8
  el "$MIX done"
done
if [ $(( $(date +%s) - T0 )) -lt ${DECODE_BEFORE:-440} ]; then
  timeout 150 python3 -u benchmarks/bench_decode.py /tmp/m/ours-Q4_K_M.gguf --new-tokens 64 ${PROFILE:+--profile} ${STACKING:+--stacking $STACKING} ${STOP_CHECK:+--stop-check $STOP_CHECK} 2>&1 \
    | grep -v Warning > "$OUTD/decode.md"; tail -40 "$OUTD/decode.md"
  el "decode done"
fi
el "all done"
