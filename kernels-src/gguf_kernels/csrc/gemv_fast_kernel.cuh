// Device side of the fast small-M matmul (layout and decoders: gemv_fast.cuh): the copy and cluster
// helpers, the prep kernel and gemv_fast_kernel (v4). The stream kernel is in gemv_stream_kernel.cuh,
// the launch rules in gemv_fast_launch.cuh; each fast_*.cu instantiates them for one type.
#pragma once
#include <cooperative_groups.h>
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "cp_async.cuh"
#include "gemv_fast.cuh"
#include "launch.h"
#include "tensor_map.cuh"

namespace gq {
namespace fast {

// n (< 16) bytes from src, zeros after them: a piece a cp.async must not copy (cp16_part); out of line,
// as it is rare, so that the stage loops keep their size
inline __device__ __noinline__ void copy16_bytes(uint8_t* dst, const uint8_t* src, int n) {
#pragma unroll 1
  for (int i = 0; i < 16; ++i) dst[i] = i < n ? src[i] : 0;
}
// The 16-byte piece at row + off of a ragged row, holding n bytes of the row (any n): whole, zero-filled
// past them, or all zeros, reading nothing (`row`, inside the row, then stands in for the source). A
// partial piece running past `end`, the end of the weights (only the last row's, where they end off a
// 16-byte boundary), is copied byte by byte and zero-filled: compute-sanitizer's memcheck counts a
// zero-filling cp.async as a 16-byte read. Its bytes land before the barrier that publishes the stage.
__device__ __forceinline__ void cp16_part(void* smem, const uint8_t* row, int off, int n, uintptr_t end) {
  if (n >= 16) {
    cp_async16(smem, row + off);
  } else if (n <= 0 || reinterpret_cast<uintptr_t>(row + off) + 16 <= end) {
    cp_async16z(smem, row + (n > 0 ? off : 0), max(n, 0));
  } else {
    copy16_bytes(static_cast<uint8_t*>(smem), row + off, n);
  }
}
// The 16-byte piece at src holding n bytes of a row (any n): zero-filled past them, all zeros for n <= 0, with no
// branch (v146): src must lie inside the weights even then, as memcheck counts a zero-filling copy as a 16-byte read
__device__ __forceinline__ void cp16_clamped(void* smem, const uint8_t* src, int n) {
  cp_async16z(smem, src, min(max(n, 0), 16));
}
// Piece pc of a ragged slot: the slot's source src (any alignment) spans `span` bytes, nb (<= span) of them in the
// row; its pieces run from the 16-byte boundary below src, the bytes past the row's as zeros, and a piece past the
// span is not copied (gemv_stream_kernel's ragged MT = 8 and flat forms, v142 and v143).
__device__ __forceinline__ void cp16_slot_piece(uint8_t* slot, const uint8_t* src, int span, int nb, int pc,
                                                uintptr_t end) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(src);
  const int m = (int)(a & 15);
  if (pc < (m + span + 15) >> 4)
    cp16_part(slot + 16 * pc, reinterpret_cast<const uint8_t*>(a - m), 16 * pc, m + nb - 16 * pc, end);
}
__device__ __forceinline__ void wait_stages(int S) {  // S - 2 groups may stay in flight
  if (S >= 4) cp_async_wait<2>();
  else if (S == 3) cp_async_wait<1>();
  else cp_async_wait<0>();
}
// Thread block clusters (gemv_stream_kernel's K split, KS): this CTA's rank, its cluster and the
// clusters of the grid (1-D), a barrier over the cluster's threads, a store into rank 0's shared memory.
__device__ __forceinline__ uint32_t cluster_reg_rank() { uint32_t v; asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(v)); return v; }
__device__ __forceinline__ uint32_t cluster_reg_id() { uint32_t v; asm("mov.u32 %0, %%clusterid.x;" : "=r"(v)); return v; }
__device__ __forceinline__ uint32_t cluster_reg_size() { uint32_t v; asm("mov.u32 %0, %%cluster_nctarank;" : "=r"(v)); return v; }
__device__ __forceinline__ uint32_t cluster_reg_count() { uint32_t v; asm("mov.u32 %0, %%nclusterid.x;" : "=r"(v)); return v; }
__device__ __forceinline__ void cluster_arrive_relaxed() { asm volatile("barrier.cluster.arrive.relaxed;\n" ::: "memory"); }
__device__ __forceinline__ void cluster_wait_acquire() { asm volatile("barrier.cluster.wait.acquire;\n" ::: "memory"); }
// The K split's meeting (PTX ISA "mbarrier", "st.async"): rank 0 keeps one transaction barrier a warp; the
// same warp of every other rank stores its sums into rank 0's slots by st.async, which counts their bytes
// on that barrier, and leaves. Rank 0's warp waits for its own unit's bytes only (mbar_init_n with one arrival,
// before the cluster's first arrive; mbar_expect_bytes, mbar_wait_cluster: cp_async.cuh).
// v into rank 0's copy of `local` (16-byte aligned), its bytes counted on rank 0's copy of `bar`
__device__ __forceinline__ void st_async_rank0_v4(float* local, uint64_t* bar, const float (&v)[4]) {
  uint32_t r, b;
  asm volatile("mapa.shared::cluster.u32 %0, %1, 0;\n" : "=r"(r) : "r"((uint32_t)__cvta_generic_to_shared(local)));
  asm volatile("mapa.shared::cluster.u32 %0, %1, 0;\n" : "=r"(b) : "r"((uint32_t)__cvta_generic_to_shared(bar)));
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];\n" ::"r"(r),
               "r"(__float_as_uint(v[0])), "r"(__float_as_uint(v[1])), "r"(__float_as_uint(v[2])),
               "r"(__float_as_uint(v[3])), "r"(b)
               : "memory");
}
constexpr int kKsGridMaxZ = 8;  // the most slices of a K split over a plain grid
// The K split's meeting over a plain grid (a.gz; NOTES.md v55), a cooperative launch: ranks 1 .. Z - 1 of a
// unit store their 32 x 4 sums in their slots of `part` (a buffer of any content, one a call), the whole
// grid meets at the grid barrier (cooperative groups: the driver's own barrier word, fresh for every launch
// and graph replay, with the GPU-scope ordering of its fence and atomic), and rank 0 adds the slots in rank
// order (as rank 0 of a cluster does: the same sums, bit for bit). Every thread of the grid must call it.
__device__ __forceinline__ bool ks_meet_grid(float* part, int Z, int rank, int lane, bool has_unit, float (&acc)[4]) {
  float4* slot = reinterpret_cast<float4*>(part) + lane;  // rank r's: slot + r * 32
  if (has_unit && rank > 0) slot[rank * 32] = make_float4(acc[0], acc[1], acc[2], acc[3]);
  cooperative_groups::this_grid().sync();
  if (!has_unit || rank > 0) return false;
  float4 v[kKsGridMaxZ];  // every slot asked for before the first is added: one L2 round trip
#pragma unroll
  for (int r = 1; r < kKsGridMaxZ; ++r) {
    if (r < Z) v[r] = __ldcg(slot + r * 32);
  }
#pragma unroll
  for (int r = 1; r < kKsGridMaxZ; ++r) {
    if (r < Z) {
      acc[0] += v[r].x; acc[1] += v[r].y; acc[2] += v[r].z; acc[3] += v[r].w;
    }
  }
  return true;
}
// The grid's meeting where a warp reads several units (GU, NOTES.md v86): every rank, rank 0 too, stored each
// unit's sums in its slot of `part` at the unit's end; after the barrier rank 0's warps take their units' Z
// slots back (all asked for before the first is added: one L2 round trip) and add them in rank order, the sums
// of ks_meet_grid bit for bit.
__device__ __forceinline__ void ks_unit_sums(const float* part, int Z, int lane, float (&acc)[4]) {
  const float4* slot = reinterpret_cast<const float4*>(part) + lane;  // rank r's: slot + r * 32
  float4 v[kKsGridMaxZ];
#pragma unroll
  for (int r = 0; r < kKsGridMaxZ; ++r) {
    if (r < Z) v[r] = __ldcg(slot + r * 32);
  }
  acc[0] = v[0].x; acc[1] = v[0].y; acc[2] = v[0].z; acc[3] = v[0].w;
#pragma unroll
  for (int r = 1; r < kKsGridMaxZ; ++r) {
    if (r < Z) {
      acc[0] += v[r].x; acc[1] += v[r].y; acc[2] += v[r].z; acc[3] += v[r].w;
    }
  }
}
__device__ __forceinline__ void grid_dep_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void grid_dep_launch() { asm volatile("griddepcontrol.launch_dependents;\n" ::); }

