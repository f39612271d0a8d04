"""Host byte model of v133's stage copies (no GPU): the K split on Q6_K rows of 16k + 8 bytes copies each stage by
two tensor-map boxes over row pairs (gemv_stream_kernel's PAIRS), and every row's chunk must land where the consumer
reads it: slot (r & 1) x 8 + r / 2 of the stage, (mis + dr) & 15 bytes in, with rows past N as zeros.

    python kernels-src/gguf_kernels/tests/pair_box_check.py

The model follows the tensor-map box semantics (a box of 8 pairs by stream_rs bytes from a 16-byte boundary, zeros
past the map's end in either dimension) and the kernel's index arithmetic; a wrong slot, offset or box origin fails it
(`--wrong-slot` checks that it does).
"""
import random
import sys

CB, RS, E, SUPER_ROW_BYTES = 420, 432, 4, 210  # Q6_K: a 512-element chunk, its stage slot at MT = 8, map elements


def check(N: int, K: int, slices: list[tuple[int, int]], wrong_slot: bool = False) -> None:
    row_bytes = K // 256 * SUPER_ROW_BYTES
    assert row_bytes % 16 == 8 and (N * row_bytes) % 16 == 0, (N, K)
    w = bytes(random.getrandbits(8) for _ in range(N * row_bytes))
    pair_bytes, pairs = 2 * row_bytes, N // 2

    def box(x: int, y: int) -> bytes:  # 8 pairs from pair y, RS bytes from element x
        return bytes(w[p * pair_bytes + b] if p < pairs and b < pair_bytes else 0
                     for p in range(y, y + 8) for b in range(x * E, x * E + RS))

    for first_chunk, chunks in slices:  # a K-split rank's slice: its first chunk and its chunk count
        s_off = first_chunk * CB
        for unit in range((N + 15) // 16):
            for st in range(chunks):
                b0 = st * CB  # one chunk a row a stage at MT = 8
                stage = b"".join(box(((j * row_bytes + s_off + b0) & ~15) // E, 16 * unit // 2) for j in range(2))
                mis = (s_off + b0) & 15
                for r in range(16):
                    slot = r if wrong_slot else ((r & 1) << 3) + (r >> 1)
                    at = slot * RS + ((mis + r * row_bytes) & 15)
                    row = 16 * unit + r
                    want = w[row * row_bytes + s_off + b0:][:CB] if row < N else bytes(CB)
                    assert stage[at:at + CB] == want, f"N={N} K={K} slice {first_chunk} unit {unit} stage {st} row {r}"


def main() -> int:
    random.seed(1)
    wrong = "--wrong-slot" in sys.argv
    cases = [(40, 5120, [(0, 5), (5, 5)]),  # Qwen3-14B's hidden size in two slices; the last unit 8 rows past N
             (24, 17408, [(0, 5), (5, 5), (30, 4)]),  # its down projection, 34 chunks in unequal slices
             (32, 7168, [(0, 4), (4, 3), (11, 3)])]
    for N, K, slices in cases:
        check(N, K, slices, wrong)
        print(f"ok N={N} K={K} slices={slices}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
