"""The GPU correctness suite under compute-sanitizer memcheck, in parallel shards (on the GPU machine).

    python benchmarks/sanitize_suite.py [--shards 8] [--chunk 40] [--timeout 450] [tests/test_kernels.py ...]
    python benchmarks/sanitize_suite.py --shards 8 -- tests/test_kernels.py -k MXFP4     (pytest's -k)
    python benchmarks/sanitize_suite.py --tool racecheck --kernels gemv_stream_kernel \
        tests/test_kernels.py::test_matmul_stream_ksplit

Collects the suite's test ids, deals them round-robin over `--shards` shards, runs each shard as
`compute-sanitizer --tool memcheck python -m pytest <ids>` processes of `--chunk` tests, one after
another, with torch's caching allocator off, and
prints one row per shard: the tests it passed, failed and skipped, memcheck's error count and how many
of the errors it printed were out-of-memory returns of a CUDA API call (concurrent shards have run the
H200 out of memory: sessions 29 and 30). The tests marked `cuda_graph` capture CUDA graphs, which cannot
allocate without the cache (cudaMalloc is not permitted while a stream captures): they run as one more
shard with the cache on. A shard cut off by `--timeout` says so, and its row counts the tests that
finished. The tests of a finished shard that failed where its only memcheck errors were such returns run again,
alone, in one more shard (`--rerun-timeout`), a row of their own. Exit status 0 only when every shard finished
with no failure, or with failures that all passed again alone, and every memcheck error was printed and was such a
return (none is an invalid access). `--tool` runs another compute-sanitizer tool
the same way (racecheck: shared-memory hazards; synccheck: barrier misuse; initcheck), its errors counted
in the same columns; racecheck and synccheck track `--num-cuda-barriers` mbarriers a CTA (session 36: the
default overflowed on the stream kernel's, and synccheck aborted every process), and `--kernels` limits the
tool to the kernels whose names hold that string (session 36: racecheck on every kernel, torch's included,
did not finish one K-split test in 90 s).
"""
import argparse
import collections
import os
import re
import subprocess
import sys
import threading
import time

DEFAULT_FILES = ["tests/test_kernels.py", "tests/test_kernels_quantize_gpu.py"]


def collect(files: list[str]) -> list[str]:
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
                       capture_output=True, text=True)
    if r.returncode not in (0, 5):  # 5: nothing collected
        sys.exit(f"collecting {' '.join(files)} failed (pytest exit {r.returncode}):\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    return [line for line in r.stdout.splitlines() if "::" in line]


# the first line of each error a tool prints (the lines under it are indented further; racecheck's hazards
# start "Error: Race reported"); the tool's own warnings (session 36: "Warning: Detected overflow of tracked
# cuda::barrier structures", before synccheck aborted the process) and a process it saw die
HEAD = (r"========= ((?:Invalid|Program hit|Out-of-range|Misaligned|Malloc|Leaked|Barrier|Race|Error: Race|"
        r"Uninitialized|Unspecified|Internal Sanitizer Error|Warning|Error: process didn't terminate)\b[^\n]*)")
# one summary a process the tool followed: memcheck, synccheck and initcheck print ERROR SUMMARY, racecheck
# RACECHECK SUMMARY with its hazards' errors and warnings (its warnings are not counted as errors)
SUMMARY = r"(?:ERROR SUMMARY: (\d+) errors?|RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) errors?)"
# an API call's out-of-memory return, or memcheck itself short of memory to follow a launch (session 33:
# twelve shards, 217 of one shard's 265 errors)
OOM = ("cudaErrorMemoryAllocation", "Unable to allocate enough memory")


def summary(log: str) -> dict:
    """Counts from a shard's log, summed over its chunks (run_shard); `silent`: chunks with no error
    summary from memcheck (a process that did not end as memcheck's target)."""
    parts = [summary_part(p) for p in re.split(r"^### chunk \d+\n", log, flags=re.M)[1:]] or [summary_part(log)]
    out = {k: sum(p[k] for p in parts) for k in parts[0]}
    out["silent"] = sum(p["memcheck_reports"] == 0 for p in parts)
    return out


def summary_part(log: str) -> dict:
    """Counts from one process's log: pytest's last line (or, cut off, its progress characters) and
    memcheck's error summaries (one a process it followed)."""
    errors = [int(m.group(1) or m.group(2)) for m in re.finditer(SUMMARY, log)]
    heads = re.findall(HEAD, log)
    oom = sum(any(o in h for o in OOM) for h in heads)
    out = {"memcheck_errors": sum(errors), "memcheck_reports": len(errors), "printed": len(heads), "oom": oom}
    last = re.findall(r"^(\d+ (?:passed|failed|skipped|error).*) in [\d.]+s", log, re.M)
    if last:
        counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|errors?)", last[-1])}
        out.update(passed=counts.get("passed", 0), skipped=counts.get("skipped", 0),
                   failed=counts.get("failed", 0) + counts.get("error", 0) + counts.get("errors", 0))
    else:
        # a line of progress characters, or the start of one that memcheck's report continues
        progress = "".join(re.findall(r"^([.sFE]+)(?:\s+\[\s*\d+%\])?(?:$|=========)", log, re.M))
        out.update(passed=progress.count("."), skipped=progress.count("s"),
                   failed=progress.count("F") + progress.count("E"))
    return out


