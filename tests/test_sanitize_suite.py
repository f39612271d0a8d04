"""benchmarks/sanitize_suite.py's verdict on a shard's log (CPU): the counts it reports come from
pytest's and compute-sanitizer's own output, so a log it misreads would call a failing shard clean."""
import pytest

from script_module import ROOT, load_script

sanitize_suite = load_script(ROOT / "benchmarks" / "sanitize_suite.py")

# A shard's whole log as compute-sanitizer 2025.3.1 and pytest wrote it on the H200 (session 28),
# a test's print splitting pytest's progress line
CLEAN = """========= COMPUTE-SANITIZER
........................................................................ [ 73%]
.......................s.
quantize Q5_K 14336x4096 bf16: 7.78 ms, 15 GB/s of bf16 input
.                                               [100%]
97 passed, 1 skipped in 105.88s (0:01:45)
========= ERROR SUMMARY: 0 errors
"""


def test_a_clean_shard():
    s = sanitize_suite.summary(CLEAN)
    assert s == {"passed": 97, "skipped": 1, "failed": 0, "memcheck_errors": 0, "memcheck_reports": 1, "printed": 0,
                 "oom": 0, "silent": 0}
    assert sanitize_suite.clean(s)


def test_a_shard_cut_off_counts_the_tests_that_finished_and_has_no_report():
    cut = CLEAN.split("97 passed")[0]
    s = sanitize_suite.summary(cut)
    assert (s["passed"], s["skipped"], s["failed"], s["memcheck_reports"]) == (97, 1, 0, 0)


@pytest.mark.parametrize("summary_line, errors", [("1 error", 1), ("12 errors", 12)])
def test_memcheck_errors_and_failures_are_counted(summary_line, errors):
    log = CLEAN.replace("97 passed, 1 skipped", "95 passed, 2 failed, 1 skipped").replace(
        "ERROR SUMMARY: 0 errors", f"ERROR SUMMARY: {summary_line}")
    log = log.replace("========= COMPUTE-SANITIZER\n", "========= COMPUTE-SANITIZER\n"
                      "========= Invalid __global__ read of size 4 bytes\n=========     at kernel+0x1d0\n")
    s = sanitize_suite.summary(log)
    assert (s["passed"], s["failed"], s["memcheck_errors"], s["printed"], s["oom"]) == (95, 2, errors, 1, 0)
    assert not sanitize_suite.clean(s)


# session 30's 6-shard run: memcheck's report of torch's cudaMalloc failing (its allocator then frees its
# cache and retries), printed into pytest's progress line
OOM = ("..................................========= Program hit cudaErrorMemoryAllocation (error 2) due to "
       '"out of memory" on CUDA API call to cudaMalloc.\n=========     Saved host backtrace up to driver entry point\n')


def test_out_of_memory_returns_are_told_apart_from_invalid_accesses():
    log = CLEAN.replace("========= ERROR SUMMARY: 0 errors", OOM + "========= ERROR SUMMARY: 1 error")
    s = sanitize_suite.summary(log)
    assert (s["memcheck_errors"], s["printed"], s["oom"]) == (1, 1, 1)
    assert sanitize_suite.clean(s)
    # an invalid access beside it, or an error memcheck did not print, is not clean
    bad = log.replace(OOM, OOM + "========= Invalid __shared__ write of size 4 bytes\n").replace("1 error", "2 errors")
    assert not sanitize_suite.clean(sanitize_suite.summary(bad))
    assert not sanitize_suite.clean(sanitize_suite.summary(log.replace("1 error", "3 errors")))


# The head of a shard's log from the H200 (session 32): 60 tests passed, then memcheck's report of an
# invalid read continued pytest's progress line, and the process died without pytest's summary
CRASHED = """========= COMPUTE-SANITIZER
............................................................========= Invalid __global__ read of size 16 bytes
=========     at void gq::gemv_mma_kernel<(int)39, (int)2, __nv_bfloat16>(gq::GemvArgs)+0x22a0
=========     by thread (7,0,0) in block (0,62,0)
=========     Access to 0x7fbf1dcb7d60 is out of bounds
=========     and is inside the nearest allocation at 0x7fbf1dc2ee00 of size 561,000 bytes
========= Error: process didn't terminate successfully
========= Target application returned an error
========= ERROR SUMMARY: 5 errors
"""


