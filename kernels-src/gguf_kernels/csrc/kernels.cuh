// Kernel templates shared by every type: dequantize / get_rows, and the small-M matmul
// (dense and MoE). Each type_*.cu instantiates them for one ggml type.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "cp_async.cuh"
#include "ggml_blocks.cuh"
#include "launch.h"

namespace gq {

// ---- activation / output element helpers -----------------------------------------------------

// The 16-bit element types: T2, the packed pair; rn / rn2, float -> one / a pair, round to
// nearest; CODE_EXP, the exponent byte under which a byte code c in the mantissa reads as
// BASE + c exactly (bf16 0x43xx = 128 + c for c < 128; fp16 0x64xx = 1024 + c for c < 256),
// hence CODE_BITS.
template <typename XT> struct Half16;
template <> struct Half16<__nv_bfloat16> {
  using T2 = __nv_bfloat162;
  static constexpr uint32_t CODE_EXP = 0x43u;
  static constexpr int CODE_BITS = 7;
  static __device__ __forceinline__ __nv_bfloat16 rn(float f) { return __float2bfloat16_rn(f); }
  static __device__ __forceinline__ T2 rn2(float lo, float hi) { return __floats2bfloat162_rn(lo, hi); }
};
template <> struct Half16<__half> {
  using T2 = __half2;
  static constexpr uint32_t CODE_EXP = 0x64u;
  static constexpr int CODE_BITS = 8;
  static __device__ __forceinline__ __half rn(float f) { return __float2half_rn(f); }
  static __device__ __forceinline__ T2 rn2(float lo, float hi) { return __floats2half2_rn(lo, hi); }
};

// Two floats -> the 32-bit word of an XT pair (lo in the low half).
template <typename XT>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  typename Half16<XT>::T2 h = Half16<XT>::rn2(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}

// Four elements of x / out at a time (8- or 16-byte aligned), converted from / to fp32.
template <typename XT> struct XIO {  // bf16, fp16
  static __device__ __forceinline__ void load4(const XT* p, float (&f)[4]) {
    const uint2 r = __ldg(reinterpret_cast<const uint2*>(p));
    if constexpr (std::is_same<XT, __nv_bfloat16>::value) {
      f[0] = __uint_as_float(r.x << 16); f[1] = __uint_as_float(r.x & 0xFFFF0000u);
      f[2] = __uint_as_float(r.y << 16); f[3] = __uint_as_float(r.y & 0xFFFF0000u);
    } else {
      const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&r.x));
      const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&r.y));
      f[0] = a.x; f[1] = a.y; f[2] = b.x; f[3] = b.y;
    }
  }
  static __device__ __forceinline__ void store4(XT* p, const float* f) {
    uint2 r; r.x = pack2<XT>(f[0], f[1]); r.y = pack2<XT>(f[2], f[3]);
    *reinterpret_cast<uint2*>(p) = r;
  }
  static __device__ __forceinline__ XT cvt(float f) { return Half16<XT>::rn(f); }
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