__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma16816_z(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%10,%10,%10};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.f));
}

// d += a b, mma.m16n8k32 with s8 A and s8 (SB) or u8 B, int32 accumulators.
template <bool SB>
__device__ __forceinline__ void imma16832(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#define GQ_IMMA16832(BT) \
  "mma.sync.aligned.m16n8k32.row.col.s32.s8." BT ".s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
  if constexpr (SB)
    asm volatile(GQ_IMMA16832("s8") : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile(GQ_IMMA16832("u8") : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#undef GQ_IMMA16832
}
// A group's int8 products (fast_i8, v98): one m16n8k32 of A[0] (P) and A[1] (Q) against the activations' high
// bytes b0, b1 (dh) and low bytes b2, b3 (dl), in the fragment layout of m16n8k16's accumulators; the products are
// 256 dh + dl, exact in int32 (P + Q = kvalues, |kv| <= 127: |dh| <= 32 x 127 x 128, |dl| <= 32 x 127 x 255, each
// under 2^20, the sum under 2^28).
__device__ __forceinline__ void group_imma(int (&dh)[4], int (&dl)[4], const uint32_t (&A)[2][4],
                                           const uint32_t (&b)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) dh[i] = dl[i] = 0;
  imma16832<true>(dh, A[0], b[0], b[1]);
  imma16832<true>(dh, A[1], b[0], b[1]);
  imma16832<false>(dl, A[0], b[2], b[3]);
  imma16832<false>(dl, A[1], b[2], b[3]);
}
// What a group's products are kept as until their epilogue: int8 products stay integers (v105), so that the MT = 2,
// 4 stream kernels, which keep 2 of 4, and MoE's flat items, 1 of 4, convert only those (before: all four, by I2F).
template <int T>
using GroupD = std::conditional_t<fast_i8<T>(), int, float>;
__device__ __forceinline__ float group_f(float v) { return v; }
// I2F, rounded to float (the conversion pipe, a quarter rate, beside the ALU's work); `asm volatile` keeps ptxas
// from hoisting it (v98: hoisted conversions spilled 200-550 bytes).
__device__ __forceinline__ float group_f(int v) {
  float f;
  asm volatile("cvt.rn.f32.s32 %0, %1;" : "=f"(f) : "r"(v));
  return f;
}
// A group's int8 products as 256 dh + dl, each handed to f(i, D_i) as it is formed (the converting form's order:
// one product's conversion right after its sum).
template <class F>
__device__ __forceinline__ void group_imma_each(const uint32_t (&A)[2][4], const uint32_t (&b)[4], F&& f) {
  int dh[4], dl[4];
  group_imma(dh, dl, A, b);
#pragma unroll
  for (int i = 0; i < 4; ++i) f(i, dh[i] * 256 + dl[i]);
}
// One group's products D (fragment layout of m16n8k16's f32 accumulators) from its A fragments (L::chunk) and the
// lane's four B record words b: fp16, STEPS m16n8k16; I8, group_imma's, as floats (float D) or as kept (int D).
template <int T, bool I8 = fast_i8<T>()>
__device__ __forceinline__ void group_mma(float (&D)[4], const uint32_t (&A)[2][4], const uint32_t (&b)[4]) {
  if constexpr (I8) {
    group_imma_each(A, b, [&](int i, int v) { D[i] = group_f(v); });
  } else {
    mma16816_z(D, A[0], b[0], b[1]);
    if constexpr (FT<T>::STEPS == 2) mma16816(D, A[1], b[2], b[3]);
  }
}
template <int T, bool I8 = fast_i8<T>()>
__device__ __forceinline__ void group_mma(int (&D)[4], const uint32_t (&A)[2][4], const uint32_t (&b)[4]) {
  static_assert(I8, "integer products: fast_i8 types only");
  group_imma_each(A, b, [&](int i, int v) { D[i] = v; });
}

struct FastArgs {
  const uint8_t* w;
  int64_t row_bytes;
  int N, K, M;
  int spread;  // gemv_stream_kernel's dense M = 1 forms: a launch spread over every SM, its units dealt warp-major
               // (v120; here, in the padding before xb, so that no other member moves)
  const uint8_t* xb;  // prep: B records
  const uint8_t* xs;  // prep: sigma / beta / S records
  const void* x;      // the activations (gemv_stream_kernel makes its own records)
  void* out;
  int64_t out_stride;
  int out_bf16;
  int S;   // pipeline stages
  int split;  // gemv_stream_kernel: each CTA's stages split evenly over its warps (units cut between them);
              // its K split (KS): the warps that share a unit, each reading 1 / split of the slice
  int U;   // type chunks (FT<T>::CE elements) per stage: one row's bytes per stage are U * CB, contiguous
  int RS;  // shared-memory row stride (rs_bytes<T>(U))
  // MoE pairs (gemv_stream_kernel<..., true>): pair q multiplies x row q / x_div by expert ids[q] and
  // writes out row q; nx distinct x rows, each with its own records (local: the records of at most nx
  // rows, those of the CTA's own range of units)
  const void* ids;
  int ids64, n_experts, P, x_div, nx, local;
  int64_t expert_bytes, x_stride;
  // The K split over a plain grid (gemv_stream_kernel, KS; NOTES.md v53, v55): gz > 0 slices of K, CTA b
  // rank b % gz of the units of b / gz, meeting at a grid barrier (ks_meet_grid): part holds each unit's
  // gz x kKsSums floats (part_bytes, any content). gz = 0: over a cluster. Its slices: K (above) each where kx = gz,
  // else ranks from kx on K - CE (NOTES.md v90)
  int gz, kx;
  float* part;
  size_t part_bytes;
};

// Keeps the work behind t (reads, arithmetic) where it is, before griddepcontrol.wait: ptxas drops or sinks
// values that nothing uses there, so t feeds a store taken only if S < 0, which no launch passes, in one asm
// statement (the compiler cannot sink it into a branch; an empty asm pin does not hold it: NOTES.md, next steps, v64).
__device__ __forceinline__ void keep_before(uint64_t t, int S) {
  asm volatile("{\n .reg .pred p;\n setp.lt.s32 p, %1, 0;\n @p st.shared.u64 [%2], %0;\n}\n" ::"l"(t), "r"(S), "r"(0u) : "memory");
}
// One field of each 32 bytes of the launch's parameters read before the wait (with `more`, other values kept
// there): each launch's parameters are new to the constant cache, and a line first read after the wait
// (x_stride's, on the way to x's first load at MT > 1) is waited for there, where before the wait the miss can
// overlap the previous kernel's tail (NOTES.md v63).
__device__ __forceinline__ void touch_args(const FastArgs& a, uint64_t more = 0) {
  keep_before(reinterpret_cast<uintptr_t>(a.w) ^ reinterpret_cast<uintptr_t>(a.xs) ^ (uint64_t)a.out_stride ^
              reinterpret_cast<uintptr_t>(a.ids) ^ (uint64_t)a.expert_bytes ^ (uint64_t)a.part_bytes ^ more, a.S);
}

// gemv_stream_kernel's MoE tables in shared memory, in ints: the pairs' experts (sid, padded), then for
// the units over hit experts (EXP) a pair's entry in first_of (expert + 1: the lowest pair with that
// expert), the hit experts (64), each first pair's hit index (64), the slots of each (hit, token) (64 x 8),
// the hit count.
GQ_HD constexpr int exp_sid_ints(int P) { return (P + 3) & ~3; }
GQ_HD constexpr int exp_first_of_ints(int E) { return (E + 4) & ~3; }
GQ_HD constexpr int exp_table_ints(int P, int E) { return exp_sid_ints(P) + exp_first_of_ints(E) + 64 + 64 + 64 * 8 + 4; }

// Row stride of a stage holding U chunks: a multiple of 16 with an odd number of 16-byte units, so
// the 8 rows g (stride RS/4 words = 4 mod 8) and 4 lanes c hit 32 different banks.
template <int T>
GQ_HD constexpr int rs_bytes(int U) {
  using L = FT<T>;
  int n = (U * L::CB + (L::MIS ? 12 : 0) + 15) / 16;
  return 16 * (n | 1);
}

__device__ __forceinline__ void store_out(const FastArgs& a, int64_t o, float v) {
  if (a.out_bf16) reinterpret_cast<__nv_bfloat16*>(a.out)[o] = __float2bfloat16_rn(v);
  else reinterpret_cast<__half*>(a.out)[o] = __float2half_rn(v);
}

// ---- prep: one thread per (group, token) ---------------------------------------------------------
__device__ __forceinline__ float2 to_f2(__half, uint32_t w) { return __half22float2(*reinterpret_cast<const __half2*>(&w)); }
__device__ __forceinline__ float2 to_f2(__nv_bfloat16, uint32_t w) {
  return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xFFFF0000u));
}
// 8 activations (one 16-byte piece) as float.
template <typename XT>
__device__ __forceinline__ void piece_floats(const uint4 r, float* v) {
  const uint32_t wds[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 f = to_f2(XT(), wds[j]);
    v[2 * j] = f.x;
    v[2 * j + 1] = f.y;
  }
}
// One group's activations as float (16-byte loads: x rows are 16-byte aligned on this path).
template <int GS, typename XT>
__device__ __forceinline__ void load_group(const XT* xp, float (&v)[GS]) {
#pragma unroll
  for (int i = 0; i < GS / 8; ++i) piece_floats<XT>(*reinterpret_cast<const uint4*>(xp + 8 * i), v + 8 * i);
}
// I8: the records for int8 products (fast_i8 types, but for the tile kernel's)
template <int T, typename XT, bool I8 = fast_i8<T>()>
__global__ void __launch_bounds__(128) prep_kernel(const XT* __restrict__ x, int64_t x_stride, int K, int M,
                                                  uint8_t* __restrict__ xb, uint8_t* __restrict__ xs) {
  using L = FT<T>;
  grid_dep_launch();  // let the matmul start fetching weights now
  const int nG = K / L::GS;
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= nG * M) return;
  const int G = idx / M, t = idx - G * M;
  float v[L::GS];
  load_group(x + (int64_t)t * x_stride + (int64_t)G * L::GS, v);
  Prep<T>::template group<false, I8>(v, G, t, M, xb, xs);
}

