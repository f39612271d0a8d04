#!/bin/bash
# On the GPU machine, from the repository root: what a kernel waits on, per case, in one call. Builds this
# tree's kernels, then for each case runs benchmarks/profile_case.py under ncu (the one profiled launch,
# kernels matching REGEX) and prints its launch figures (grid, registers, occupancy, cycles a warp waits
# per issued instruction, shared-memory wavefronts and bank conflicts) and benchmarks/ncu_source_mix.py's
# instruction mix, stall reasons and the SASS lines with the most excess shared wavefronts.
#   bash benchmarks/device_ncu.sh REGEX CASE [CASE ...]      (needs .whl/ carried)
#   e.g. bash benchmarks/device_ncu.sh gemv_stream moe:Q4_K:768:2048:128:8:1:pair moe:MXFP4:2880:2880:32:4:1
# CASE as profile_case.py takes it (dense:TYPE:K:N:M, moe:TYPE:K:N:E:top_k:T[:pair]). NCU_ENVS="A|B|..." runs
# every case once under each setting, a setting being "VAR=v ..." or empty (a knob's values side by side,
# one build), e.g. NCU_ENVS="|GGUF_KERNELS_FAST_BAR=0". Reports stay in /tmp/ncu (too many files for $OUT).
# REUSE_BUILD=1 keeps a build already in /tmp/ka (an earlier command of the same call, e.g. device_ab.sh's A).
set -o pipefail
[ $# -ge 2 ] || { sed -n 2,9p "$0"; exit 2; }
source benchmarks/device_setup.sh
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
[ -n "$REUSE_BUILD" ] && [ -d /tmp/ka/build ] || build_kernels /tmp/ka || exit 1
export GGUF_QUANT_KERNELS=/tmp/ka
REGEX=$1; shift
mkdir -p /tmp/ncu
# shared-memory wavefronts and the bank-conflicted part of them, loads and stores apart (the records' stores,
# NOTES.md session 38)
SMEM_METRICS=l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum
SMEM_METRICS=$SMEM_METRICS,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum
IFS='|' read -r -a SETTINGS <<< "${NCU_ENVS:-}"
[ ${#SETTINGS[@]} -gt 0 ] || SETTINGS=("")
for e in "${SETTINGS[@]}"; do
  for c in "$@"; do
    rep=/tmp/ncu/${c//[^A-Za-z0-9_]/_}${e//[^A-Za-z0-9_]/_}
    echo "## $c ${e}"
    env ${e} "$NCU" --profile-from-start off -k "regex:$REGEX" --section LaunchStats --section Occupancy \
      --section WarpStateStats --section SourceCounters --metrics "$SMEM_METRICS" -f -o "$rep" python3 benchmarks/profile_case.py "$c" \
      > "$rep.log" 2>&1 || { tail -8 "$rep.log"; continue; }
    "$NCU" -i "$rep.ncu-rep" --page details | grep -E "^  [a-z_:]+|Duration|Grid Size|Block Size|Registers Per|Waves Per SM|Theoretical Occupancy|Achieved Occupancy|Warp Cycles Per Issued|Dynamic Shared|_shared_op_"
    "$NCU" -i "$rep.ncu-rep" --page source --csv --print-source sass > "$rep.csv" && python3 benchmarks/ncu_source_mix.py "$rep.csv"
  done
done
el "ncu done"