// A row's bytes [src, src + bytes) copied as the 16-byte pieces of the aligned span around them,
// so that in shared memory each block keeps its file offset modulo 16 (rows need not be a
// multiple of 16 bytes): rounded_pieces() pieces, piece pc to dst + 16 pc.
__device__ __forceinline__ int rounded_pieces(uintptr_t src, uint32_t bytes) {
  return (int)((((uint32_t)src & 15u) + bytes + 15u) >> 4);
}
// A weight matrix may end off a 16-byte boundary (MXFP4's 17-byte blocks, an odd number a row), and
// its last piece must not be read past that end (a zero-filling cp.async still reads 16 bytes to
// compute-sanitizer's memcheck). TAIL (the last chunk of a CTA holding the last row, where the matrix
// so ends: tail_of) copies a piece running past `end` byte by byte up to it, the bytes landing before
// the barrier that publishes the stage, as cp.async's do. Every other copy keeps the unchecked form: a
// check on every piece cost 2-10% at M = 1..32 (session 32). The byte loop stays inline: calling the fast
// kernels' out-of-line copy16_bytes here doubled gemv_kernel's SASS (MXFP4 M = 1: 1816 -> 3776, session 35).
template <bool TAIL>
__device__ __forceinline__ void cp_async_piece(uint8_t* dst, uintptr_t src, int pc, uintptr_t end) {
  const uintptr_t p = (src & ~(uintptr_t)15) + 16 * pc;
  if (!TAIL || p + 16 <= end) {
    cp_async16(dst + 16 * pc, reinterpret_cast<const void*>(p));
  } else {
#pragma unroll 1
    for (uintptr_t q = p; q < end; ++q) dst[16 * pc + (q - p)] = *reinterpret_cast<const uint8_t*>(q);
  }
}
// Whether a CTA whose rows reach row `last_row` (0-based, clamped to N - 1) copies the tail of a matrix
// ending at `end` off a 16-byte boundary.
__device__ __forceinline__ bool tail_of(int last_row, int N, uintptr_t end) {
  return last_row >= N - 1 && (end & 15u) != 0;
}

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
  const uintptr_t wend = reinterpret_cast<uintptr_t>(a.w + expert * a.expert_bytes + (int64_t)N * a.row_bytes);
  const bool tail = tail_of(n0 + R - 1, N, wend);

  const int nunits = (K + 63) >> 6;
  const int niters = (K + G::CE - 1) / G::CE;

  auto issue = [&](int it) {
    if (it < niters) {
      const int stage = it % S;
      const int64_t bytes = min((int64_t)CB, a.row_bytes - (int64_t)it * CB);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const uintptr_t s = reinterpret_cast<uintptr_t>(rowp[r] + (int64_t)it * CB);
        const int pieces = rounded_pieces(s, (uint32_t)bytes);
        const auto copy = [&](auto tc) {  // TAIL once a chunk, uniform over the CTA
          for (int pc = lane; pc < pieces; pc += 32) cp_async_piece<tc>(smem[warp][stage][r], s, pc, wend);
        };
        if (tail && it == niters - 1) copy(std::true_type{});
        else copy(std::false_type{});
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

// ---- small-M matmul on tensor cores (bf16 / fp16 activations) ---------------------------------
// A warp owns a 16-row tile of W and a share of the K chunks (W warps per CTA split K; their
// partial sums are added through shared memory at the end). Lane (g = lane/4, c = lane%4)
// decodes part c of each 64-element unit for rows g and g+8 (decode<T>: v[4q+i] = element
// 16q + 4c + i), packs it to bf16/fp16 pairs and feeds mma.m16n8k16 once per q:
//   A: a0 = row g    {16q+4c, 16q+4c+1}, a2 = row g    {16q+4c+2, 16q+4c+3}
//      a1 = row g+8  {16q+4c, 16q+4c+1}, a3 = row g+8  {16q+4c+2, 16q+4c+3}
//   B: b0 = token g  {16q+4c, 16q+4c+1}, b1 = token g  {16q+4c+2, 16q+4c+3}
// i.e. virtual k slots (2c, 2c+1, 2c+8, 2c+9) of step q hold actual elements 16q+4c+{0..3}
// in both operands, so each step sums exactly the 16 elements of group q. B is 4 consecutive
// activations (one 8-byte load), no shuffles. All lanes of a warp work on the same unit, so
// the per-type scale decoding is uniform (no divergence).

// d += A * B on one m16n8k16 tile, XT inputs, fp32 accumulators.
#define GQ_MMA_M16N8K16(AB)                                                                                   \
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." AB "." AB ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, " \
               "{%0,%1,%2,%3};\n"                                                                         \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                            \
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1))
template <typename XT>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same<XT, __nv_bfloat16>::value) GQ_MMA_M16N8K16("bf16");
  else GQ_MMA_M16N8K16("f16");
}
#undef GQ_MMA_M16N8K16

