// The quantize kernel, templated on the ggml type and the input element type; instantiated in
// quantize_k.cu (256-element types) and quantize_32.cu (32-element types).
//
// A CTA of 256 threads quantizes a run of consecutive blocks (the input and output are flat:
// block g reads elements [g*BLOCK, (g+1)*BLOCK) and writes bytes [g*BYTES, (g+1)*BYTES)).
// 32-element types: one thread per block. 256-element types: S = 8 or 16 threads per super-block,
// thread j owning sub-block j (N = 32 or 16 elements, in registers): it runs the scale search,
// publishes its scale (and min) to shared memory, lane 0 of the group computes the super-block
// scales, every lane writes its final codes to shared memory and then packs a strided share of the
// output bytes. The CTA's output is staged in shared memory and written with 16-byte stores.
// All block math is in quantize_blocks.cuh (host+device, checked on the CPU against libggml).
// __launch_bounds__(256, 2) caps registers at 128 for the searching types: without it ptxas picks
// 64-80 registers for Q3_K/Q6_K and spills around the division slow path; with it nothing spills
// (Q4_K/Q5_K use 123).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "quantize_blocks.cuh"
#include "quantize_launch.cuh"

namespace gq {
namespace qz {

constexpr int QUANT_THREADS = 256;

template <typename In> struct InTraits;
template <> struct InTraits<float> { static constexpr int PER_VEC = 4; };
template <> struct InTraits<__nv_bfloat16> { static constexpr int PER_VEC = 8; };
template <> struct InTraits<__half> { static constexpr int PER_VEC = 8; };

// N consecutive elements (16-byte aligned) -> fp32 (exact for every input type).
template <int N, typename In>
__device__ __forceinline__ void load_sub(const In* __restrict__ p, float* v) {
  const uint4* q = reinterpret_cast<const uint4*>(p);
  constexpr int PV = InTraits<In>::PER_VEC;
#pragma unroll
  for (int k = 0; k < N / PV; ++k) {
    const uint4 u = __ldg(q + k);
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
    if constexpr (PV == 4) {
#pragma unroll
      for (int i = 0; i < 4; ++i) v[4 * k + i] = __uint_as_float(w[i]);
    } else if constexpr (std::is_same<In, __nv_bfloat16>::value) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        v[8 * k + 2 * i] = __uint_as_float(w[i] << 16);
        v[8 * k + 2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
      }
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        v[8 * k + 2 * i] = __half2float(__ushort_as_half((unsigned short)(w[i] & 0xFFFFu)));
        v[8 * k + 2 * i + 1] = __half2float(__ushort_as_half((unsigned short)(w[i] >> 16)));
      }
    }
  }
}

template <int T> struct Staging {  // shared memory of the 256-element types
  using O = QOps<T>;
  static constexpr int NB = QUANT_THREADS / O::S;
  float v[NB][2][O::S];
  typename O::Super sp[NB];
  uint8_t codes[NB][256];
};

// CTAs per SM that __launch_bounds__ asks for: the plain 32-element types are memory-bound and fit
// in 64 registers (4 CTAs); the searching types get up to 128 registers (2 CTAs).
constexpr int quant_min_ctas(int t) {
  return (t == Q4_0 || t == Q4_1 || t == Q5_0 || t == Q5_1 || t == Q8_0) ? 4 : 2;
}

template <int T, typename In>
__global__ void __launch_bounds__(QUANT_THREADS, quant_min_ctas(T))
    quantize_kernel(const In* __restrict__ x, uint8_t* __restrict__ out, int64_t nblocks) {
  using O = QOps<T>;
  constexpr int S = O::S, N = O::N, BYTES = O::BYTES, NB = QUANT_THREADS / S;
  constexpr bool IQ4 = T == IQ4_NL || T == IQ4_XS;
  __shared__ __align__(16) uint8_t stage[NB * BYTES];
  __shared__ int8_t tval[IQ4 ? IQ4_KEYS : 1];
  __shared__ uint8_t tidx[IQ4 ? IQ4_KEYS : 1];
  if constexpr (IQ4) {
    for (int e = threadIdx.x; e < IQ4_KEYS; e += QUANT_THREADS) {
      const int i = iq4_table_index(e);
      tidx[e] = (uint8_t)i;
      tval[e] = (int8_t)iq4_kvalue(i);
    }
    __syncthreads();
  }
  const Tables tab{tval, tidx};
  const int lb = threadIdx.x / S, j = threadIdx.x % S;
  const int64_t b0 = (int64_t)blockIdx.x * NB;
  const int64_t g = b0 + lb;
  float xv[N];
  if (g < nblocks) {
    load_sub<N>(x + g * O::BLOCK + j * N, xv);
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) xv[i] = 0.f;
  }
  uint8_t* ob = stage + lb * BYTES;
  if constexpr (S == 1) {
    O::block(xv, ob, tab);
  } else {
    __shared__ Staging<T> st;
    const auto s = O::search(xv, tab);
    st.v[lb][0][j] = O::v0(s);
    st.v[lb][1][j] = O::v1(s);
    __syncwarp();
    if (j == 0) {
      float v0[S], v1[S];
#pragma unroll
      for (int k = 0; k < S; ++k) {
        v0[k] = st.v[lb][0][k];
        v1[k] = st.v[lb][1][k];
      }
      typename O::Super sp;
      O::super(v0, v1, sp);
      st.sp[lb] = sp;
    }
    __syncwarp();
    O::codes(xv, j, s, st.sp[lb], st.codes[lb] + j * N, tab);
    __syncwarp();
    for (int b = j; b < BYTES; b += S) ob[b] = O::byte(b, st.codes[lb], st.sp[lb]);
  }
  __syncthreads();
  const int nvalid = (int)(nblocks - b0 < NB ? nblocks - b0 : NB);
  const int nbytes = nvalid * BYTES;
  uint8_t* dst = out + b0 * BYTES;  // 16-byte aligned: NB * BYTES is a multiple of 16
  const int nvec = nbytes / 16;
  for (int i = threadIdx.x; i < nvec; i += QUANT_THREADS)
    reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(stage)[i];
  for (int i = nvec * 16 + threadIdx.x; i < nbytes; i += QUANT_THREADS) dst[i] = stage[i];
}

template <int T>
cudaError_t launch_quantize_t(const void* x, QuantIn in, int64_t nblocks, uint8_t* out, cudaStream_t stream) {
  using O = QOps<T>;
  constexpr int NB = QUANT_THREADS / O::S;
  static_assert((NB * O::BYTES) % 16 == 0, "CTA output must keep 16-byte alignment");
  if (nblocks <= 0) return cudaSuccess;
  const int64_t grid = (nblocks + NB - 1) / NB;
  if (grid > 0x7FFFFFFF) return cudaErrorInvalidValue;
  const auto run = [&](auto tag) {
    using In = typename decltype(tag)::type;
    quantize_kernel<T, In><<<(unsigned)grid, QUANT_THREADS, 0, stream>>>(static_cast<const In*>(x), out, nblocks);
    return cudaGetLastError();
  };
  switch (in) {
    case QuantIn::F32: return run(Tag<float>{});
    case QuantIn::BF16: return run(Tag<__nv_bfloat16>{});
    case QuantIn::F16: return run(Tag<__half>{});
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace qz
}  // namespace gq
