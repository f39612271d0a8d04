// Kernel templates shared by every type: dequantize / get_rows, and the small-M matmul
// (dense and MoE). Each type_*.cu instantiates them for one ggml type.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "ggml_blocks.cuh"
#include "launch.h"

namespace gq {

// ---- activation / output element helpers -----------------------------------------------------

template <typename XT> struct XIO;

template <> struct XIO<__nv_bfloat16> {
  static __device__ __forceinline__ void load4(const __nv_bfloat16* p, float (&f)[4]) {
    const uint2 r = __ldg(reinterpret_cast<const uint2*>(p));
    f[0] = __uint_as_float(r.x << 16); f[1] = __uint_as_float(r.x & 0xFFFF0000u);
    f[2] = __uint_as_float(r.y << 16); f[3] = __uint_as_float(r.y & 0xFFFF0000u);
  }
  static __device__ __forceinline__ void store4(__nv_bfloat16* p, const float* f) {
    __nv_bfloat162 a = __floats2bfloat162_rn(f[0], f[1]), b = __floats2bfloat162_rn(f[2], f[3]);
    uint2 r; r.x = *reinterpret_cast<uint32_t*>(&a); r.y = *reinterpret_cast<uint32_t*>(&b);
    *reinterpret_cast<uint2*>(p) = r;
  }
  static __device__ __forceinline__ __nv_bfloat16 cvt(float f) { return __float2bfloat16_rn(f); }
};

template <> struct XIO<__half> {
  static __device__ __forceinline__ void load4(const __half* p, float (&f)[4]) {
    const uint2 r = __ldg(reinterpret_cast<const uint2*>(p));
    const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&r.x));
    const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&r.y));
    f[0] = a.x; f[1] = a.y; f[2] = b.x; f[3] = b.y;
  }
  static __device__ __forceinline__ void store4(__half* p, const float* f) {
    __half2 a = __floats2half2_rn(f[0], f[1]), b = __floats2half2_rn(f[2], f[3]);
    uint2 r; r.x = *reinterpret_cast<uint32_t*>(&a); r.y = *reinterpret_cast<uint32_t*>(&b);
    *reinterpret_cast<uint2*>(p) = r;
  }
  static __device__ __forceinline__ __half cvt(float f) { return __float2half_rn(f); }
};

template <> struct XIO<float> {
  static __device__ __forceinline__ void load4(const float* p, float (&f)[4]) {
    const float4 r = __ldg(reinterpret_cast<const float4*>(p));
    f[0] = r.x; f[1] = r.y; f[2] = r.z; f[3] = r.w;
  }
  static __device__ __forceinline__ void store4(float* p, const float* f) {
    *reinterpret_cast<float4*>(p) = make_float4(f[0], f[1], f[2], f[3]);
  }
  static __device__ __forceinline__ float cvt(float f) { return f; }
};

__device__ __forceinline__ int64_t load_id(const void* ids, int ids64, int64_t i) {
  return ids64 ? reinterpret_cast<const int64_t*>(ids)[i] : (int64_t)reinterpret_cast<const int32_t*>(ids)[i];
}

// ---- dequantize / get_rows -------------------------------------------------------------------
// One thread per (row, 64-element unit, part): 16 elements, written as four 4-element vectors.

template <int T, typename OT>
__global__ void __launch_bounds__(256) dequant_kernel(const uint8_t* __restrict__ w, int64_t row_bytes,
                                                      int64_t rows_out, int64_t rows_src, int K,
                                                      const void* __restrict__ ids, int ids64,
                                                      OT* __restrict__ out) {
  const int nunits = (K + 63) >> 6;
  const int64_t per_row = (int64_t)nunits * 4;
  const int64_t total = rows_out * per_row;
  for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
       idx += (int64_t)gridDim.x * blockDim.x) {
    const int64_t row = idx / per_row;
    const int rem = (int)(idx - row * per_row);
    const int u = rem >> 2, p = rem & 3;
    const int64_t src = ids ? load_id(ids, ids64, row) : row;
    const bool full = u * 64 + 64 <= K;
    float v[16];
    if (src >= 0 && src < rows_src) {
      decode<T>(w + src * row_bytes, u, p, full, v);
    } else {
#pragma unroll
      for (int i = 0; i < 16; ++i) v[i] = 0.f;
    }
    OT* o = out + row * K + u * 64 + 4 * p;
#pragma unroll
    for (int q = 0; q < 4; ++q)
      if (q < 2 || full) XIO<OT>::store4(o + 16 * q, v + 4 * q);
  }
}

