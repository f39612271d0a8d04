// The M = 2..8 dense launch's choice between the plain launch, the clusters' K split and the grid K split, as the
// host makes it (gemv_fast_launch.cuh: ks_grid_decide and the rules it asks): for each type, shape and M, whether
// the grid goes first (ks_units_first), whether a cluster launch may take the case, whether the plain launch takes
// it (its warps a CTA and CTAs at M = 2, and whether that leaves SMs idle), and the grid's plan (slices, warps a
// CTA, CTAs a slice, one unit a warp or several, the larger slice's chunks and the ranks that take it, the busiest
// warp's chunks). It reads the device's SM count, shared memory and each kernel's registers where there is a GPU;
// without one (a host with the toolkit only) the launch's fallbacks stand in: the H200's properties and each stream
// kernel's register cap (stream_reg_cap), which the stream kernels reach or nearly.
//   nvcc -std=c++17 -O3 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a \
//     -I kernels-src/gguf_kernels/csrc benchmarks/ks_plan_probe.cu -o /tmp/ks_plan_probe
//   /tmp/ks_plan_probe [KxN ...]      (default: the down projections and large shapes of issue 3's misses)
#include <cuda_runtime.h>

#include <cstdio>
#include <utility>
#include <vector>

#include "gemv_fast_launch.cuh"
#include "probe_shapes.h"

using namespace gq;
using namespace gq::fast;

template <int T>
void show(const char* name, int K, int N, int M) {
  using L = FT<T>;
  const KsGridPlan g = ks_grid_decide<T>(N, K, M);
  const bool plain = stream_plain_takes<T>(N, K, M);
  const MtChoice m2 = plain_m2<T>(N, K), m34 = plain_m34<T>(N, K);
  const int nch = K / L::CE;
  const bool clusters = ks_clusters_may_take<T>(N, K, M);
  const char* taken = g.Z ? "grid" : clusters ? "clusters" : plain ? "plain" : "other";
  char mt[96] = "";  // the plain launch's kernel at this M (M = 2: each kernel's plan; M = 3, 4: with MT = 4's and MT = 8's
                     // busiest SM's stages)
  if (M == 2) {  // with each kernel's warps x CTAs and busiest SM's stages (m2_choice's inputs)
    const StreamChoice c2 = plain_choice<T, 2>(N, K), c4 = plain_choice<T, 4>(N, K), c8 = plain_choice<T, 8>(N, K);
    snprintf(mt, sizeof mt, "%d (2: %dx%d %lld; 4: %dx%d %lld; 8: %dx%d %lld)", m2.MT, c2.WPC, c2.ctas,
             (long long)c2.work, c4.WPC, c4.ctas, (long long)c4.work, c8.WPC, c8.ctas, (long long)c8.work);
  }
  if (M == 3 || M == 4)
    snprintf(mt, sizeof mt, "%d: %d x %d (%lld / %lld)", m34.MT, m34.c.WPC, m34.c.ctas,
             (long long)plain_choice<T, 4>(N, K).work, (long long)plain_choice<T, 8>(N, K).work);
  printf("| %s | %d -> %d | %d | %d | %s | %s | %s | %s | %s |", name, K, N, M, nch,
         ks_units_first<T>(N, K, M) ? "yes" : "no", clusters ? "yes" : "no", plain ? "yes" : "no", mt,
         M == 2 && plain ? (stream_plain_idle<T>(N, K) ? "yes" : "no") : "");
  if (!g.Z) {
    printf(" | | | | | %s |\n", taken);
    return;
  }
  char slices[48];
  if (g.kx == g.Z) snprintf(slices, sizeof slices, "%d each", g.sch);
  else snprintf(slices, sizeof slices, "%d (%d ranks), %d", g.sch, g.kx, g.sch - 1);
  const long long chain = (long long)ks_units_a_warp(g, N) * g.sch;
  printf(" %d | %d x %d | %s | %s | %lld | %s |\n", g.Z, g.ctas, g.WPC, g.units ? "several" : "one", slices, chain, taken);
}

int main(int argc, char** argv) {
  std::vector<std::pair<int, int>> shapes;
  if (!probe_shapes("ks_plan_probe", argc, argv,
                    {{25600, 5120}, {17408, 5120}, {18944, 3584}, {3584, 18944}, {28672, 8192}, {8192, 28672}, {4096, 128256}},
                    shapes))
    return 2;
  printf("| type | K -> N | M | chunks | grid first | clusters may | plain takes | plain MT: warps x CTAs "
         "(M = 2: each MT's warps x CTAs and busiest SM's stages; M = 3, 4: MT = 4 / 8 busiest SM's stages) "
         "| M = 2 idle | grid Z | CTAs a slice x warps | units a warp | chunks a slice (ranks), the rest "
         "| busiest warp's chunks | taken |\n"
         "| --- | --- | ---: | ---: | --- | --- | --- | --- | --- | ---: | --- | --- | --- | ---: | --- |\n");
  for (const auto& s : shapes)
    for (int m = 2; m <= 8; ++m)
      each_fast_type([&](auto t, const char* name) { show<decltype(t)::value>(name, s.first, s.second, m); });
  return 0;
}
