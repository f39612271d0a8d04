#!/bin/bash
# Here, from the repository root: HEAD's tree copied to .dev/NAME with pending patches applied in order
# (kernels-src/gguf_kernels/pending/PATCH.patch), for a device call's A tree (device_ab.sh run from inside it) or its
# BASE2 (NAME/kernels-src/gguf_kernels). .dev travels with the call (carry it), but each call copies the tree afresh,
# so the call itself links the copy's .whl and .dev back to the checkout's before running there (session 75's second
# call stopped in a second without them):
#   bash benchmarks/pending_tree.sh v116repo v116 && bash benchmarks/pending_tree.sh v116v117v115repo v116 v117 v115
#   (device) R=$PWD; cd .dev/v116v117v115repo && ln -sfn $R/.whl .whl && ln -sfn $R/.dev .dev && \
#            BASE2=$R/.dev/v116repo/kernels-src/gguf_kernels bash benchmarks/device_ab.sh ...
set -e
name=$1; shift
[ -n "$name" ] || { echo "usage: $0 NAME PATCH..." >&2; exit 2; }
out=.dev/$name
rm -rf "$out" && mkdir -p "$out"
git archive HEAD | tar x -C "$out"
for p in "$@"; do  # patch(1), not git apply: inside this checkout's ignored .dev, git apply skips every path silently
  f=$PWD/kernels-src/gguf_kernels/pending/$p.patch
  (cd "$out" && patch -p1 -s -N --dry-run < "$f" && patch -p1 -s -N < "$f") || { echo "$f does not apply in $out" >&2; exit 1; }
  echo "$out: $p applied"
done