// ---- small-M matmul --------------------------------------------------------------------------
// A CTA of 8 warps owns 16 weight rows (2 per warp) and up to MT activation rows. Each warp
// streams its two rows through shared memory in chunks of 512 elements (cp.async, 16-byte
// pieces covering the chunk's bytes rounded out to 16-byte boundaries, so every block keeps
// its file alignment modulo 16), S stages deep. Lane = (unit of 64 elements, part): it decodes
// 16 elements of each row to fp32 and dots them with the matching 16 activations of each of
// the M rows (fp32 FMA). Partial sums are reduced across the warp at the end.

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

template <int T>
struct GemvGeom {
  static constexpr int WARPS = 8;
  static constexpr int R = 2;           // weight rows per warp
  static constexpr int CE = 512;        // elements per chunk (8 units of 64)
  static constexpr int CB = CE / Traits<T>::BLOCK * Traits<T>::BYTES;  // bytes per chunk
  static constexpr int BUF = (CB + 15) / 16 * 16 + 16;                // aligned superset
  static constexpr int S = 4;           // pipeline stages
};

template <int T, int MT, typename XT>
__global__ void __launch_bounds__(256) gemv_kernel(const GemvArgs a) {
  using G = GemvGeom<T>;
  constexpr int R = G::R, S = G::S, CB = G::CB, BUF = G::BUF;
  __shared__ __align__(16) uint8_t smem[G::WARPS][S][R][BUF];

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int N = a.N, K = a.K;
  const int n0 = blockIdx.y * GEMV_ROWS_PER_CTA + warp * R;

  // Which activation rows this CTA serves, where their outputs go, which weight matrix.
  int M = 0;
  int xrow[MT], orow[MT];
  int64_t expert = 0;
  if (a.mode == GEMV_DENSE) {
    const int m0 = blockIdx.x * MT;
    M = min(MT, a.M - m0);
#pragma unroll
    for (int m = 0; m < MT; ++m) { xrow[m] = m0 + m; orow[m] = m0 + m; }
  } else if (a.mode == GEMV_PAIRS) {
    const int pair = blockIdx.x;
    M = 1;
    expert = load_id(a.ids, a.ids64, pair);
#pragma unroll
    for (int m = 0; m < MT; ++m) { xrow[m] = pair / a.x_div; orow[m] = pair; }
  } else {
    const int4 c = a.chunks[blockIdx.x];
    M = c.z;
    if (M <= 0) return;
    expert = c.x;
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      const int pr = m < M ? a.sorted[c.y + m] : 0;
      xrow[m] = pr / a.x_div; orow[m] = pr;
    }
  }
  XT* out = reinterpret_cast<XT*>(a.out);
  if (a.mode != GEMV_DENSE && (expert < 0 || expert >= a.n_experts)) {
    // Unroutable expert id: zeros, like a row that no expert claims.
    if (lane == 0) {
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int m = 0; m < MT; ++m)
          if (m < M && n0 + r < N) out[(int64_t)orow[m] * a.out_stride + n0 + r] = XIO<XT>::cvt(0.f);
    }
    return;
  }

  const uint8_t* rowp[R];
#pragma unroll
  for (int r = 0; r < R; ++r)
    rowp[r] = a.w + expert * a.expert_bytes + (int64_t)min(n0 + r, N - 1) * a.row_bytes;

  const int nunits = (K + 63) >> 6;
  const int niters = (K + G::CE - 1) / G::CE;

  auto issue = [&](int it) {
    if (it < niters) {
      const int stage = it % S;
      const int64_t bytes = min((int64_t)CB, a.row_bytes - (int64_t)it * CB);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const uintptr_t s = reinterpret_cast<uintptr_t>(rowp[r] + (int64_t)it * CB);
        const uintptr_t a0 = s & ~(uintptr_t)15, a1 = (s + bytes + 15) & ~(uintptr_t)15;
        const int pieces = (int)((a1 - a0) >> 4);
        for (int pc = lane; pc < pieces; pc += 32)
          cp_async16(&smem[warp][stage][r][pc * 16], reinterpret_cast<const void*>(a0 + pc * 16));
      }
    }
    cp_async_commit();
  };

  float acc[R][MT];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int m = 0; m < MT; ++m) acc[r][m] = 0.f;