def digest(log: str) -> list[str]:
    """What went wrong in a shard, a line each: memcheck's errors other than out-of-memory returns (the
    first line, and the function of an invalid access; addresses masked, so that shards' lines
    compare), the tool's warnings, then the tests pytest reports failed."""
    lines = []
    for m in re.finditer(HEAD + r"(?:\n=========\s+at ([^\n]*))?", log):
        if not any(o in m.group(1) for o in OOM):
            lines.append(re.sub(r"0x[0-9a-f]+", "0x.", m.group(1) + (f" at {m.group(2)}" if m.group(2) else "")))
    # a process that died without pytest's summary (session 36: synccheck aborted it) says so
    return lines + re.findall(r"^Fatal Python error: .*", log, re.M) + [f"FAILED {t}" for t in failed_tests(log)]


def failed_tests(log: str) -> list[str]:
    """The test ids pytest's summary lines in a log say failed, in order."""
    return re.findall(r"^FAILED (\S+)", log, re.M)


def oom_failures(log: str) -> list[str]:
    """The tests a shard's log says failed where every memcheck error in it was an API call's out-of-memory return
    (concurrent shards short of GPU memory, not an invalid access: session 86's 4 shards of 442 tests failed 17 so,
    which passed under memcheck in one shard): the ones to run again alone. None where any other error was printed,
    an error went unprinted, or a chunk ended without memcheck's summary."""
    s = summary(log)
    if s["silent"] or not (s["memcheck_errors"] == s["oom"] == s["printed"]):
        return []
    return list(dict.fromkeys(failed_tests(log)))


def deal(ids: list[str], graphs: set[str], n: int) -> list[list[str]]:
    """The tests other than `graphs` round-robin over n shards (none left empty), then `graphs` as one."""
    rest = [t for t in ids if t not in graphs]
    shards = [rest[i::n] for i in range(n) if rest[i::n]]
    return shards + ([[t for t in ids if t in graphs]] if graphs & set(ids) else [])


def clean(s: dict) -> bool:
    """A finished shard's verdict: no test failed, and every memcheck error was printed and was an API
    call's out-of-memory return."""
    return s["failed"] == 0 and s["memcheck_errors"] == s["oom"] == s["printed"]