// Four byte codes (each < 2^BITS) -> two pairs of s*code + o in XT, for the A fragments:
// lo = elements {0, 1}, hi = elements {2, 3}. The code is placed in the mantissa under the
// fixed exponent Half16<XT>::CODE_EXP, the base is subtracted exactly, then one fused
// multiply-add applies the scale.
template <typename XT, int BITS> struct PairConv {
  using H = Half16<XT>;
  using T2 = typename H::T2;
  static constexpr bool OK = BITS <= H::CODE_BITS;
  static __device__ __forceinline__ uint32_t bcast(float v) { return pack2<XT>(v, v); }
  static __device__ __forceinline__ void run(uint32_t c, uint32_t s2, uint32_t o2, uint32_t& lo, uint32_t& hi) {
    constexpr uint32_t E = H::CODE_EXP * 0x01010101u;
    const uint32_t vlo = __byte_perm(c, E, 0x4140), vhi = __byte_perm(c, E, 0x4342);
    const uint32_t base = H::CODE_EXP * 0x01000100u;  // {BASE, BASE}
    const T2 S = *reinterpret_cast<const T2*>(&s2), O = *reinterpret_cast<const T2*>(&o2);
    const T2 B = *reinterpret_cast<const T2*>(&base);
    T2 rl = __hfma2(__hsub2(*reinterpret_cast<const T2*>(&vlo), B), S, O);
    T2 rh = __hfma2(__hsub2(*reinterpret_cast<const T2*>(&vhi), B), S, O);
    lo = *reinterpret_cast<uint32_t*>(&rl);
    hi = *reinterpret_cast<uint32_t*>(&rh);
  }
};

// Scales/offsets of the four groups as broadcast pairs (converted once per distinct value).
template <int T, typename XT>
__device__ __forceinline__ void affine_pairs(const Codes& r, uint32_t (&s2)[4], uint32_t (&o2)[4]) {
  using PC = PairConv<XT, CodeBits<T>::BITS>;
  if constexpr (CodeBits<T>::PAIRED) {
    s2[0] = s2[1] = PC::bcast(r.s[0]);
    o2[0] = o2[1] = PC::bcast(r.o[0]);
    s2[2] = s2[3] = PC::bcast(r.s[2]);
    o2[2] = o2[3] = PC::bcast(r.o[2]);
  } else {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      s2[q] = PC::bcast(r.s[q]);
      o2[q] = PC::bcast(r.o[q]);
    }
  }
}

