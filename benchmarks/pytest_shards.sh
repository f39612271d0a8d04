#!/bin/bash
# The pytest ids listed in IDS (one a line: a test id or a file) run in SHARDS pytest processes side by side, dealt
# round-robin (neighbouring cases of one test, alike in cost, land in different shards), each cut off at LIMIT
# seconds. Their logs go to LOG one after another; printed: the failures and each shard's summary line. Exit 1 where a
# shard failed or was cut off.
#   bash benchmarks/pytest_shards.sh IDS SHARDS LIMIT LOG
# Why: one process ran 1203 of the GPU suite's 1391 tests in 400 s (session 90) on a 16-core machine with one GPU;
# much of a test's time is CPU work (gguf-py's dequantizers, the knob tests' child processes), which shards run side
# by side (session 94, H100: all 1396 ids in 4 shards in 297 s, the slowest shard 252 s).
set -o pipefail
ids=$1 n=${2:-1} limit=${3:-400} log=$4
[ -n "$log" ] || { echo "usage: $0 IDS SHARDS LIMIT LOG" >&2; exit 2; }
tmp=$(mktemp -d)
pids=()
for i in $(seq 0 $((n - 1))); do
  awk -v n="$n" -v i="$i" 'NF && (NR - 1) % n == i' "$ids" > "$tmp/ids.$i"
  [ -s "$tmp/ids.$i" ] || continue
  timeout "$limit" python3 -c 'import sys, pytest
ids = [line for line in open(sys.argv[1]).read().splitlines() if line]  # ids may hold spaces
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "--maxfail=20"] + ids))' "$tmp/ids.$i" > "$tmp/log.$i" 2>&1 &
  pids[i]=$!
done
rc=0
for i in "${!pids[@]}"; do
  wait "${pids[i]}"; r=$?
  [ "$r" = 124 ] && echo "shard $i: pytest cut off at $limit s (its log: how far it got)"
  [ "$r" != 0 ] && rc=1
done
cat "$tmp"/log.* > "$log"
grep -hE "^(FAILED|ERROR) " "$tmp"/log.* | head -40
for i in "${!pids[@]}"; do  # pytest's summary line (errors may follow it), else the log's last line
  s=$(grep -E " in [0-9.]+s" "$tmp/log.$i" | tail -1); [ -n "$s" ] || s=$(awk NF "$tmp/log.$i" | tail -1)
  echo "shard $i ($(wc -l < "$tmp/ids.$i") ids): $s"
done
rm -rf "$tmp"
exit $rc
