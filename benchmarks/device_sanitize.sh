#!/bin/bash
# On the GPU machine, from the repository root: the whole GPU correctness suite under
# compute-sanitizer memcheck (benchmarks/sanitize_suite.py's shards), about 5 minutes with the build
# (session 33: 8 shards of 40-test processes, 289 s); give it the machine to itself (sessions 29-30:
# shards beside other work ran the GPU out of memory).
#   bash benchmarks/device_sanitize.sh [sanitize_suite args]      (needs .whl/ carried)
set -o pipefail
source benchmarks/device_setup.sh
build_kernels /tmp/kb || exit 1
export GGUF_QUANT_KERNELS=/tmp/kb
python3 benchmarks/sanitize_suite.py "$@"
rc=$?; el "sanitize suite rc $rc"; exit $rc
