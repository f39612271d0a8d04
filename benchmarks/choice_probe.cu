// The M = 1 dense launch's two stream forms side by side, as the host chooses between them
// (gemv_fast_launch.cuh: choose_one_or_old): for each shape and type, the row pairs' (MT = 1) and ONE's (4-row
// units) units, stages a unit, warps a CTA, CTAs, shared memory and the busiest SM's stages, and the form taken. It
// reads the device's SM count, shared memory and each kernel's registers (the launch's own queries) where there is a
// GPU; without one the launch's fallbacks stand in (the H200's properties, each stream kernel's register cap).
//   nvcc -std=c++17 -O3 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a \
//     -I kernels-src/gguf_kernels/csrc benchmarks/choice_probe.cu -o /tmp/choice_probe
//   /tmp/choice_probe [KxN ...]      (default: the issue's 8B shapes and a few more)
#include <cuda_runtime.h>

#include <cstdio>
#include <utility>
#include <vector>

#include "gemv_fast_launch.cuh"
#include "probe_shapes.h"

using namespace gq;
using namespace gq::fast;

template <int T>
void show(const char* name, int K, int N) {
  FastArgs a = {};
  a.N = N;
  a.K = K;
  a.M = 1;
  a.row_bytes = (int64_t)K / Traits<T>::BLOCK * Traits<T>::BYTES;
  const OneOrOld c = choose_one_or_old<T, __nv_bfloat16, false>(a, stream_rec_stride<T, 1>(K));
  const StreamChoice &o = c.old, &e = c.one;
  const int so = stream_unit_stages<T, false, 1, false, false>(K), se = stream_unit_stages<T, false, 2, false, true>(K);
  printf("| %s | %d -> %d | %d x %d, %d, %d, %zu | %lld | %d x %d, %d, %d, %zu | %lld | %s |\n", name, K, N, (N + 1) / 2,
         so, o.WPC, o.ctas, o.smem, (long long)o.work, (N + 3) / 4, se, e.WPC, e.ctas, e.smem, (long long)e.work,
         c.take_one ? "ONE" : "row pairs");
}

int main(int argc, char** argv) {
  std::vector<std::pair<int, int>> shapes;
  if (!probe_shapes("choice_probe", argc, argv,
                    {{4096, 14336}, {14336, 4096}, {4096, 4096}, {4096, 1024}, {8192, 8192}, {13824, 5120}, {5120, 13824}},
                    shapes))
    return 2;
  printf("| type | K -> N | row pairs: units x stages, warps, CTAs, smem | busiest SM's stages | ONE: units x stages, "
         "warps, CTAs, smem | busiest SM's stages | taken |\n| --- | --- | --- | ---: | --- | ---: | --- |\n");
  for (const auto& s : shapes)
    each_fast_type([&](auto t, const char* name) { show<decltype(t)::value>(name, s.first, s.second); });
  return 0;
}
