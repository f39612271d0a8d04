"""Issue 3's targets over a bench_matmul.py table with llama.cpp's column from the same run (device_run.sh's
bench.md), no GPU:

    python benchmarks/count_targets.py benchmarks/results/matmul_h100.md

Targets (issue 3): dense M = 1 weight bandwidth >= 1.5x llama.cpp's, or >= 80% of the card's copy rate (the
table's header line "device copy N GB/s") where that is lower; M = 8 >= 2x; M = 512 >= 1.5x; MoE >= 1.5x at
T = 1, 8, 32, 512. Prints the misses and the count met; rows without llama.cpp's time are not target rows.

For each miss it also prints the time that meets its target (M = 1: the later of the ratio's and the floor's) and the
time the row's weight bytes (GB/s x us) take at the copy rate alone: where the headroom between them is under a
launch's fixed part (2.2-3 us, NOTES.md session 55), no kernel reaches the target on that card. MoE rows count the
experts hit from session 79's tables on (earlier ones: min(E, T * top_k), which overstates their bytes).
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

RATIO = {("dense", 1): 1.5, ("dense", 8): 2.0, ("dense", 512): 1.5,
         ("moe", 1): 1.5, ("moe", 8): 1.5, ("moe", 32): 1.5, ("moe", 512): 1.5}


def rows(text: str):
    """(kind, type, shape, M, ours us, weight GB/s, llama.cpp us, llama / ours) of each table row with llama.cpp's
    time. The ratio is the table's own column, from unrounded times: the us columns' one decimal can move a row
    across its bar (session 94: Q4_K 4096 -> 1024 M = 1, 4.5 / 3.0 = 1.50 against the column's 1.48)."""
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 9 or cells[0] not in ("dense", "moe") or not cells[7]:
            continue
        ours, llama = float(cells[4]), float(cells[7])
        ratio = float(cells[8].rstrip("x")) if cells[8] else llama / ours
        yield cells[0], cells[1], cells[2], int(cells[3]), ours, float(cells[5]), llama, ratio


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("table", type=Path)
    ap.add_argument("--copy", type=float, help="the card's copy rate, GB/s, in place of the header's (tables before "
                    "session 73 timed a memcpy node: the H200's read 2706 against ANCHORS.md's 4300)")
    args = ap.parse_args(argv)
    text = args.table.read_text()
    m = re.search(r"device copy (\d+) GB/s", text)
    if m is None and args.copy is None:
        sys.exit(f"{args.table}: no 'device copy N GB/s' in its header (device_run.sh's bench.md has one); give --copy")
    copy = args.copy if args.copy is not None else float(m.group(1))
    floor = 0.8 * copy
    met = total = 0
    print("| kind | type | K -> N | M | llama / ours | target | met | target us | bytes at copy rate us |\n"
          "| --- | --- | --- | ---: | ---: | --- | --- | ---: | ---: |")
    for kind, name, shape, M, ours, gbs, llama, ratio in rows(text):
        need = RATIO.get((kind, M))
        if need is None:
            continue
        total += 1
        m1 = kind == "dense" and M == 1
        ok = ratio >= need or (m1 and gbs >= floor)
        met += ok
        if not ok:
            kb = gbs * ours  # the row's weight bytes, kB (GB/s x us)
            # the time that meets it: M = 1 takes the later of the ratio's and the floor's
            target_us = max(llama / need, kb / floor) if m1 else llama / need
            print(f"| {kind} | {name} | {shape} | {M} | {ratio:.2f}x | {need}x"
                  f"{f' or {floor:.0f} GB/s' if m1 else ''} | no ({gbs:.0f} GB/s) | {target_us:.1f} | "
                  f"{kb / copy:.1f} |")
    print(f"\n{met} of {total} target rows met (M = 1 floor: 80% of {copy:.0f} GB/s = {floor:.0f} GB/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
