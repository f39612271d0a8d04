#!/bin/bash
# On the GPU machine, from the repository root: this tree's kernels (A) against another kernel tree (B,
# default .dev/base: main's, unpacked by device_carry.sh) in one call. Both are built side by side,
# then bench_matmul.py runs with the given arguments A, B, A, B, so drift shows as A-A' spread.
#   bash benchmarks/device_ab.sh [bench_matmul args]      e.g. --moe-only --types MXFP4 --ms 1
# BASE=DIR picks B's tree; BASE2=DIR adds a third tree (C, run A, B, C, A, B, C), e.g. another value of
# a compile-time constant; AB_ENV="VAR=value ..." adds rows of each tree with each setting (a knob's other
# values, e.g. GGUF_KERNELS_PDL=0: whether a difference between the trees lives in the dependent launch);
# AB_ARGS2="--moe-only --ms 1,8" then times a second set of bench_matmul args the same way, on the same builds
# (labels mA1, mB1, ...), with the settings AB_ENV2 where given; AB_TESTS="tests/x.py::test_a ..." (AB_K: a -k
# expression for them) runs those tests on A's build (failures with their reasons to $OUT/tests.txt) and again
# under memcheck in AB_SHARDS processes (default 4: 8 ran the GPU out of memory on 201 tests in session 76; its table
# to $OUT/sanitize.md; printed: its first line and the "all" row), before the
# timing: a call that runs out of time keeps its verdict (AB_MEMCHECK=0 leaves memcheck to a later call). The rows
# of every run go to $OUT/ab.txt (and ab2.txt), one "## LABEL" section a run (us to 2 decimals); each run's own
# table and log, and the memcheck shards', stay in /tmp/ab_logs, since the device tool brings back only ~8 files
# (session 39 lost a tree's tables to the logs). BASE=kernels-src/gguf_kernels (this tree twice) sweeps knobs: two
# rows a setting; BASE=none builds and times this tree alone (a knob sweep at half the runs: one row a setting, the
# default AB_ROUNDS times, default 2, for its spread). A_BUILD=DIR / B_BUILD=DIR take A's / B's build from DIR (one made
# earlier on the same machine, e.g. an earlier call's B: main's build) instead of building that tree again.
set -o pipefail
OUTD=${OUT:-/tmp/gguf_out}; LOGD=/tmp/ab_logs; mkdir -p "$OUTD" "$LOGD"
source benchmarks/device_setup.sh
BASE=${BASE:-.dev/base/kernels-src/gguf_kernels}
# each build's own status (a build left in /tmp/ka or /tmp/kb by an earlier call must not pass for it)
TREES="a"; [ "$BASE" != none ] && TREES="a b${BASE2:+ c}"
J=$([ -n "$BASE2" ] && echo 5 || { [ "$BASE" = none ] && echo 16 || echo 8; })
KA=${A_BUILD:-/tmp/ka} KB=${B_BUILD:-/tmp/kb}
if [ -n "$A_BUILD" ]; then el "A: the build in $A_BUILD"; true & pa=$!; else build_kernels /tmp/ka "" $J & pa=$!; fi
if [ -n "$B_BUILD" ]; then el "B: the build in $B_BUILD"; true & pb=$!
elif [ "$BASE" != none ]; then build_kernels /tmp/kb "$BASE" $J & pb=$!; fi
[ -n "$BASE2" ] && { build_kernels /tmp/kc "$BASE2" $J & pc=$!; }
wait $pa && { [ "$BASE" = none ] || wait $pb; } && { [ -z "$BASE2" ] || wait $pc; } || exit 1
run() {  # run LABEL KERNELS [ENV...]
  local label=$1 kdir=$2; shift 2
  env "$@" GGUF_QUANT_KERNELS=$kdir python3 benchmarks/bench_matmul.py "${ARGS[@]}" --us-digits 2 --out "$LOGD/$label.md" \
    > "$LOGD/$label.log" 2>&1 || tail -5 "$LOGD/$label.log"
  echo "## $label ($kdir $*)"; grep "^| [a-z]" "$LOGD/$label.md"
}
kdir() { case $1 in a) echo "$KA" ;; b) echo "$KB" ;; *) echo "/tmp/k$1" ;; esac; }
rounds() {  # rounds PREFIX SETTINGS: the trees A B [C] AB_ROUNDS times, then each setting once on every tree
  for i in $(seq "${AB_ROUNDS:-2}"); do for t in $TREES; do run "$1${t^^}$i" "$(kdir $t)"; done; done
  for e in $2; do
    for t in $TREES; do run "$1${t^^}-${e//[^A-Za-z0-9_]/_}" "$(kdir $t)" "$e"; done
  done
}
ARGS=("$@")
if [ -n "$AB_TESTS" ]; then
  K=(); [ -n "$AB_K" ] && K=(-k "$AB_K")
  # the failures' reasons to $OUT/tests.txt: the timing's tables push the console's lines out of the tail the
  # device tool returns (session 72 got the failing tests' names from memcheck's table, not why), and pytest cuts
  # a summary line's reason at the terminal's width (session 73's long test ids kept none: COLUMNS), so the
  # tracebacks' "E" lines go there too (the first 150)
  COLUMNS=400 GGUF_QUANT_KERNELS=$KA timeout 300 python3 -m pytest $AB_TESTS "${K[@]}" -q -rfE \
    -p no:cacheprovider > "$LOGD/tests.log" 2>&1
  rc=$?  # 124: cut off at 300 s, which leaves no summary line (session 88: the whole file's 231 tests, an empty tests.txt)
  { [ $rc = 124 ] && echo "ERROR pytest cut off at 300 s: no verdict (pass fewer tests, AB_K)"
    grep -E "^(FAILED|ERROR) |[0-9]+ (passed|failed)" "$LOGD/tests.log"; grep -E "^E  " "$LOGD/tests.log" | head -150; } \
    > "$OUTD/tests.txt"
  grep -E "^(FAILED|ERROR) |[0-9]+ (passed|failed)" "$OUTD/tests.txt" | tail -8
  el "tests done"
  if [ "${AB_MEMCHECK:-1}" != 0 ]; then
    GGUF_QUANT_KERNELS=$KA python3 benchmarks/sanitize_suite.py --shards ${AB_SHARDS:-4} --timeout 300 --logs $LOGD/sanitize \
      -- $AB_TESTS "${K[@]}" 2>&1 | tee "$OUTD/sanitize.md" | grep -E "^\| (all|again) |^[a-z]+: " || tail -5 "$OUTD/sanitize.md"
    el "memcheck done"
  fi
fi
rounds "" "$AB_ENV" | tee "$OUTD/ab.txt"
if [ -n "$AB_ARGS2" ]; then
  read -r -a ARGS <<< "$AB_ARGS2"
  rounds m "${AB_ENV2-$AB_ENV}" | tee "$OUTD/ab2.txt"
fi
el "timing done"
