"""benchmarks/sanitize_suite.py's verdict on a shard's log (CPU): the counts it reports come from
pytest's and compute-sanitizer's own output, so a log it misreads would call a failing shard clean."""
import importlib.util
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location(
    "sanitize_suite", Path(__file__).resolve().parents[1] / "benchmarks" / "sanitize_suite.py")
sanitize_suite = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sanitize_suite)

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
                 "oom": 0}
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