// The A fragments of one 64-element unit (unit uu of the 256-element chunks at pg and pg8, rows g
// and g + 8 of a 16-row tile): a[q] = {a0, a1, a2, a3} of m16n8k16 tile q, whose k slots 2c, 2c + 1
// hold elements 16q + 4c + {0, 1} and slots 2c + 8, 2c + 9 elements 16q + 4c + {2, 3}. B must follow
// the same order: x elements 16q + 4c .. 16q + 4c + 3 of its token, one 8-byte word. When !full
// (K % 64 == 32), tiles q >= 2 are zero.
template <int T, typename XT>
__device__ __forceinline__ void unit_frags(const uint8_t* pg, const uint8_t* pg8, int uu, int c, bool full,
                                           uint32_t (&a)[4][4]) {
  if constexpr (T == MXFP4) {
    // block_mxfp4 { uint8_t e; uint8_t qs[16]; }: x = e2m1(q) * 2^(e-127). The codes straight to XT
    // pairs (e2m1_pair_mb, ~5 instructions a pair against the table's ~11), times 2^(bias-1), which
    // makes them e2m1's values exactly, then times the block's 2^(e-127) (two products: one scale of
    // 2^(e-127+bias-1) would overflow XT for large e). Lane c's word, bytes reordered to {0, 2, 1, 3},
    // puts elements 4c + {0, 1} 16 bits apart (tile 2h's a0 / a1), 4c + {2, 3} (a2 / a3), and their
    // high nibbles, elements 16 + 4c + i, for tile 2h + 1.
    using T2 = typename Half16<XT>::T2;
    constexpr int MB = std::is_same<XT, __half>::value ? 10 : 7;
    constexpr uint32_t ONE = std::is_same<XT, __half>::value ? 0x74007400u : 0x7E807E80u;  // 2^14, 2^126
    auto fix = [&](uint32_t v, uint32_t s2) {
      T2 r = __hmul2(__hmul2(*reinterpret_cast<const T2*>(&v), *reinterpret_cast<const T2*>(&ONE)),
                     *reinterpret_cast<const T2*>(&s2));
      return *reinterpret_cast<uint32_t*>(&r);
    };
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        if (h == 1 && !full) {
          a[2][r] = a[2][r + 2] = a[3][r] = a[3][r + 2] = 0u;
          continue;
        }
        const uint8_t* b = (r ? pg8 : pg) + (2 * uu + h) * Traits<MXFP4>::BYTES;
        const uint32_t w = perm(u32_a1(b + 1 + 4 * c), 0u, 0x3120), s2 = pack2<XT>(e8m0(b[0]), e8m0(b[0]));
        a[2 * h][r] = fix(e2m1_pair_mb<MB, 0>(w), s2);
        a[2 * h][r + 2] = fix(e2m1_pair_mb<MB, 2>(w), s2);
        a[2 * h + 1][r] = fix(e2m1_pair_mb<MB, 1>(w), s2);
        a[2 * h + 1][r + 2] = fix(e2m1_pair_mb<MB, 3>(w), s2);
      }
    }
  } else if constexpr ((T == IQ4_XS || T == IQ4_NL) && std::is_same<XT, __nv_bfloat16>::value) {
    // kvalues_iq4nl need 8 bits, past bf16's code trick (PairConv); their bf16 pairs come from two byte tables
    // (iq4_bf16_pairs), times the sub-block's scale as a bf16 pair: two roundings where the fp32 route has one
    // (within bf16's, as PairConv's scale and offset): the stage loop 1923 -> 1483 instructions (IQ4_XS, NT = 4),
    // Q4_K's 1487. An IQ4_NL unit is two blocks, the second absent where !full (its tiles q >= 2 are not multiplied).
    const uint32_t z = iq4_bf16_opaque_zero();
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const uint8_t* row = r ? pg8 : pg;
      uint32_t w[2];
      float d[2];
      if constexpr (T == IQ4_XS) {
        iq4xs_unit(row, uu, c, w[0], w[1], d[0], d[1]);
      } else {
        w[0] = iq4nl_word(row + 2 * uu * Traits<IQ4_NL>::BYTES, c, d[0]);
        if (full) {
          w[1] = iq4nl_word(row + (2 * uu + 1) * Traits<IQ4_NL>::BYTES, c, d[1]);
        } else {
          w[1] = 0u;
          d[1] = 0.f;
        }
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        uint32_t v[4];
        iq4_bf16_pairs(w[h], z, v);
        const uint32_t s2 = pack2<XT>(d[h], d[h]);
        const __nv_bfloat162 S = *reinterpret_cast<const __nv_bfloat162*>(&s2);
#pragma unroll
        for (int j = 0; j < 4; ++j) {  // v[j] -> tile 2h + (j & 1), slot r (+ 2 for elements 4c + 2, 4c + 3)
          const __nv_bfloat162 p = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&v[j]), S);
          a[2 * h + (j & 1)][r + (j & 2)] = *reinterpret_cast<const uint32_t*>(&p);
        }
      }
    }
  } else if constexpr (PairConv<XT, CodeBits<T>::BITS>::OK) {  // codes straight to bf16/fp16 pairs
    Codes cg, cg8;
    decode_codes<T>(pg, uu, c, full, cg);
    decode_codes<T>(pg8, uu, c, full, cg8);
    uint32_t sg[4], og[4], sg8[4], og8[4];
    affine_pairs<T, XT>(cg, sg, og);
    affine_pairs<T, XT>(cg8, sg8, og8);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      PairConv<XT, CodeBits<T>::BITS>::run(cg.c[q], sg[q], og[q], a[q][0], a[q][2]);
      PairConv<XT, CodeBits<T>::BITS>::run(cg8.c[q], sg8[q], og8[q], a[q][1], a[q][3]);
    }
  } else {  // 8-bit codes under bf16: through fp32
    float vg[16], vg8[16];
    decode<T>(pg, uu, c, full, vg);
    decode<T>(pg8, uu, c, full, vg8);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      a[q][0] = pack2<XT>(vg[4 * q], vg[4 * q + 1]);
      a[q][1] = pack2<XT>(vg8[4 * q], vg8[4 * q + 1]);
      a[q][2] = pack2<XT>(vg[4 * q + 2], vg[4 * q + 3]);
      a[q][3] = pack2<XT>(vg8[4 * q + 2], vg8[4 * q + 3]);
    }
  }
}

