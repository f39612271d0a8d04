#!/bin/bash
# On the GPU machine, from the repository root: build the kernels, run the GPU tests,
# compute-sanitizer and the benchmark, with llama.cpp's matmuls timed beside ours.
#   bash benchmarks/device_run.sh [OUTDIR]
# Needs .whl/ and, for llama.cpp, .dev/llama.tgz carried (benchmarks/device_carry.sh fills both).
# NO_LLAMA=1 skips llama.cpp; QUICK=1 runs a short bench; REUSE_BUILD=1 keeps a build already in
# /tmp/kb (one made earlier in the same call); NO_TESTS=1 skips the GPU tests and the probe check (a
# table-only call on kernels whose suite already ran, e.g. under device_sanitize.sh); TEST_SLICE=FROM:TO runs only
# those tests of the GPU suite's collection (1-based, e.g. 1:700, then 701: in a second call); TEST_SHARDS=N runs
# them in N pytest processes side by side (benchmarks/pytest_shards.sh; session 94, H100: the whole suite, 1396 ids,
# in 297 s on 4). BENCH_ARGS: bench_matmul.py's
# case arguments for ours and llama.cpp's alike (default: the table of record's), e.g. "--no-moe --shapes 8192x1024".
# `bash benchmarks/device_run.sh --start-llama` only starts llama.cpp's build in the background and returns, so a
# call can time other things (device_ab.sh) during its ~400 s; a later device_run.sh in the same call, or on the
# same warm machine, waits for that build (/tmp/ll) instead of starting another.
set -o pipefail
LL=/tmp/ll/llama.cpp
if [ -f .dev/llama.tgz ] && [ -z "$NO_LLAMA" ] && [ ! -d /tmp/ll ]; then   # ggml only, same flags as llamacpp-on-device.sh
  setsid bash -c "mkdir -p /tmp/ll && tar xzf .dev/llama.tgz -C /tmp/ll && cd $LL && \
    cmake -B build -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DLLAMA_BUILD_TESTS=OFF \
      -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF -DGGML_NATIVE=OFF -DLLAMA_OPENSSL=OFF \
      > /tmp/ll/cmake.log 2>&1 && cmake --build build --target ggml -j 14 > /tmp/ll/build.log 2>&1; \
    echo \$? > /tmp/ll/build.rc" < /dev/null > /dev/null 2>&1 &
fi
[ "$1" = --start-llama ] && exit 0
OUTD=${1:-${OUT:-/tmp/gguf_out}}; mkdir -p "$OUTD"
MAX_JOBS=${MAX_JOBS:-6}   # llama.cpp builds beside ours
source benchmarks/device_setup.sh
if [ -n "$REUSE_BUILD" ] && [ -d /tmp/kb/build ]; then el "kernels: the build already in /tmp/kb (REUSE_BUILD)"
else build_kernels /tmp/kb || exit 1
fi
export GGUF_QUANT_KERNELS=/tmp/kb
if [ -z "$NO_TESTS" ]; then
  SUITE="tests/test_kernels.py tests/test_kernels_quantize_gpu.py tests/test_gpu_models.py"
  if [ -n "$TEST_SLICE$TEST_SHARDS" ]; then
    # TEST_SLICE=FROM:TO (1-based; TO empty: to the end): only those tests of the suite's collection, since the whole
    # suite outlasts the 400 s below after a build (session 90: 1203 of 1391 tests); shards take the ids one by one
    SL=${TEST_SLICE:-1:} TO=${SL#*:}
    python3 -m pytest --collect-only -q -p no:cacheprovider $SUITE 2>/dev/null | grep :: \
      | sed -n "${SL%%:*},${TO:-\$}p" > /tmp/test_ids.txt
    el "tests $SL: $(wc -l < /tmp/test_ids.txt) of the collection"
  else
    printf '%s\n' $SUITE > /tmp/test_ids.txt
  fi
  bash benchmarks/pytest_shards.sh /tmp/test_ids.txt "${TEST_SHARDS:-1}" 400 "$OUTD/test.log" | tail -45
  timeout 120 python3 kernels-src/gguf_kernels/tests/fast_gpu_check.py 2>&1 | tee "$OUTD/fast_check.log" | tail -3
  el "tests done"
fi
[ -z "$NO_SANITIZER" ] && timeout 150 compute-sanitizer --tool memcheck --print-limit 5 python3 benchmarks/sanitize_kernels.py 2>&1 | tail -4 | tee "$OUTD/sanitizer.log"
el "sanitizer done"
python3 benchmarks/bench_matmul.py ${QUICK:+--quick} $BENCH_ARGS --save-rows "$OUTD/rows.json" --out "$OUTD/bench.md" 2>&1 \
  | tee "$OUTD/bench.log" | grep -v "done (" | tail -3
el "our bench done"
if [ -z "$NO_PROBE" ]; then  # both M = 1 kernels side by side, and their agreement (benchmarks/gemv_probe.cu)
  nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I kernels-src/gguf_kernels/csrc benchmarks/gemv_probe.cu \
    -o /tmp/gemv_probe && for m in m1 check; do /tmp/gemv_probe $m; done > "$OUTD/probe.md" 2>&1
  grep -E "14336 M=1|FAIL" "$OUTD/probe.md" | tail -30; el "probe done"
fi
if [ -f .dev/llama.tgz ] && [ -z "$NO_LLAMA" ]; then
  python3 benchmarks/bench_matmul.py ${QUICK:+--quick} $BENCH_ARGS --emit-cases /tmp/cases.txt
  while [ ! -f /tmp/ll/build.rc ] && [ $(( $(date +%s) - T0 )) -lt ${LLAMA_WAIT:-400} ]; do sleep 5; done
  el "llama.cpp build rc: $(cat /tmp/ll/build.rc 2>/dev/null || echo timeout)"
  if [ "$(cat /tmp/ll/build.rc 2>/dev/null)" = 0 ] && g++ -O2 -std=c++17 benchmarks/llama_mm_bench.cpp -I$LL/ggml/include \
      -L$LL/build/bin -lggml -lggml-base -lggml-cuda -Wl,-rpath,$LL/build/bin -o /tmp/llmm; then
    timeout ${LLAMA_TIMEOUT:-150} /tmp/llmm /tmp/cases.txt "$OUTD/llama.json" > "$OUTD/llama.log" 2>&1; el "llama.cpp timed (rc $?)"
    python3 benchmarks/bench_matmul.py --load-rows "$OUTD/rows.json" --llama "$OUTD/llama.json" --llama-label "same run" --out "$OUTD/bench.md" > /dev/null
  else tail -5 /tmp/ll/build.log; fi
fi
cat "$OUTD/bench.md"
el "all done"