// ---- main kernel ---------------------------------------------------------------------------------
template <int T>
__global__ void __maxnreg__(80) gemv_fast_kernel(const FastArgs a) {
  using L = FT<T>;
  constexpr int STEPS = L::STEPS, GPC = L::CE / L::GS;
  const int U = a.U, RS = a.RS, UCB = U * L::CB;
  extern __shared__ __align__(16) uint8_t smem[];

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, W = blockDim.x >> 5;
  const int g = lane >> 2, c = lane & 3;
  const int N = a.N, M = a.M, S = a.S;
  const int n0 = blockIdx.x * 16;
  const int TP2 = (M + 1) >> 1;
  const int GR = Prep<T>::gr(M);
  const int SW = 16 * RS;
  const int SBB = U * GPC * M * 32 * STEPS;  // B bytes per stage
  const int SSB = U * GPC * GR;              // sigma/beta bytes per stage
  const int STAGE = SW + SBB + SSB;
  uint8_t* buf = smem + (size_t)warp * S * STAGE;

  const int nchunks = a.K / (U * L::CE);  // stages' worth of K
  const int mych = nchunks > warp ? (nchunks - warp + W - 1) / W : 0;

  // copy mapping: two lanes per row, alternate 16-byte pieces
  const int crow = lane >> 1, chalf = lane & 1;
  const uint8_t* wsrc = a.w + (int64_t)min(n0 + crow, N - 1) * a.row_bytes;

  // chunk i (the warp's i-th) into stage buffer `stage`
  auto issue_w = [&](int i, int stage) {
    if (i < mych) {
      const int64_t ch = warp + (int64_t)i * W;
      const int64_t off = L::MIS ? ((ch * UCB) & ~(int64_t)15) : ch * UCB;
      const int P = L::MIS ? (int)(((ch * UCB) & 15) + UCB + 15) / 16 : UCB / 16;  // 16-byte pieces
      const uint8_t* src = wsrc + off;
      uint8_t* dst = buf + stage * STAGE + crow * RS;
      for (int pc = chalf; pc < P; pc += 2) cp_async16(dst + 16 * pc, src + 16 * pc);
    }
  };
  auto issue_x = [&](int i, int stage) {
    if (i < mych) {
      const int64_t ch = warp + (int64_t)i * W;
      uint8_t* dst = buf + stage * STAGE + SW;
      const uint8_t* sb = a.xb + ch * SBB;
      for (int p = lane; p < SBB / 16; p += 32) cp_async16(dst + 16 * p, sb + 16 * p);
      const uint8_t* ss = a.xs + ch * SSB;
      for (int p = lane; p < SSB / 16; p += 32) cp_async16(dst + SBB + 16 * p, ss + 16 * p);
    }
  };

  // Weights for the first stages do not depend on the prep kernel: ask for them before waiting.
  for (int s = 0; s < S - 1; ++s) { issue_w(s, s); cp_async_commit(); }
  grid_dep_wait();
  for (int s = 0; s < S - 1; ++s) { issue_x(s, s); cp_async_commit(); }

  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  // Lanes whose token (g >= M) or token pair (c >= TP2) does not exist read token 0's records: their
  // D columns are never stored, and the loads stay unconditional.
  const int gB = g < M ? g : 0, cS = c < TP2 ? c : 0;

  int cur = 0;  // stage of chunk i
  for (int i = 0; i < mych; ++i) {
    wait_stages(S);  // chunk i has landed (chunks i+1 .. i+S-2 may be in flight)
    __syncwarp();
    {
      // chunk i + S - 1 goes to the stage chunk i - 1 used: every lane is past it (the barrier above)
      const int prev = cur == 0 ? S - 1 : cur - 1;
      issue_w(i + S - 1, prev);
      issue_x(i + S - 1, prev);
      cp_async_commit();
    }
    const uint8_t* st = buf + cur * STAGE;
    int mis = 0;
    if (L::MIS) mis = (int)(((warp + (int64_t)i * W) * UCB) & 15);
    const uint8_t* rg0 = st + g * RS + mis;
    const uint8_t* rg80 = st + (g + 8) * RS + mis;
    const uint8_t* Bs = st + SW + (gB * 4 + c) * (8 * STEPS);
    const uint8_t* SBs = st + SW + SBB + cS * 16;
    const uint8_t* SSs = st + SW + SBB + TP2 * 16 + cS * 8;

    for (int u = 0; u < U; ++u) {
    const uint8_t* rg = rg0 + u * L::CB;
    const uint8_t* rg8 = rg80 + u * L::CB;
    const int q0 = u * GPC;
    chunk_as<T, true, false>(rg, rg8, c, [&](int qq, const uint32_t (&A)[2][4], float sg, float sg8, float og, float og8) {
      const int q = q0 + qq;
      uint32_t b[4] = {0u, 0u, 0u, 0u};
      if constexpr (STEPS == 2) {
        const uint4 r = *reinterpret_cast<const uint4*>(Bs + q * M * 64);
        b[0] = r.x; b[1] = r.y; b[2] = r.z; b[3] = r.w;
      } else {
        const uint2 r = *reinterpret_cast<const uint2*>(Bs + q * M * 32);
        b[0] = r.x; b[1] = r.y;
      }
      float sb[4];
      {
        const float4 r = *reinterpret_cast<const float4*>(SBs + q * GR);
        sb[0] = r.x; sb[1] = r.y; sb[2] = r.z; sb[3] = r.w;
      }
      float D[4];
      group_mma<T>(D, A, b);
      epilogue(D, sb, sg, sg8, acc);
      if constexpr (L::HAS_MIN) {
        const float2 r = *reinterpret_cast<const float2*>(SSs + q * GR);
        const float Sv[2] = {r.x, r.y};
        epilogue_min(Sv, og, og8, acc);
      }
    });
    }
    __syncwarp();
    cur = cur + 1 == S ? 0 : cur + 1;
  }
  cp_async_wait<0>();

  if (W > 1) {
    __syncthreads();
    float* red = reinterpret_cast<float*>(smem);
    if (warp > 0) {
#pragma unroll
      for (int e = 0; e < 4; ++e) red[((warp - 1) * 4 + e) * 32 + lane] = acc[e];
    }
    __syncthreads();
    if (warp != 0) return;
    for (int w = 1; w < W; ++w)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[e] += red[((w - 1) * 4 + e) * 32 + lane];
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int tok = 2 * c + (e & 1), row = n0 + g + 8 * (e >> 1);
    if (tok < M && row < N) store_out(a, (int64_t)tok * a.out_stride + row, acc[e]);
  }
}
}  // namespace fast
}  // namespace gq