// One unit on the tensor cores: its A fragments (unit_frags) times token group t's B fragment
// b(t, q) of each tile q that holds elements (q < 2 or full), for t < groups, into acc[t][q % QN].
template <int T, typename XT, int NT, int QN, class BF>
__device__ __forceinline__ void unit_mma(const uint8_t* pg, const uint8_t* pg8, int uu, int c, bool full, int groups,
                                         BF&& b, float (&acc)[NT][QN][4]) {
  uint32_t af[4][4];
  unit_frags<T, XT>(pg, pg8, uu, c, full, af);
#pragma unroll
  for (int q = 0; q < 4; ++q)
    if (q < 2 || full)
#pragma unroll
      for (int t = 0; t < NT; ++t)
        if (t < groups) {
          const uint2 bv = b(t, q);
          mma_m16n8k16<XT>(acc[t][q % QN], af[q][0], af[q][1], af[q][2], af[q][3], bv.x, bv.y);
        }
}

template <int T>
struct MmaGeom {
  static constexpr int CE = 256;                                       // elements per chunk (4 units)
  static constexpr int CB = CE / Traits<T>::BLOCK * Traits<T>::BYTES;  // bytes per row per chunk
  static constexpr int ROWBUF = (CB + 15) / 16 * 16 + 16;              // aligned superset
  static constexpr int PMAX = ROWBUF / 16;                             // 16-byte pieces per row, at most
  static constexpr int S = 3;                                          // pipeline stages
  static constexpr int WARP_BYTES = S * 16 * ROWBUF;
};

