// MXFP4 MoE pairs on units over the hit experts (gemv_fast_launch.cuh: launch_moe's EXP branch, NOTES.md v18, v142),
// as the host chooses them: for gpt-oss's experts (K = 2880, 32 experts) at each N, token count and top k, the units,
// the stream kernel's warps a CTA, CTAs, shared memory and the busiest SM's stages (`work`). Whether EXP takes a case
// at all (exp_takes: from 2 tokens, or one whose pairs make 8 units an SM) is printed beside it. No GPU needed: the
// launch's fallbacks stand in (the H200's properties, each stream kernel's register cap).
//   nvcc -std=c++17 -O3 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a \
//     -I kernels-src/gguf_kernels/csrc benchmarks/moe_exp_probe.cu -o /tmp/moe_exp_probe
//   /tmp/moe_exp_probe [N ...]      (default: 2880, the gate or up projection; 2003, a short last unit; 5760, the
//                                    fused gate_up)
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "gemv_fast_launch.cuh"

using namespace gq;
using namespace gq::fast;

int main(int argc, char** argv) {
  constexpr int K = 2880, E = 32;
  std::vector<int> ns = {2880, 2003, 5760};
  if (argc > 1) ns.clear();
  for (int i = 1; i < argc; ++i) {
    const int n = atoi(argv[i]);
    if (n <= 0) {
      fprintf(stderr, "moe_exp_probe: '%s' is not a row count\n", argv[i]);
      return 2;
    }
    ns.push_back(n);
  }
  printf("| N | T | top k | EXP takes | units | warps | CTAs | smem, B | busiest SM's stages |\n"
         "| ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n");
  for (int N : ns)
    for (int tokens = 1; tokens <= 8; ++tokens)
      for (int top : {4, 8}) {
        const int P = tokens * top, units = exp_units(P, E, N);
        FastArgs a = {};
        a.N = N;
        a.K = K;
        a.M = a.nx = tokens;
        a.P = P;
        a.row_bytes = packed_row_bytes<MXFP4>(K);
        const StreamChoice c =
            stream_choice<MXFP4, __nv_bfloat16, true, 8, true>(a, units, exp_fixed<MXFP4>(K, tokens, P, E));
        printf("| %d | %d | %d | %s | %d | %d | %d | %zu | %lld |\n", N, tokens, top,
               exp_takes(tokens, P, N) ? "yes" : "no", units, c.WPC, c.ctas, c.smem, (long long)c.work);
      }
  return 0;
}
