// MoE pairs on ragged flat items (gemv_fast_launch.cuh: launch_moe's rflat, NOTES.md v37, v111, v112; its one-run
// form bflat, v113: K = 256, 768, "flat run" below, taking the weights 16-byte aligned as torch allocates them), as the host
// chooses them: for IQ4_XS rows at each case, the x rows with records (all, or a CTA's own pairs: local), the stream
// kernel's choice (warps a CTA, CTAs, shared memory) and the local recount launch_choice makes for the chosen grid;
// "declined" where choose_stream returns no choice (e.g. more groups of records a thread than its warp reads stages),
// and "not flat" where launch_moe's rflat does not hold (N not a multiple of the unit's 16 rows, or more one-block
// items a row than the item sums hold): the launch falls back to the ragged row pairs. No GPU needed: the launch's
// fallbacks stand in (the H200's properties, each stream kernel's register cap).
//   nvcc -std=c++17 -O3 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a \
//     -I kernels-src/gguf_kernels/csrc benchmarks/moe_flat_probe.cu -o /tmp/moe_flat_probe
//   /tmp/moe_flat_probe [K,N,T ...]      (default: test_moe_matmul_flat_ragged_iq4xs's cases; top 8, both x layouts)
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include "gemv_fast_launch.cuh"

using namespace gq;
using namespace gq::fast;

template <int T>
void show(int K, int N, int tokens, int top_k, bool x_a_pair) {
  const int P = tokens * top_k, x_div = x_a_pair ? 1 : top_k, rn = flat_row_items<T, true>(K);  // as launch_moe's rfn
  const MoeXRows xr = moe_x_rows(P, N, x_div);  // as launch_moe
  const int nx = xr.nx;
  const bool local = xr.local;
  const size_t recs = (size_t)nx * stream_rec_stride<T, 1>(K);
  const bool rflat = flat_rag_units<T>(K, N);
  const int64_t rb = packed_row_bytes<T>(K);
  const bool bflat = rflat && flat_run_rows<T>(K, rb, N * rb);  // as launch_moe's
  FastArgs a = {};
  a.N = N; a.K = K; a.M = 1; a.P = P; a.nx = nx; a.local = local; a.x_div = x_div; a.row_bytes = rb;
  const size_t fixed = recs + ((size_t)P * 4 + 15) / 16 * 16;
  const StreamChoice ch = bflat   ? stream_choice<T, __nv_bfloat16, true, 1, false, true, true>(a, P * (N / flat_rows(rn)), fixed)
                          : rflat ? stream_choice<T, __nv_bfloat16, true, 1, true, true>(a, P * (N / flat_rows(rn)), fixed)
                                  : StreamChoice{0, 0, 0, 0, 0, 0};
  int rows = nx;
  size_t smem = ch.smem;
  if (ch.WPC && local) {  // launch_choice's recount for the chosen grid
    rows = local_rows(P, N, flat_rows(rn), x_div, ch.ctas);
    smem += ((int64_t)rows - nx) * (int64_t)stream_rec_stride<T, 1>(K);
  }
  printf("| %d | %d | %d | %s | %d | %s | %d | %zu |", K, N, tokens, x_a_pair ? "a pair" : "a token", P,
         local ? "yes" : "no", nx, recs);
  if (!rflat) printf(" | | | | not flat |\n");
  else if (!ch.WPC) printf(" | | | | declined |\n");
  else printf(" %d | %d | %d | %zu | %s |\n", ch.WPC, ch.ctas, rows, smem, bflat ? "flat run" : "flat");
}

int main(int argc, char** argv) {
  std::vector<std::vector<int>> cases = {{768, 2048, 1}, {768, 2048, 8}, {768, 48, 3}, {768, 40, 3}, {256, 48, 8},
                                         {1280, 32, 1}, {1792, 32, 8}, {1792, 20, 8}, {3840, 64, 1}, {3840, 6, 1}};
  if (argc > 1) cases.clear();
  for (int i = 1; i < argc; ++i) {
    int K, N, t;
    if (sscanf(argv[i], "%d,%d,%d", &K, &N, &t) != 3) {
      fprintf(stderr, "moe_flat_probe: '%s' is not K,N,T\n", argv[i]);
      return 2;
    }
    cases.push_back({K, N, t});
  }
  printf("| K | N | T | x a row | pairs | local | x rows (guess) | records, B | warps | CTAs | x rows | smem, B | form |\n"
         "| ---: | ---: | ---: | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n");
  for (const auto& c : cases)
    for (bool pair : {false, true}) {
      if (c[0] % 256 || (c[0] / 256 * 136) % 16 == 0) {
        fprintf(stderr, "moe_flat_probe: K = %d gives IQ4_XS rows of whole 16-byte pieces (not ragged)\n", c[0]);
        return 2;
      }
      show<IQ4_XS>(c[0], c[1], c[2], 8, pair);
    }
  return 0;
}