template <int T, int NT, typename XT>
__global__ void __launch_bounds__(512) gemv_mma_kernel(const GemvArgs a) {
  using G = MmaGeom<T>;
  constexpr int S = G::S, CB = G::CB, ROWBUF = G::ROWBUF, PMAX = G::PMAX;
  constexpr bool BLOCK32 = Traits<T>::BLOCK == 32;
  constexpr int MT = 8 * NT;
  extern __shared__ __align__(16) uint8_t dsmem[];

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, W = blockDim.x >> 5;
  const int g = lane >> 2, c = lane & 3;
  const int N = a.N, K = a.K;
  const int n0 = blockIdx.y * 16;
  uint8_t* buf = dsmem + warp * G::WARP_BYTES;

  int M = 0;
  int xrow[NT], orow[2 * NT];  // xrow: token g (+8) of this lane; orow: tokens 2c, 2c+1 (+8)
  int64_t expert = 0;
  if (a.mode == GEMV_DENSE) {
    const int m0 = blockIdx.x * MT;
    M = min(MT, a.M - m0);
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      xrow[t] = m0 + 8 * t + g;
      orow[2 * t] = m0 + 8 * t + 2 * c;
      orow[2 * t + 1] = m0 + 8 * t + 2 * c + 1;
    }
  } else if (a.mode == GEMV_PAIRS) {
    const int pair = blockIdx.x;
    M = 1;
    expert = load_id(a.ids, a.ids64, pair);
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      xrow[t] = pair / a.x_div;
      orow[2 * t] = pair;
      orow[2 * t + 1] = pair;
    }
  } else {
    const int4 ch = a.chunks[blockIdx.x];
    M = ch.z;
    if (M <= 0) return;
    expert = ch.x;
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const int j = 8 * t + g, j0 = 8 * t + 2 * c;
      xrow[t] = j < M ? a.sorted[ch.y + j] / a.x_div : 0;
      orow[2 * t] = j0 < M ? a.sorted[ch.y + j0] : 0;
      orow[2 * t + 1] = j0 + 1 < M ? a.sorted[ch.y + j0 + 1] : 0;
    }
  }
  XT* out = reinterpret_cast<XT*>(a.out);
  if (a.mode != GEMV_DENSE && (expert < 0 || expert >= a.n_experts)) {
    if (warp == 0) {
#pragma unroll
      for (int t = 0; t < NT; ++t)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            const int tok = 8 * t + 2 * c + j, row = n0 + g + 8 * h;
            if (tok < M && row < N) out[(int64_t)orow[2 * t + j] * a.out_stride + row] = XIO<XT>::cvt(0.f);
          }
    }
    return;
  }

  const uint8_t* wbase = a.w + expert * a.expert_bytes;
  const uintptr_t wend = reinterpret_cast<uintptr_t>(wbase + (int64_t)N * a.row_bytes);
  const bool tail = tail_of(n0 + 15, N, wend);
  const uint8_t* rg = wbase + (int64_t)min(n0 + g, N - 1) * a.row_bytes;
  const uint8_t* rg8 = wbase + (int64_t)min(n0 + g + 8, N - 1) * a.row_bytes;
  const XT* xb = reinterpret_cast<const XT*>(a.x);
  const XT* xp[NT];
  bool xok[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    xok[t] = 8 * t + g < M;
    xp[t] = xb + (int64_t)(xok[t] ? xrow[t] : 0) * a.x_stride + 4 * c;
  }

  const int nunits = (K + 63) >> 6;
  const int nchunks = (K + G::CE - 1) / G::CE;
  const int mychunks = nchunks > warp ? (nchunks - warp + W - 1) / W : 0;

  const int rb32 = (int)a.row_bytes;  // rows are < 2 GiB
  constexpr int NSLOT = (16 * PMAX + 31) / 32;
  auto issue = [&](int i) {  // local chunk i of this warp -> stage i % S
    if (i < mychunks) {
      const int64_t ch = warp + (int64_t)i * W;
      const uint32_t bytes = (uint32_t)min((int64_t)CB, a.row_bytes - ch * CB);
      uint8_t* sb = buf + (i % S) * 16 * ROWBUF;
      const auto copy = [&](auto tc) {  // TAIL once a chunk, uniform over the CTA
#pragma unroll
        for (int j = 0; j < NSLOT; ++j) {
          const int idx = lane + 32 * j;
          const int r = idx / PMAX, pc = idx - r * PMAX;
          if (r < 16) {
            const uintptr_t s = reinterpret_cast<uintptr_t>(wbase + ch * CB) + (uintptr_t)((int64_t)min(n0 + r, N - 1) * (int64_t)rb32);
            if (pc < rounded_pieces(s, bytes)) cp_async_piece<tc>(sb + r * ROWBUF, s, pc, wend);
          }
        }
      };
      if (tail && ch == nchunks - 1) copy(std::true_type{});
      else copy(std::false_type{});
    }
    cp_async_commit();
  };

  float acc[NT][4][4];