def watch_memory(stop: threading.Event, peak: list[int]) -> None:
    """The GPU's memory in use (MiB, nvidia-smi) every 5 s until `stop`: peak[0] the most, peak[1] the total,
    so that a run's out-of-memory errors can be told from a starved memcheck."""
    while not stop.wait(5.0):
        r = subprocess.run(["nvidia-smi", "--query-gpu=memory.used,memory.total", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True)
        if r.returncode == 0 and r.stdout.strip():
            used, total = (int(v) for v in r.stdout.split("\n")[0].split(","))
            peak[:] = [max(peak[0], used), total]


def run_shard(shard: list[str], chunk: int, env: dict, deadline: float, log_path: str,
              tool_args: tuple[str, ...] = ("--tool", "memcheck")) -> bool:
    """A shard's tests under the tool, `chunk` a process one after another, into one log (a line
    `### chunk j` before each); False when `deadline` cut one off. Short processes, because memcheck's
    memory on the GPU grew with each process's life (session 33: eight whole-shard processes filled the
    H200's 140 GiB, failing 42 tests with no invalid access)."""
    with open(log_path, "w") as log:
        for j in range(0, len(shard), chunk):
            log.write(f"### chunk {j // chunk}\n")
            log.flush()
            cmd = ["compute-sanitizer", *tool_args, "--print-limit", "1000", sys.executable, "-m",
                   "pytest", "-q", "-p", "no:cacheprovider", *shard[j:j + chunk]]
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
            try:
                proc.wait(timeout=max(1.0, deadline - time.time()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()
                return False
    return True


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="*", default=DEFAULT_FILES)
    # 8 shards of 40-test processes: the whole suite in 203 s, 104 of the H200's 140 GiB at peak
    # (session 33, benchmarks/results/sanitize_h200.md); whole-shard processes ran it out of memory
    p.add_argument("--shards", type=int, default=8)
    p.add_argument("--timeout", type=float, default=450.0, help="seconds for every shard")
    p.add_argument("--chunk", type=int, default=40, help="tests a memcheck process")
    p.add_argument("--logs", default=os.environ.get("OUT", "/tmp") + "/sanitize_suite")
    p.add_argument("--tool", default="memcheck", choices=["memcheck", "racecheck", "synccheck", "initcheck"])
    p.add_argument("--kernels", help="only the kernels whose names hold this string (--kernel-name kns=)")
    p.add_argument("--num-cuda-barriers", type=int, default=128,
                   help="mbarriers a CTA that racecheck and synccheck track")
    p.add_argument("--rerun-timeout", type=float, default=300.0,
                   help="seconds for running again, in one shard, the tests that failed only on out-of-memory returns")
    args = p.parse_args()
    tool_args = ("--tool", args.tool)
    if args.tool in ("racecheck", "synccheck"):
        tool_args += ("--num-cuda-barriers", str(args.num_cuda_barriers))
    if args.kernels:
        tool_args += ("--kernel-name", f"kns={args.kernels}")
    ids = collect(args.files)
    graphs = set(collect([*args.files, "-m", "cuda_graph"]))
    os.makedirs(args.logs, exist_ok=True)
    shards = deal(ids, graphs, args.shards)
    t0 = time.time()
    stop, peak = threading.Event(), [0, 0]
    threading.Thread(target=watch_memory, args=(stop, peak), daemon=True).start()
    # torch's caching allocator off: memcheck then sees every tensor as its own cudaMalloc, so a read past
    # one is caught even where the cache would have put another tensor behind it (session 32: an MXFP4
    # matrix of 561,000 bytes read to byte 561,008), and the shards no longer each keep their peak
    # (session 30: 4 and 5 shards each held 31-34 GB until the H200 ran out of memory, failing 47-66
    # tests with no invalid access in any log). The graph shard keeps it (session 32: without it, each
    # capture failed, and every later test of its process with it).
    plain = dict(os.environ, PYTORCH_NO_CUDA_MEMORY_CACHING="1")
    cached = {k: v for k, v in os.environ.items() if k != "PYTORCH_NO_CUDA_MEMORY_CACHING"}
    deadline = t0 + args.timeout
    finished = [False] * len(shards)

    def run(i: int, shard: list[str]) -> None:
        env = cached if shard[0] in graphs else plain
        log_path = os.path.join(args.logs, f"shard{i}.log")
        finished[i] = run_shard(shard, args.chunk, env, deadline, log_path, tool_args)

    threads = [threading.Thread(target=run, args=(i, shard)) for i, shard in enumerate(shards)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    timed_out = [i for i, f in enumerate(finished) if not f]
    logs = [open(os.path.join(args.logs, f"shard{i}.log")).read() for i in range(len(shards))]
    # the tests that failed only because the shards together ran the GPU out of memory, again in one shard
    again = {i: oom_failures(logs[i]) for i in range(len(shards)) if i not in timed_out}
    again = {i: failed for i, failed in again.items() if failed}
    rerun_ids = [t for failed in again.values() for t in failed]
    rerun_log, rerun_done = "", True
    if rerun_ids:
        path = os.path.join(args.logs, "rerun.log")
        env = cached if graphs & set(rerun_ids) else plain  # a capture needs the cache (the graph shard's reason)
        rerun_done = run_shard(rerun_ids, args.chunk, env, time.time() + args.rerun_timeout, path, tool_args)
        rerun_log = open(path).read()
    stop.set()
    print(f"{args.tool}: {len(ids)} tests of {' '.join(args.files)} in {len(shards)} shards "
          f"({len(graphs)} capturing CUDA graphs, "
          f"the caching allocator on: the last), {time.time() - t0:.0f} s; GPU memory in use at most "
          f"{peak[0] / 1024:.1f} of {peak[1] / 1024:.1f} GiB (nvidia-smi every 5 s)\n")
    print(f"| shard | tests | passed | failed | skipped | {args.tool} errors | of them out of memory | finished |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    ok = True
    total = {"passed": 0, "failed": 0, "skipped": 0, "memcheck_errors": 0, "oom": 0}
    rs = summary(rerun_log) if rerun_log else None
    rerun_clean = bool(rs) and rerun_done and rs["silent"] == 0 and rs["passed"] + rs["skipped"] == len(rerun_ids) \
        and clean(rs)
    running = []  # the test each cut-off shard was in (pytest runs the ids in the order given)
    for i, shard in enumerate(shards):
        s = summary(logs[i])
        ran = s["passed"] + s["failed"] + s["skipped"]
        if i in timed_out and ran < len(shard):
            running.append(f"shard {i} was cut off in {shard[ran]}")
        done = i not in timed_out and s["silent"] == 0
        # a shard whose only failures were out of memory passes where all of them passed again alone
        ok &= done and (clean(s) or (i in again and rerun_clean and s["failed"] == len(again[i])))
        for key in total:
            total[key] += s[key]
        label = f"{i} (graphs, cache on)" if shard[0] in graphs else str(i)
        print(f"| {label} | {len(shard)} | {s['passed']} | {s['failed']} | {s['skipped']} | {s['memcheck_errors']} | "
              f"{s['oom']} | {'yes' if done else 'no (timeout)' if i in timed_out else 'no'} |")
    print(f"| all | {len(ids)} | {total['passed']} | {total['failed']} | {total['skipped']} | "
          f"{total['memcheck_errors']} | {total['oom']} | {len(shards) - len(timed_out)} of {len(shards)} |")
    if rs:
        print(f"| again, one shard: the {len(rerun_ids)} failed on out-of-memory returns only | {len(rerun_ids)} | "
              f"{rs['passed']} | {rs['failed']} | {rs['skipped']} | {rs['memcheck_errors']} | {rs['oom']} | "
              f"{'yes' if rerun_done and rs['silent'] == 0 else 'no'} |")
    if running:
        print("\n" + "\n".join(running))
    # what the logs said, so that one call shows the error and not only its count
    said = collections.Counter(line for log in logs + [rerun_log] for line in digest(log))
    if said:
        print(f"\n{len(said)} distinct lines of what went wrong (logs: {args.logs}); times printed, line:")
        for line, n in said.most_common(20):
            print(f"{n:4d}  {line[:240]}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
