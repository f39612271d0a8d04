// Device-side grouping of MoE (token, slot) pairs by expert, with no host synchronisation:
// a counting sort in one CTA (shared-memory histogram, warp scans), then a table of chunks of
// at most `mt` pairs of one expert for the chunked small-M matmul. Pairs whose id is outside
// [0, E) go to a last bucket marked expert = -1 (their outputs are written as zeros).
// Order inside a bucket depends on atomics, which does not change any result: every pair's
// output is computed from its own activation row alone.
#include <cuda_runtime.h>

#include "launch.h"

namespace gq {

__global__ void __launch_bounds__(1024) moe_route_kernel(const void* __restrict__ ids, int ids64, int P, int E,
                                                         int mt, int* __restrict__ sorted,
                                                         int4* __restrict__ chunks, int max_chunks) {
  extern __shared__ int sh[];
  const int NB = E + 1;
  int* cnt = sh;
  int* off = cnt + NB;
  int* cst = off + NB;
  int* cur = cst + NB;
  int* total = cur + NB;
  const int tid = threadIdx.x, nt = blockDim.x;

  auto expert_of = [&](int p) -> int {
    const long long e = ids64 ? reinterpret_cast<const long long*>(ids)[p]
                              : (long long)reinterpret_cast<const int*>(ids)[p];
    return (e < 0 || e >= E) ? E : (int)e;
  };

  for (int i = tid; i < NB; i += nt) { cnt[i] = 0; cur[i] = 0; }
  __syncthreads();
  for (int p = tid; p < P; p += nt) atomicAdd(&cnt[expert_of(p)], 1);
  __syncthreads();
  if (tid < 32) {
    const int lane = tid;
    int carry_o = 0, carry_c = 0;
    for (int base = 0; base < NB; base += 32) {
      const int i = base + lane;
      const int c = i < NB ? cnt[i] : 0;
      const int nc = (c + mt - 1) / mt;
      int so = c, sc = nc;
#pragma unroll
      for (int d = 1; d < 32; d <<= 1) {
        const int t1 = __shfl_up_sync(0xffffffffu, so, d), t2 = __shfl_up_sync(0xffffffffu, sc, d);
        if (lane >= d) { so += t1; sc += t2; }
      }
      if (i < NB) { off[i] = carry_o + so - c; cst[i] = carry_c + sc - nc; }
      carry_o += __shfl_sync(0xffffffffu, so, 31);
      carry_c += __shfl_sync(0xffffffffu, sc, 31);
    }
    if (lane == 0) *total = carry_c;
  }
  __syncthreads();
  for (int p = tid; p < P; p += nt) {
    const int e = expert_of(p);
    sorted[off[e] + atomicAdd(&cur[e], 1)] = p;
  }
  for (int e = tid; e < NB; e += nt) {
    const int c = cnt[e], nc = (c + mt - 1) / mt;
    for (int j = 0; j < nc; ++j)
      chunks[cst[e] + j] = make_int4(e == E ? -1 : e, off[e] + j * mt, min(mt, c - j * mt), 0);
  }
  for (int i = *total + tid; i < max_chunks; i += nt) chunks[i] = make_int4(0, 0, 0, 0);
}

cudaError_t launch_moe_route(const void* ids, int ids64, int P, int E, int mt, int* sorted, int4* chunks,
                             int max_chunks, cudaStream_t stream) {
  const size_t smem = (size_t)(4 * (E + 1) + 1) * sizeof(int);
  if (smem > 48 * 1024) return cudaErrorInvalidValue;  // > 3000 experts: not supported
  moe_route_kernel<<<1, 1024, smem, stream>>>(ids, ids64, P, E, mt, sorted, chunks, max_chunks);
  return cudaGetLastError();
}

}  // namespace gq