#pragma unroll
  for (int t = 0; t < NT; ++t)
#pragma unroll
    for (int q = 0; q < 4; ++q)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[t][q][i] = 0.f;

#pragma unroll
  for (int s = 0; s < S - 1; ++s) issue(s);

  for (int i = 0; i < mychunks; ++i) {
    cp_async_wait<S - 2>();
    __syncwarp();
    const int64_t ch = warp + (int64_t)i * W;
    const uint8_t* sb = buf + (i % S) * 16 * ROWBUF;
    const uint8_t* pg = sb + g * ROWBUF + (reinterpret_cast<uintptr_t>(rg + ch * CB) & 15);
    const uint8_t* pg8 = sb + (g + 8) * ROWBUF + (reinterpret_cast<uintptr_t>(rg8 + ch * CB) & 15);
#pragma unroll
    for (int uu = 0; uu < 4; ++uu) {
      const int U = (int)ch * 4 + uu;
      if (U < nunits) {
        const bool full = !BLOCK32 || U * 64 + 64 <= K;
        uint2 xv[NT][4];
#pragma unroll
        for (int t = 0; t < NT; ++t)
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            xv[t][q] = make_uint2(0u, 0u);
            if (xok[t] && (q < 2 || full))
              xv[t][q] = __ldg(reinterpret_cast<const uint2*>(xp[t] + U * 64 + 16 * q));
          }
        unit_mma<T, XT, NT>(pg, pg8, uu, c, full, NT, [&](int t, int q) { return xv[t][q]; }, acc);
      }
    }
    __syncwarp();
    issue(i + S - 1);
  }
  cp_async_wait<0>();

  // Sum the q chains, then the warps' K shares through shared memory.
  float r[NT][4];
#pragma unroll
  for (int t = 0; t < NT; ++t)
#pragma unroll
    for (int i = 0; i < 4; ++i) r[t][i] = (acc[t][0][i] + acc[t][1][i]) + (acc[t][2][i] + acc[t][3][i]);
  __syncthreads();
  float* red = reinterpret_cast<float*>(dsmem);
  if (warp > 0) {
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
      for (int i = 0; i < 4; ++i) red[((warp - 1) * NT * 4 + t * 4 + i) * 32 + lane] = r[t][i];
  }
  __syncthreads();
  if (warp == 0) {
    for (int w = 1; w < W; ++w)
#pragma unroll
      for (int t = 0; t < NT; ++t)
#pragma unroll
        for (int i = 0; i < 4; ++i) r[t][i] += red[((w - 1) * NT * 4 + t * 4 + i) * 32 + lane];
    // D fragment: r[t][0] = (row g, token 2c), r[t][1] = (g, 2c+1), r[t][2] = (g+8, 2c), r[t][3] = (g+8, 2c+1)
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int tok = 8 * t + 2 * c + (i & 1), row = n0 + g + 8 * (i >> 1);
        if (tok < M && row < N) out[(int64_t)orow[2 * t + (i & 1)] * a.out_stride + row] = XIO<XT>::cvt(r[t][i]);
      }
  }
}

// ---- launchers -------------------------------------------------------------------------------

// Returns f(Tag<XT>{}) for the element type XT that t names.
template <typename F>
cudaError_t with_xt(DType t, F&& f) {
  if (t == DType::BF16) return f(Tag<__nv_bfloat16>{});
  if (t == DType::F16) return f(Tag<__half>{});
  return f(Tag<float>{});
}