# session 33's twelve shards: memcheck itself short of GPU memory, in a progress line (its launch untracked)
STARVED = ("F..========= Internal Sanitizer Error: The Sanitizer encountered an error while launching "
           "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_15CUDAFunctor_addIfEESt5arrayIPcLm3EEEEviT0_T1_ and "
           "didn't track the launch. Errors might go undetected. (Unable to allocate enough memory to perform the "
           "requested operation)\n")


def test_memcheck_short_of_memory_counts_as_out_of_memory_and_stays_out_of_the_digest():
    log = CLEAN.replace("========= ERROR SUMMARY: 0 errors", STARVED + "========= ERROR SUMMARY: 1 error")
    s = sanitize_suite.summary(log)
    assert (s["memcheck_errors"], s["printed"], s["oom"]) == (1, 1, 1)
    assert sanitize_suite.digest(log) == []


def test_the_tests_failed_on_out_of_memory_returns_only_are_named_to_run_again():
    failed = ("FAILED tests/test_kernels.py::test_moe_matmul_tile[Q6_K-768-64-400] - torch.OutOfMemoryError: CUDA out\n"
              "FAILED tests/test_kernels.py::test_moe_matmul_tile_map_off - AssertionError: child failed\n")
    log = CLEAN.replace("97 passed, 1 skipped", "95 passed, 2 failed, 1 skipped").replace(
        "========= ERROR SUMMARY: 0 errors", OOM + failed + "========= ERROR SUMMARY: 1 error")
    assert sanitize_suite.oom_failures(log) == ["tests/test_kernels.py::test_moe_matmul_tile[Q6_K-768-64-400]",
                                               "tests/test_kernels.py::test_moe_matmul_tile_map_off"]
    # not where an invalid access was printed beside them, an error went unprinted, or a chunk has no summary
    bad = log.replace(OOM, OOM + "========= Invalid __shared__ write of size 4 bytes\n").replace("1 error", "2 errors")
    assert sanitize_suite.oom_failures(bad) == []
    assert sanitize_suite.oom_failures(log.replace("1 error", "3 errors")) == []
    assert sanitize_suite.oom_failures(f"### chunk 0\n{log}### chunk 1\n" + CLEAN.split("97 passed")[0]) == []
    assert sanitize_suite.oom_failures(CLEAN) == []


def test_a_chunked_shard_sums_its_processes_and_flags_one_without_a_report():
    second = CLEAN.replace("97 passed, 1 skipped", "39 passed, 1 failed").replace("0 errors", "2 errors")
    log = f"### chunk 0\n{CLEAN}### chunk 1\n{second}"
    s = sanitize_suite.summary(log)
    assert (s["passed"], s["skipped"], s["failed"], s["memcheck_errors"], s["memcheck_reports"], s["silent"]) == (
        136, 1, 1, 2, 2, 0)
    # a chunk cut off before memcheck's summary: its finished tests counted, the shard not clean
    cut = f"{log}### chunk 2\n" + CLEAN.split("97 passed")[0]
    s = sanitize_suite.summary(cut)
    assert (s["passed"], s["silent"]) == (136 + 97, 1)


def test_a_crashed_shard_counts_the_tests_before_the_report():
    s = sanitize_suite.summary(CRASHED)
    # the invalid read and the process's end are two of memcheck's five errors that it printed
    assert (s["passed"], s["failed"], s["memcheck_errors"], s["printed"]) == (60, 0, 5, 2)
    assert not sanitize_suite.clean(s)


