"""Per-opcode instruction counts and stall samples from ncu's source page:

    ncu -i rep.ncu-rep --page source --csv --print-source sass > rep.csv
    python benchmarks/ncu_source_mix.py rep.csv [more.csv ...]

prints each file's warp instructions by opcode (share of all, share of the stall samples) and the
stall reasons over 2% of the samples (NOTES.md v20), then the SASS lines whose shared-memory accesses
take the most wavefronts beyond the conflict-free count (bank conflicts, NOTES.md session 39).

    python benchmarks/ncu_source_mix.py rep.csv --lines imc,no_inst

prints instead, per stall reason named, the SASS lines with the most of its samples and each line's
place counted in instructions from `griddepcontrol.wait` (ACQBULK), to tell the setup before a
launch's first loads from its loop (NOTES.md v63)."""
import collections
import csv
import re
import sys


def read_source(path: str) -> tuple[list[str], list[list[str]]]:
    """The source page's header row and the rows after it."""
    rows = list(csv.reader(open(path)))
    head = next(r for r in rows if "Source" in r)
    return head, rows[rows.index(head) + 1:]


def summarize(path: str, top: int = 16) -> None:
    head, body = read_source(path)
    i_src, i_ex = head.index("Source"), head.index("Instructions Executed")
    i_st = head.index("Warp Stall Sampling (All Samples)")
    reasons = [i for i, h in enumerate(head) if h.startswith("stall_") and "Not Issued" not in h]
    ops, stalls, why = collections.Counter(), collections.Counter(), collections.Counter()
    for r in body:
        if len(r) <= max(i_ex, i_st) or not r[i_ex].isdigit():
            continue
        op = re.sub(r"^@!?U?P\w+\s+", "", r[i_src].strip()).split(" ")[0].split(".")[0]
        ops[op] += int(r[i_ex])
        stalls[op] += int(r[i_st] or 0)
        for i in reasons:
            why[head[i][6:]] += int(r[i]) if r[i].isdigit() else 0
    n, s = sum(ops.values()), max(1, sum(stalls.values()))
    print(f"== {path}: {n} warp instructions, {s} stall samples")
    for op, c in ops.most_common(top):
        print(f"  {op:10s} {c:10d} {100 * c / n:5.1f}%   stalls {100 * stalls[op] / s:5.1f}%")
    w = max(1, sum(why.values()))
    print("  stalls: " + ", ".join(f"{k} {100 * v / w:.0f}%" for k, v in why.most_common() if v > 0.02 * w))
    excess = [i for i, h in enumerate(head) if "Shared Excessive" in h]
    if not excess:
        print("  (no shared-excessive column; shared columns: %s)" % [h for h in head if "Shared" in h])
        return
    i_x = excess[0]
    lines = [(int(r[i_x]), r[0], r[i_src].strip(), int(r[i_ex])) for r in body
             if len(r) > max(i_x, i_ex) and r[i_x].isdigit() and int(r[i_x]) > 0]
    total = sum(x for x, *_ in lines)
    print(f"  {head[i_x]}: {total} over {len(lines)} lines; the most:")
    for x, addr, src, ex in sorted(lines, reverse=True)[:top // 2]:
        print(f"    {x:9d} {100 * x / max(1, total):5.1f}%  {addr:>6s}  x{ex:<8d} {src}")


def stall_lines(path: str, reasons: list[str], top: int = 10) -> None:
    head, body = read_source(path)
    body = [r for r in body if len(r) == len(head)]
    i_src = head.index("Source")
    wait = next((n for n, r in enumerate(body) if "ACQBULK" in r[i_src]), None)
    for reason in reasons:
        cols = [i for i, h in enumerate(head) if h.startswith("stall_" + reason) and "Not Issued" not in h]
        if not cols:
            print(f"== {path}: no column stall_{reason}*; there are {[h for h in head if h.startswith('stall_')]}")
            continue
        hits = [(int(r[cols[0]]), n, r[0], r[i_src].strip()) for n, r in enumerate(body) if r[cols[0]].isdigit()]
        total = max(1, sum(h for h, *_ in hits))
        before = sum(h for h, n, *_ in hits if wait is not None and n < wait)
        print(f"== {path}: {head[cols[0]]} {total} samples, {100 * before / total:.0f}% before the wait "
              f"(line {wait}); the most:")
        for h, n, addr, src in sorted(hits, reverse=True)[:top]:
            at = "" if wait is None else f"{n - wait:+5d}"
            print(f"    {h:7d} {100 * h / total:5.1f}%  {addr:>6s} {at}  {src}")


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--lines" in args:
        i = args.index("--lines")
        reasons = args[i + 1].split(",")
        for p in args[:i] + args[i + 2:]:
            stall_lines(p, reasons)
    else:
        for p in args:
            summarize(p)