#pragma unroll
  for (int s = 0; s < S - 1; ++s) issue(s);

  const int ul = lane >> 2, part = lane & 3;
  const XT* xb = reinterpret_cast<const XT*>(a.x);

  for (int it = 0; it < niters; ++it) {
    cp_async_wait<S - 2>();
    __syncwarp();
    const int stage = it % S;
    const int U = it * 8 + ul;
    if (U < nunits) {
      const bool full = U * 64 + 64 <= K;
      float w[R][16];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const uintptr_t s = reinterpret_cast<uintptr_t>(rowp[r] + (int64_t)it * CB);
        decode<T>(&smem[warp][stage][r][s & 15], ul, part, full, w[r]);
      }
      const int k0 = U * 64 + 4 * part;
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        if (m < M) {
          const XT* xp = xb + (int64_t)xrow[m] * a.x_stride + k0;
          float xv[16];
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            if (q < 2 || full) {
              float f[4];
              XIO<XT>::load4(xp + 16 * q, f);
#pragma unroll
              for (int i = 0; i < 4; ++i) xv[4 * q + i] = f[i];
            } else {
#pragma unroll
              for (int i = 0; i < 4; ++i) xv[4 * q + i] = 0.f;
            }
          }
#pragma unroll
          for (int r = 0; r < R; ++r)
#pragma unroll
            for (int j = 0; j < 16; ++j) acc[r][m] = fmaf(w[r][j], xv[j], acc[r][m]);
        }
      }
    }
    __syncwarp();
    issue(it + S - 1);
  }
  cp_async_wait<0>();

#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      float v = acc[r][m];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      acc[r][m] = v;
    }
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int m = 0; m < MT; ++m)
        if (m < M && n0 + r < N) out[(int64_t)orow[m] * a.out_stride + n0 + r] = XIO<XT>::cvt(acc[r][m]);
  }
}

// ---- launchers -------------------------------------------------------------------------------

template <int T>
cudaError_t launch_gemv(const GemvArgs& a, DType xt, int mt, int64_t grid_x, cudaStream_t stream) {
  if (grid_x <= 0 || a.N <= 0) return cudaSuccess;
  const dim3 grid((unsigned)grid_x, (unsigned)((a.N + GEMV_ROWS_PER_CTA - 1) / GEMV_ROWS_PER_CTA));
  const dim3 block(256);
#define GQ_GEMV_CASE(MT_, XT_) gemv_kernel<T, MT_, XT_><<<grid, block, 0, stream>>>(a)
  if (mt == 1) {
    if (xt == DType::BF16) GQ_GEMV_CASE(1, __nv_bfloat16);
    else if (xt == DType::F16) GQ_GEMV_CASE(1, __half);
    else GQ_GEMV_CASE(1, float);
  } else {
    if (xt == DType::BF16) GQ_GEMV_CASE(GEMV_MT, __nv_bfloat16);
    else if (xt == DType::F16) GQ_GEMV_CASE(GEMV_MT, __half);
    else GQ_GEMV_CASE(GEMV_MT, float);
  }
#undef GQ_GEMV_CASE
  return cudaGetLastError();
}

template <int T>
cudaError_t launch_dequant(const uint8_t* w, int64_t row_bytes, int64_t rows_out, int64_t rows_src, int K,
                           const void* ids, int ids64, void* out, DType ot, cudaStream_t stream) {
  const int64_t total = rows_out * (int64_t)((K + 63) / 64) * 4;
  if (total <= 0) return cudaSuccess;
  const int64_t blocks = min((total + 255) / 256, (int64_t)1 << 30);
  const dim3 grid((unsigned)blocks), block(256);
  if (ot == DType::BF16)
    dequant_kernel<T, __nv_bfloat16><<<grid, block, 0, stream>>>(w, row_bytes, rows_out, rows_src, K, ids, ids64,
                                                                 reinterpret_cast<__nv_bfloat16*>(out));
  else if (ot == DType::F16)
    dequant_kernel<T, __half><<<grid, block, 0, stream>>>(w, row_bytes, rows_out, rows_src, K, ids, ids64,
                                                          reinterpret_cast<__half*>(out));
  else
    dequant_kernel<T, float><<<grid, block, 0, stream>>>(w, row_bytes, rows_out, rows_src, K, ids, ids64,
                                                         reinterpret_cast<float*>(out));
  return cudaGetLastError();
}

#define GQ_INSTANTIATE(T)                                                                                  \
  template cudaError_t launch_gemv<T>(const GemvArgs&, DType, int, int64_t, cudaStream_t);                  \
  template cudaError_t launch_dequant<T>(const uint8_t*, int64_t, int64_t, int64_t, int, const void*, int, \
                                         void*, DType, cudaStream_t);

}  // namespace gq