def test_graph_tests_get_a_shard_of_their_own():
    ids = [f"t.py::test_{i}" for i in range(7)]
    graphs = {"t.py::test_2", "t.py::test_5", "other.py::test_x"}  # one not collected this time
    shards = sanitize_suite.deal(ids, graphs, 3)
    assert shards == [["t.py::test_0", "t.py::test_4"], ["t.py::test_1", "t.py::test_6"], ["t.py::test_3"],
                      ["t.py::test_2", "t.py::test_5"]]
    # more shards than tests: none empty; no graph test: no graph shard
    assert sanitize_suite.deal(ids[:2], set(), 4) == [["t.py::test_0"], ["t.py::test_1"]]


def test_the_digest_names_each_invalid_access_and_failed_test_but_no_out_of_memory_return():
    log = CRASHED.replace("========= Error:", OOM + "========= Error:") + (
        "FAILED tests/test_kernels.py::test_matmul_split_k[MXFP4-17] - RuntimeError: Offset increment\n")
    assert sanitize_suite.digest(log) == [
        "Invalid __global__ read of size 16 bytes at void gq::gemv_mma_kernel<(int)39, (int)2, __nv_bfloat16>"
        "(gq::GemvArgs)+0x.",
        "Error: process didn't terminate successfully",
        "FAILED tests/test_kernels.py::test_matmul_split_k[MXFP4-17]"]
    assert sanitize_suite.digest(CLEAN) == []


# racecheck's summary and hazard lines in the form compute-sanitizer's manual gives them (not yet seen in
# a log of ours): its errors count like memcheck's, its warnings do not
RACE = ("========= Error: Race reported between Write access at void k()+0x1a0 in k.cu:12\n"
        "=========     and Read access at void k()+0x1c0 in k.cu:14 [256 hazards]\n")


@pytest.mark.parametrize("errors, warnings", [(0, 0), (0, 3), (1, 0)])
def test_racecheck_summaries_count_their_errors(errors, warnings):
    hazards = errors + warnings
    line = (f"========= RACECHECK SUMMARY: {hazards} hazard{'s' * (hazards != 1)} displayed "
            f"({errors} error{'s' * (errors != 1)}, {warnings} warning{'s' * (warnings != 1)})")
    log = CLEAN.replace("========= ERROR SUMMARY: 0 errors", (RACE if errors else "") + line)
    s = sanitize_suite.summary(log)
    assert (s["memcheck_errors"], s["memcheck_reports"], s["printed"]) == (errors, 1, 1 if errors else 0)
    assert sanitize_suite.clean(s) == (errors == 0)
    # the digest keeps a hazard's first line (its write), as it keeps an invalid access's
    assert sanitize_suite.digest(log) == (["Error: Race reported between Write access at void k()+0x. in k.cu:12"]
                                          if errors else [])


# synccheck on the K split's tests on the H200 (session 36, compute-sanitizer's default barrier count): it
# warned that it could not track the kernel's mbarriers, then aborted the process (its stack trace cut here)
SYNC_OVERFLOW = """### chunk 0
========= COMPUTE-SANITIZER
========= Warning: Detected overflow of tracked cuda::barrier structures. Results might be incorrect. \
Try using --num-cuda-barriers to fix the issue
========= 
Fatal Python error: Aborted

Current thread 0x00007ff3565b0a40 (most recent call first):
  File "/work/main/tests/test_kernels.py", line 71 in check_matmul
========= Error: process didn't terminate successfully
========= Target application returned an error
========= ERROR SUMMARY: 1 error
"""


def test_a_tool_warning_and_an_aborted_process_are_not_clean_and_are_named():
    s = sanitize_suite.summary(SYNC_OVERFLOW)
    assert (s["passed"], s["failed"], s["memcheck_errors"], s["printed"]) == (0, 0, 1, 2)
    assert not sanitize_suite.clean(s)
    assert sanitize_suite.digest(SYNC_OVERFLOW) == [
        "Warning: Detected overflow of tracked cuda::barrier structures. Results might be incorrect. "
        "Try using --num-cuda-barriers to fix the issue",
        "Error: process didn't terminate successfully",
        "Fatal Python error: Aborted"]