template <int T>
cudaError_t launch_gemv(const GemvArgs& a, DType xt, int mt, int64_t grid_x, cudaStream_t stream) {
  if (grid_x <= 0 || a.N <= 0) return cudaSuccess;
  const dim3 grid((unsigned)grid_x, (unsigned)((a.N + GEMV_ROWS_PER_CTA - 1) / GEMV_ROWS_PER_CTA));
  const dim3 block(256);
  const auto run = [&](auto mt_c) {  // MT = mt_c's value
    return with_xt(xt, [&](auto tag) {
      gemv_kernel<T, decltype(mt_c)::value, typename decltype(tag)::type><<<grid, block, 0, stream>>>(a);
      return cudaGetLastError();
    });
  };
  return mt == 1 ? run(std::integral_constant<int, 1>{}) : run(std::integral_constant<int, GEMV_MT>{});
}

template <int T, int NT, typename XT>
cudaError_t launch_mma_impl(const GemvArgs& a, int64_t grid_x, cudaStream_t stream) {
  using G = MmaGeom<T>;
  const int sms = num_sms();
  const int64_t tiles = (int64_t)((a.N + 15) / 16) * grid_x;
  const int nchunks = (a.K + G::CE - 1) / G::CE;
  constexpr size_t kMaxSmem = 160 * 1024;  // the most W's warps take, and the limit raised for them
  int W = 4;
  while (W < 16 && 2 * W <= nchunks && tiles * W < (int64_t)sms * 16 && 2 * W * G::WARP_BYTES <= kMaxSmem) W *= 2;
  while (W > 1 && W > nchunks) W /= 2;
  const size_t smem = (size_t)W * G::WARP_BYTES;
  static std::atomic<uint64_t> attrs{0};  // devices whose limit is raised
  if (smem > 48 * 1024) {
    const cudaError_t e = smem_attrs_once(attrs, gemv_mma_kernel<T, NT, XT>, kMaxSmem);
    if (e != cudaSuccess) return e;
  }
  const dim3 grid((unsigned)grid_x, (unsigned)((a.N + 15) / 16));
  gemv_mma_kernel<T, NT, XT><<<grid, dim3(32 * W), smem, stream>>>(a);
  return cudaGetLastError();
}

template <int T>
cudaError_t launch_gemv_mma(const GemvArgs& a, DType xt, int mt, int64_t grid_x, cudaStream_t stream) {
  if (grid_x <= 0 || a.N <= 0) return cudaSuccess;
  return with_xt(xt, [&](auto tag) {
    using XT = typename decltype(tag)::type;
    if constexpr (std::is_same<XT, float>::value) return cudaErrorInvalidValue;  // bf16 / fp16 only
    else return mt <= 8 ? launch_mma_impl<T, 1, XT>(a, grid_x, stream) : launch_mma_impl<T, 2, XT>(a, grid_x, stream);
  });
}

template <int T>
cudaError_t launch_dequant(const uint8_t* w, int64_t row_bytes, int64_t rows_out, int64_t rows_src, int K,
                           const void* ids, int ids64, void* out, DType ot, cudaStream_t stream) {
  const int64_t total = rows_out * (int64_t)((K + 63) / 64) * 4;
  if (total <= 0) return cudaSuccess;
  const int64_t blocks = min((total + 255) / 256, (int64_t)1 << 30);
  const dim3 grid((unsigned)blocks), block(256);
  return with_xt(ot, [&](auto tag) {
    using OT = typename decltype(tag)::type;
    dequant_kernel<T, OT><<<grid, block, 0, stream>>>(w, row_bytes, rows_out, rows_src, K, ids, ids64,
                                                      reinterpret_cast<OT*>(out));
    return cudaGetLastError();
  });
}

#define GQ_INSTANTIATE(T)                                                                                  \
  template cudaError_t launch_gemv<T>(const GemvArgs&, DType, int, int64_t, cudaStream_t);                  \
  template cudaError_t launch_gemv_mma<T>(const GemvArgs&, DType, int, int64_t, cudaStream_t);              \
  template cudaError_t launch_dequant<T>(const uint8_t*, int64_t, int64_t, int64_t, int, const void*, int, \
                                         void*, DType, cudaStream_t);

}  // namespace gq
