// Device side of the fast small-M matmul (layout and decoders: gemv_fast.cuh). Each fast_*.cu
// instantiates it for one type.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_set>

#include "gemv_fast.cuh"
#include "launch.h"

namespace gq {
namespace fast {

__device__ __forceinline__ void cp16(void* smem, const void* gmem) {
  const uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
// n (0..16) bytes from gmem, the rest of the 16 zero-filled
__device__ __forceinline__ void cp16z(void* smem, const void* gmem, int n) {
  const uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}
// The 16-byte piece at row + off of a ragged row, holding n bytes of the row (any n): whole, zero-filled
// past them, or all zeros, reading nothing (`row`, inside the row, then stands in for the source)
__device__ __forceinline__ void cp16_part(void* smem, const uint8_t* row, int off, int n) {
  if (n >= 16) cp16(smem, row + off);
  else cp16z(smem, row + (n > 0 ? off : 0), max(n, 0));
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void wait_n() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }
__device__ __forceinline__ void wait_stages(int S) {  // S - 2 groups may stay in flight
  if (S >= 4) wait_n<2>();
  else if (S == 3) wait_n<1>();
  else wait_n<0>();
}
// Thread block clusters (gemv_stream_kernel's K split, KS): this CTA's rank, its cluster and the
// clusters of the grid (1-D), a barrier over the cluster's threads, a store into rank 0's shared memory.
__device__ __forceinline__ uint32_t cluster_reg_rank() { uint32_t v; asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(v)); return v; }
__device__ __forceinline__ uint32_t cluster_reg_id() { uint32_t v; asm("mov.u32 %0, %%clusterid.x;" : "=r"(v)); return v; }
__device__ __forceinline__ uint32_t cluster_reg_size() { uint32_t v; asm("mov.u32 %0, %%cluster_nctarank;" : "=r"(v)); return v; }
__device__ __forceinline__ uint32_t cluster_reg_count() { uint32_t v; asm("mov.u32 %0, %%nclusterid.x;" : "=r"(v)); return v; }
__device__ __forceinline__ void cluster_arrive_relaxed() { asm volatile("barrier.cluster.arrive.relaxed;\n" ::: "memory"); }
__device__ __forceinline__ void cluster_arrive_release() { asm volatile("barrier.cluster.arrive.release;\n" ::: "memory"); }
__device__ __forceinline__ void cluster_wait_acquire() { asm volatile("barrier.cluster.wait.acquire;\n" ::: "memory"); }
__device__ __forceinline__ void st_rank0_v4(float* local, const float (&v)[4]) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, 0;\n" : "=r"(r) : "r"((uint32_t)__cvta_generic_to_shared(local)));
  asm volatile("st.shared::cluster.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(r), "f"(v[0]), "f"(v[1]), "f"(v[2]), "f"(v[3])
               : "memory");
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

struct FastArgs {
  const uint8_t* w;
  int64_t row_bytes;
  int N, K, M;
  const uint8_t* xb;  // prep: B records
  const uint8_t* xs;  // prep: sigma / beta / S records
  const void* x;      // the activations (gemv_stream_kernel makes its own records)
  void* out;
  int64_t out_stride;
  int out_bf16;
  int S;   // pipeline stages
  int split;  // gemv_stream_kernel: each CTA's stages split evenly over its warps (units cut between them)
  int U;   // type chunks (FT<T>::CE elements) per stage: one row's bytes per stage are U * CB, contiguous
  int RS;  // shared-memory row stride (rs_bytes<T>(U))
  // MoE pairs (gemv_stream_kernel<..., true>): pair q multiplies x row q / x_div by expert ids[q] and
  // writes out row q; nx distinct x rows, each with its own records (local: the records of at most nx
  // rows, those of the CTA's own range of units)
  const void* ids;
  int ids64, n_experts, P, x_div, nx, local;
  int64_t expert_bytes, x_stride;
};

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
template <int T, typename XT>
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
  Prep<T>::group(v, G, t, M, xb, xs);
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
      for (int pc = chalf; pc < P; pc += 2) cp16(dst + 16 * pc, src + 16 * pc);
    }
  };
  auto issue_x = [&](int i, int stage) {
    if (i < mych) {
      const int64_t ch = warp + (int64_t)i * W;
      uint8_t* dst = buf + stage * STAGE + SW;
      const uint8_t* sb = a.xb + ch * SBB;
      for (int p = lane; p < SBB / 16; p += 32) cp16(dst + 16 * p, sb + 16 * p);
      const uint8_t* ss = a.xs + ch * SSB;
      for (int p = lane; p < SSB / 16; p += 32) cp16(dst + SBB + 16 * p, ss + 16 * p);
    }
  };

  // Weights for the first stages do not depend on the prep kernel: ask for them before waiting.
  for (int s = 0; s < S - 1; ++s) { issue_w(s, s); commit(); }
  grid_dep_wait();
  for (int s = 0; s < S - 1; ++s) { issue_x(s, s); commit(); }

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
      commit();
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
    L::chunk(rg, rg8, c, [&](int qq, const uint32_t (&A)[2][4], float sg, float sg8, float og, float og8) {
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
      mma16816_z(D, A[0], b[0], b[1]);
      if constexpr (STEPS == 2) mma16816(D, A[1], b[2], b[3]);
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
  wait_n<0>();

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

// ---- M <= 8: persistent stream with in-CTA activation records (NOTES.md v6, v7) -----------------
// Shared-memory bytes of one row's stage (8 / MT chunks). Q6_K (MIS): a stage starts at chunk c0, byte
// 420 c0 of a row whose start is 16-byte aligned, so it is copied from the 16-byte boundary below
// (up to 12 bytes early) and the stride keeps every row 16-byte aligned. RAG (ragged rows, not a
// multiple of 16 bytes): every row's stage starts up to 15 bytes past its copy's 16-byte boundary.
template <int T, int MT, bool RAG>
GQ_HD constexpr int stream_rs() {
  constexpr int B = (8 / MT) * FT<T>::CB;
  return RAG ? (B + 15 + 15) / 16 * 16 : FT<T>::MIS ? (B + 12 + 15) / 16 * 16 : B;
}

// The kept lanes' epilogue of a run of DEF groups (gemv_stream_kernel, MT < 8): e = the kept D values,
// f = the groups' scales (rows rho, rho + MT), h = their mins; sp = the run's first {sigma, -beta[, S]}.
template <int DEF, bool HAS_MIN>
__device__ __forceinline__ void kept_epilogue(const float (&e0)[DEF], const float (&e1)[DEF], const float (&f0)[DEF],
                                              const float (&f1)[DEF], const float (&h0)[DEF], const float (&h1)[DEF],
                                              const uint8_t* sp, int GR, float (&acc)[2]) {
#pragma unroll
  for (int j = 0; j < DEF; ++j) {
    const float2 sb = *reinterpret_cast<const float2*>(sp + j * GR);
    acc[0] = fmaf(f0[j], fmaf(sb.x, e0[j], sb.y), acc[0]);
    acc[1] = fmaf(f1[j], fmaf(sb.x, e1[j], sb.y), acc[1]);
    if constexpr (HAS_MIN) {
      const float Sx = *reinterpret_cast<const float*>(sp + j * GR + 16);
      acc[0] = fmaf(h0[j], Sx, acc[0]);
      acc[1] = fmaf(h1[j], Sx, acc[1]);
    }
  }
}

// M = 1 (MT = 1): a warp streams two adjacent rows r0, r1, a stage at a time: 8 consecutive chunks of
// K of both (two contiguous runs of memory). mma.m16n8k16's A row g is chunk g of r0 and A row g + 8
// chunk g of r1 (lane (g, c) decodes them exactly as gemv_fast_kernel decodes its rows g, g + 8), and
// B's column g holds the activations of chunk g. The diagonal then carries the dot products: D[g][g]
// (lane (g, g / 2), element g & 1) for r0, D[g + 8][g] for r1; the rest of the product is discarded.
// Against the 16-row tile (v4) the weight reads are two long runs per stage instead of 16 rows x one
// chunk (v5); in addition (v6) there is no prep kernel: every CTA turns the activations into its own
// records in shared memory while its first stages are in flight, and one wave of CTAs walks units
// gw, gw + GW, ... with one cp.async pipeline across units, so the memory queue never drains between
// waves. A group's products are all issued before its epilogue.
// MT = 2, 4, 8 tokens (v7): a unit is 2 * MT rows and a stage CPS = 8 / MT chunks of each; A row a
// is chunk a % CPS of row a / CPS, B column n chunk n % CPS of token n / CPS, so D[a][n] is kept where
// the chunks agree: 16 * MT of the 16 x 8 products per mma instead of 16, for the same decode (MT = 8:
// all of them, the 16-row tile of gemv_fast_kernel with its records in the CTA).
// MOE (MT = 1, 2): the units are (pair, 2 MT rows) over a.P (token, slot) pairs, each read from its
// pair's expert and multiplied by its pair's x row (records for all a.nx x rows sit in shared memory).
// MT = 2 there is the dense MT = 2 mapping with both tokens the pair's x row (stages of 4 chunks: for K
// of at most 4 chunks, where MT = 1 would leave more than half the lanes without a chunk); the lanes of
// token 0 store.
// Registers: 96 (v6, v7: caps of 64-128 within 3% at M = 1); 128 for ragged rows, MoE's MT = 2 and
// the MT = 2, 4 forms of MXFP4, IQ4_XS and Q6_K, whose decodes spill 50-150 bytes at 96 (a CTA of 16
// warps is one per SM either way; 128 for the other types' MT = 2 cost Q4_K 4%, v10), and MT = 8, whose
// 896 units of 4096 -> 14336 leave 7 warps an SM (-15% Q4_K, -3..-8% the others at 128; v12).
// RAG (MT = 1): rows that are not a multiple of 16 bytes (gpt-oss's MXFP4 experts, K = 2880: 1530
// bytes), and K not a multiple of the chunk: each row's stage is copied in the 16-byte pieces that
// cover it, at its own offset; a short last chunk is zero-filled past the row's end and its missing
// groups get the records of zero activations, so they add exact zeros.
template <int T, typename XT, bool MOE, int MT, bool RAG, bool ONE = false, bool KS = false>
__global__ void __maxnreg__(RAG || MT == 8 || (MOE && MT == 2) || ((MT == 2 || MT == 4) && (T == MXFP4 || T == IQ4_XS || T == Q6_K)) ? 128 : 96)
    gemv_stream_kernel(const FastArgs a) {
  using L = FT<T>;
  using R = StreamRecs<T>;
  static_assert(MT == 1 || (MT == 2 && !RAG) || ((MT == 4 || MT == 8) && !MOE && !RAG) || (MT == 8 && MOE && RAG),
                "MT tokens: 1, 2, 4 or 8; MoE with 1 or 2, or 8 over hit experts; ragged rows with 1 (MoE: 8)");
  // MoE over hit experts (EXP): a unit is 16 rows of one expert that the pairs hit, times all the
  // (at most 8) tokens, stored to the pairs that chose it
  constexpr bool EXP = MOE && MT == 8;
  static_assert(!ONE || ((MT == 2 || (MT == 1 && !MOE)) && !RAG),
                "one kept value a lane: one x row a unit on the MT = 2 geometry, or dense row pairs (MT = 1)");
  // ONE on row pairs (ONE1, NOTES.md v32): A's rows g + 8 hold row 1's chunk g ^ 2 and B's column j
  // chunk j ^ 4 in odd groups, so that lane (g, c) keeps one product a pair of groups (role c ^ (g >> 1))
  constexpr bool ONE1 = ONE && MT == 1;
  static_assert(!KS || (MT == 8 && !MOE && !RAG), "K split over a cluster: dense MT = 8");
  constexpr int STEPS = L::STEPS, CPS = 8 / MT, RPU = 2 * MT, GPC = L::CE / L::GS;
  const int RS = stream_rs<T, MT, RAG>(), STAGE = RPU * RS;
  const int GR = Prep<T>::gr(1);
  extern __shared__ __align__(16) uint8_t smem[];

  grid_dep_launch();  // the next kernel, launched as a dependent, may place its CTAs as these leave
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, WPC = blockDim.x >> 5;
  const int g = lane >> 2, c = lane & 3;
  const int rho = g / CPS, kap = g % CPS;  // lane's A rows (rho, rho + MT) and chunk; its B token rho
  const int N = a.N, K = a.K, S = a.S;
  const int nch = R::chunks(K), nst = (nch + CPS - 1) / CPS;
  const size_t RB = stream_rec_stride<T, MT>(K);  // one x row's records
  const int nx = MOE ? a.nx : ONE ? 1 : MT;
  const auto rec_off = [&](int xr) { return stream_rec_off(xr, RB, MT); };
  uint8_t* recs = smem;
  uint8_t* buf = recs + nx * RB + (size_t)warp * S * STAGE;
  int* sid = reinterpret_cast<int*>(recs + nx * RB + (size_t)WPC * S * STAGE);  // MOE: experts
  // EXP: the tables of exp_table_ints after the pairs' experts
  int* first_of = sid + exp_sid_ints(a.P);
  int* hexp = first_of + exp_first_of_ints(a.n_experts);
  int* hid = hexp + 64;
  uint32_t* hmask = reinterpret_cast<uint32_t*>(hid + 64);
  int* nhit = reinterpret_cast<int*>(hmask + 64 * 8);
  // a.split (dense only, so after the stages): per unit of the CTA, the {RPU rows x MT tokens} sums of
  // the warps that each read part of it, then the count of its stages added
  constexpr int SLOT = split_slot(MT);
  float* sums = reinterpret_cast<float*>(sid);

  const int hN = (N + RPU - 1) / RPU;
  int units = MOE ? a.P * hN : hN;  // EXP: set once the hit experts are known
  // KS: the CTAs of a cluster read the same units, rank r the r-th of its equal slices of K (a.K is the
  // slice), and meet in rank 0's shared memory at the end (one unit a warp at most)
  const int rank = KS ? (int)cluster_reg_rank() : 0;
  const int gw = (KS ? (int)cluster_reg_id() : (int)blockIdx.x) * WPC + warp;
  const int GW = (KS ? (int)cluster_reg_count() : (int)gridDim.x) * WPC;
  const auto wbase = [&]() { return KS ? a.w + (int64_t)rank * nch * L::CB : a.w; };  // rows' first byte of the slice
  // Q6_K (MIS) slices start 4-byte aligned (420-byte chunks): how far past a 16-byte boundary, which
  // every stage's copy start (mis) adds to its offset in the slice
  const int kph = KS && L::MIS ? (int)(((int64_t)rank * nch * L::CB) & 15) : 0;
  if constexpr (KS) cluster_arrive_relaxed();  // (waited on before the first store into rank 0)
  // Warp gw reads units gw, gw + GW, ... whole; or, a.split, CTA b owns units [u0, u1) and its warps
  // read equal runs of their stages [j0, j0 + total), the warps of a unit cut between them adding into
  // `sums`, and the one that completes its stages storing it; or, MoE a.local, CTA b owns units [u0,
  // u1) (pair-major: a pair or two), warp w reads u0 + w, u0 + w + WPC, ... whole, and the CTA builds
  // the records of those pairs' x rows only, from row xr0 on.
  const bool split = (MT == 2 || MT == 4) && !MOE && !ONE && a.split;  // (the launch splits only these)
  const bool local = MOE && a.local;
  const int u0 = split || local ? (int)((int64_t)blockIdx.x * units / gridDim.x) : 0;
  int u1 = split || local ? (int)((int64_t)(blockIdx.x + 1) * units / gridDim.x) : units;
  int ufirst = local ? u0 + warp : gw, ustep = local ? WPC : GW;  // EXP: set with the units
  const int xr0 = local ? u0 / hN / a.x_div : 0;
  // x rows with records: dense and EXP, only tokens below M (a padded token's D columns are never stored)
  const int nxl = !local ? (MOE && !EXP ? nx : min(nx, a.M)) : u1 > u0 ? (u1 - 1) / hN / a.x_div - xr0 + 1 : 0;
  const int j0 = u0 * nst + (int)((int64_t)warp * (u1 - u0) * nst / WPC);
  int total = split ? u0 * nst + (int)((int64_t)(warp + 1) * (u1 - u0) * nst / WPC) - j0
                    : (ufirst < u1 ? (u1 - 1 - ufirst) / ustep + 1 : 0) * nst;  // stages this warp reads
  const XT* x = reinterpret_cast<const XT*>(a.x) + (KS ? rank * K : 0) + (int64_t)xr0 * a.x_stride;
  const int nG = K / L::GS, nGp = nch * GPC;  // groups of K; with a short last chunk's padding (RAG)
  // group G of the x rows' padded groups as float (zeros for a token past M: M = 3 on MT = 4, never
  // stored, and for the padding)
  const auto load_x = [&](int G, float (&v)[L::GS]) {
    const int xr = G / nGp, Gl = G - xr * nGp;
    if ((MOE || xr < a.M) && Gl < nG) {
      load_group(x + xr * a.x_stride + (int64_t)Gl * L::GS, v);
    } else {
#pragma unroll
      for (int e = 0; e < L::GS; ++e) v[e] = 0.f;
    }
  };
  // (MT = 8) the same as 16-byte pieces, converted when used
  const auto load_raw = [&](int G, uint4 (&r)[L::GS / 8]) {
    const int xr = G / nGp, Gl = G - xr * nGp;
    const bool in = xr < a.M && Gl < nG;
    const uint4* p = reinterpret_cast<const uint4*>(x + xr * a.x_stride + (int64_t)Gl * L::GS);
#pragma unroll
    for (int i = 0; i < L::GS / 8; ++i) r[i] = in ? p[i] : make_uint4(0, 0, 0, 0);
  };
  // unit u's first weight row (rows past N are read as row N - 1 and not stored)
  const auto rows_of = [&](int u) {
    int rp = u;
    const uint8_t* w = wbase();
    if constexpr (MOE) {
      const int q = u / hN;
      rp = u - q * hN;
      w += (int64_t)max(EXP ? hexp[q] : sid[q], 0) * a.expert_bytes;
    }
    return w + (int64_t)(RPU * rp) * a.row_bytes;
  };

  // the warp's stages in order (unit gw + j * GW, chunks CPS * s ...; split: from stage j0 on), the
  // next one into buffer `st`: each warp-wide cp.async covers 512 contiguous bytes of one row
  int is = split ? j0 % nst : 0, ip = split ? j0 / nst : ufirst, ii = 0;
  const uint8_t* iw = wbase();
  int ilast = 0;  // last row of the unit that exists, counted from its first
  const uint8_t* irow = iw;  // the row the lane copies: EXP (RAG, MT = 8) and the MT = 2 form (not ONE)
  auto issue = [&](int st) {
    if (ii < total) {
      if (is == 0 || ii == 0) {
        iw = rows_of(ip);
        ilast = min(RPU - 1, N - 1 - RPU * (MOE ? ip % hN : ip));  // dense: ip < units = hN
        if constexpr (RAG && MT == 8) irow = iw + (int64_t)slot_row(lane >> 1, ilast) * a.row_bytes;
        else if constexpr (!RAG && MT == 2 && !ONE) irow = iw + (int64_t)min(lane >> 3, ilast) * a.row_bytes;
      }
      const int b0 = CPS * is * L::CB, mis = L::MIS ? (kph + b0) & 15 : 0;
      const int nc = min(CPS, nch - CPS * is);
      const int nP = L::MIS ? (mis + nc * L::CB + 15) / 16 : nc * (L::CB / 16);  // 16-byte pieces per row
      const uint8_t* s0 = iw + (b0 - mis);
      uint8_t* d = buf + st * STAGE;
      constexpr int NPF = stream_rs<T, MT, RAG>() / 16;  // pieces per row of a full stage: a fixed trip count
      if constexpr (RAG && MT == 8) {  // as below, 16 rows in slot_row's order, a stage one chunk: lanes
                                       // 2j, 2j + 1 copy slot j's even and odd pieces, so each lane's row
                                       // (irow) is set once a unit and its pieces are fixed offsets
        const uintptr_t a0 = (uintptr_t)(irow + b0);
        const int m = (int)(a0 & 15), h = lane & 1;
        const int v = m + (int)min((int64_t)L::CB, a.row_bytes - b0) - 16 * h;  // row bytes from piece h on
        const uint8_t* p0 = reinterpret_cast<const uint8_t*>(a0 - m);
        uint8_t* dj = d + (lane >> 1) * RS + 16 * h;
#pragma unroll
        for (int k = 0; k < (NPF + 1) / 2; ++k) {
          if (2 * k + h < (m + L::CB + 15) >> 4) cp16_part(dj + 32 * k, p0, 16 * h + 32 * k, v - 32 * k);
        }
      } else if constexpr (RAG) {  // each row from the 16-byte boundary below its stage, up to the row's end;
                                   // a missing second row reads the row before (N >= 2): same alignment as an odd row
        const uintptr_t a0 = (uintptr_t)(iw + b0), a1 = a0 + (ilast > 0 ? a.row_bytes : -a.row_bytes);
        const int m0 = (int)(a0 & 15), m1 = (int)(a1 & 15);
        const int nb = (int)min((int64_t)nc * L::CB, a.row_bytes - b0);  // bytes of the row; past them zeros
        const uint8_t* p0 = reinterpret_cast<const uint8_t*>(a0 - m0);
        const uint8_t* p1 = reinterpret_cast<const uint8_t*>(a1 - m1);
#pragma unroll
        for (int k = 0; k < (NPF + 31) / 32; ++k) {
          const int pc = lane + 32 * k;
          const int v0 = m0 + nb - 16 * pc, v1 = m1 + nb - 16 * pc;  // bytes of the row in piece pc
          if (pc < (m0 + nc * L::CB + 15) >> 4) cp16_part(d + 16 * pc, p0, 16 * pc, v0);
          if (pc < (m1 + nc * L::CB + 15) >> 4) cp16_part(d + RS + 16 * pc, p1, 16 * pc, v1);
        }
      } else if constexpr (MT == 1) {  // the measured M = 1 form (NOTES.md v7): two cp.async per piece, no row index
        const uint8_t* s1 = s0 + (ilast > 0 ? a.row_bytes : 0);
#pragma unroll
        for (int k = 0; k < (NPF + 31) / 32; ++k) {
          const int pc = lane + 32 * k;
          if (pc < nP) {
            cp16(d + 16 * pc, s0 + 16 * pc);
            cp16(d + RS + 16 * pc, s1 + 16 * pc);
          }
        }
      } else if constexpr (ONE) {  // the M = 1 form's copies over 4 rows: every row a contiguous run
        const uint8_t* sr[4];
#pragma unroll
        for (int r = 0; r < 4; ++r) sr[r] = s0 + (int64_t)min(r, ilast) * a.row_bytes;
#pragma unroll
        for (int k = 0; k < (NPF + 31) / 32; ++k) {
          const int pc = lane + 32 * k;
          if (pc < nP) {
#pragma unroll
            for (int r = 0; r < 4; ++r) cp16(d + r * RS + 16 * pc, sr[r] + 16 * pc);
          }
        }
      } else if constexpr (MT == 2) {  // 8 lanes a row (its pointer set once a unit), lane h of them pieces
                                       // h, h + 8, ...: M = 2 -4..-8% against the form below (NOTES.md v19),
                                       // which MT = 4 and 8 keep (their 2-4 lanes a row lost up to 47%)
        const int h = lane & 7;
        const uint8_t* src = irow + (b0 - mis) + 16 * h;
        uint8_t* dst = d + (lane >> 3) * RS + 16 * h;
#pragma unroll
        for (int k = 0; k < (NPF + 7) / 8; ++k)
          if (h + 8 * k < nP) cp16(dst + 128 * k, src + 128 * k);
      } else {
#pragma unroll
        for (int k = 0; k < (RPU * NPF + 31) / 32; ++k) {
          const int q = lane + 32 * k, r = q / NPF, pc = q - r * NPF;
          if (r < RPU && pc < nP) cp16(d + r * RS + 16 * pc, s0 + (int64_t)min(r, ilast) * a.row_bytes + 16 * pc);
        }
      }
      if (++is == nst) { is = 0; ip += split ? 1 : ustep; }
      ++ii;
    }
  };
  // Launched as a programmatic dependent launch (launch_choice), this CTA may start before the kernel
  // that writes x (and the MoE ids) has finished. Asking for the first stage's weights before waiting
  // on it was measured slower (NOTES.md v13: the x loads then queue behind them): nothing is read
  // before the wait; nor was an L2 prefetch of each warp's first stages by the copy engine (v25: 3-5%
  // slower matmul after matmul, where the previous kernel's tail still uses the bandwidth).
  grid_dep_wait();
  float v0[L::GS];  // the thread's first group, requested before the expert ids are waited for
  uint4 r0[L::GS / 8];  // (MT = 8: as pieces)
  if (threadIdx.x < nxl * nGp) {
    if constexpr (MT == 8) load_raw(threadIdx.x, r0);
    else load_x(threadIdx.x, v0);
  }
  if constexpr (MOE) {  // unroutable ids read expert 0 and write zeros
    for (int q = threadIdx.x; q < a.P; q += blockDim.x) {
      const int64_t e = load_id(a.ids, a.ids64, q);
      sid[q] = e >= 0 && e < a.n_experts ? (int)e : -1;
    }
    if constexpr (EXP) {  // the hit experts (unroutable pairs: one more, -1), in order of their first pair
      for (int i = threadIdx.x; i < a.n_experts + 1; i += blockDim.x) first_of[i] = 0x7FFFFFFF;
      for (int i = threadIdx.x; i < 64 * 8; i += blockDim.x) hmask[i] = 0u;
      __syncthreads();
      for (int q = threadIdx.x; q < a.P; q += blockDim.x) atomicMin(&first_of[sid[q] + 1], q);
      __syncthreads();
      if (warp == 0) {
        int nh = 0;
        for (int b = 0; b < a.P; b += 32) {
          const int q = b + lane;
          const bool first = q < a.P && first_of[sid[q] + 1] == q;
          const uint32_t m = __ballot_sync(0xFFFFFFFFu, first);
          if (first) {
            const int h = nh + __popc(m & ((1u << lane) - 1u));
            hexp[h] = sid[q];
            hid[q] = h;
          }
          nh += __popc(m);
        }
        if (lane == 0) *nhit = nh;
      }
      __syncthreads();
      // slots of token t (x row) that chose hit h: bit s of hmask[8 h + t] (read after the records' barrier)
      for (int q = threadIdx.x; q < a.P; q += blockDim.x)
        atomicOr(&hmask[8 * hid[first_of[sid[q] + 1]] + q / a.x_div], 1u << (q % a.x_div));
      // CTA b owns units [u0, u1), its warps u0 + w, u0 + w + WPC, ...: every SM the same share of the
      // hits the launch could not count
      units = *nhit * hN;
      const int e0 = (int)((int64_t)blockIdx.x * units / gridDim.x);
      u1 = (int)((int64_t)(blockIdx.x + 1) * units / gridDim.x);
      ufirst = ip = e0 + warp;
      ustep = WPC;
      total = (ufirst < u1 ? (u1 - 1 - ufirst) / ustep + 1 : 0) * nst;
    }
    __syncthreads();
  }
  for (int s = 0; s < S - 1; ++s) { issue(s); commit(); }
  if constexpr (MT == 8) {
    // 8 tokens' records, about 5 groups a thread at 7 warps: each group's x asked for an iteration
    // ahead (M = 8 4096 -> 14336: -2..-3%, NOTES.md v13)
    for (int G = threadIdx.x; G < nxl * nGp; G += blockDim.x) {
      uint4 rn[L::GS / 8];
      if (G + (int)blockDim.x < nxl * nGp) load_raw(G + blockDim.x, rn);
      float v[L::GS];
#pragma unroll
      for (int i = 0; i < L::GS / 8; ++i) piece_floats<XT>(r0[i], v + 8 * i);
      const int xr = G / nGp;
      R::group(v, G - xr * nGp, K, recs + rec_off(xr));
#pragma unroll
      for (int i = 0; i < L::GS / 8; ++i) r0[i] = rn[i];
    }
  } else {
    for (int G = threadIdx.x; G < nxl * nGp; G += blockDim.x) {
      const int xr = G / nGp;
      if (G == threadIdx.x) {
        R::group(v0, G - xr * nGp, K, recs + rec_off(xr));
      } else {
        float v[L::GS];
        load_x(G, v);
        R::group(v, G - xr * nGp, K, recs + rec_off(xr));
      }
    }
  }
  if (split) {
    for (int i = threadIdx.x; i < SLOT * (u1 - u0); i += blockDim.x) sums[i] = 0.f;
  }
  __syncthreads();

  // kept products: lane (g, c) holds columns 2c, 2c + 1; the one of chunk kap is element g & 1, when
  // it is there; its token is (2c + (g & 1)) / CPS
  const bool keep = (2 * c) % CPS == (kap & ~1);
  const int one_t = c ^ (ONE1 ? g >> 1 : kap);  // ONE: the lane's role
  const int tok = MT == 8 ? 2 * c : (2 * c + (g & 1)) / CPS;  // MT = 8: tokens 2c and 2c + 1
  // MT = 8, the x rows whose records B column g and the lane's tokens read: EXP holds the records of its
  // nx tokens only, and a token past them (never stored) reads row 0's
  const int tb = g < nx ? g : 0, t0 = tok < nx ? tok : 0, t1 = tok + 1 < nx ? tok + 1 : 0;
  float acc[MT == 8 ? 4 : 2] = {};  // (row rho, row rho + MT) x (tok[, tok + 1])
  int cur = 0, s = split ? j0 % nst : 0, p = split ? j0 / nst : ufirst;  // buffer, stage of the unit, unit of stage i
  int s_head = s;  // the unit's first stage in this warp
  // the unit's x records, first row and output base
  const uint8_t* xrec = recs;
  const uint8_t* wrow = a.w;  // RAG: the unit's first row, whose address gives the stages' offsets
  int row0 = 0;
  int64_t obase = 0;
  bool zero = false;
  int uh = 0;  // EXP: the unit's hit
  const uint8_t *wa = nullptr, *wb = nullptr;  // RAG, MT = 8: the lane's two rows (slots g, g + 8)
  const auto unit_io = [&](int u) {
    if constexpr (RAG) wrow = rows_of(u);
    if constexpr (EXP) {
      uh = u / hN;
      row0 = RPU * (u - uh * hN);
      zero = hexp[uh] < 0;
      const int last = min(RPU - 1, N - 1 - row0);
      wa = wrow + (int64_t)slot_row(g, last) * a.row_bytes;
      wb = wrow + (int64_t)slot_row(g + 8, last) * a.row_bytes;
    } else if constexpr (MOE) {
      const int q = u / hN;
      xrec = recs + rec_off(q / a.x_div - xr0);
      obase = (int64_t)q * a.out_stride;
      row0 = RPU * (u - q * hN);
      zero = sid[q] < 0;
    } else {
      row0 = RPU * u;
    }
  };
  if (total > 0) unit_io(p);
  // the unit's sums (lanes (lane & RED) == 0) to rows row0 + rho, row0 + rho + MT of its tokens
  const auto store_unit = [&] {
    if constexpr (EXP) {  // rows 2g, 2g + 1 (slot_row) of tokens tok, tok + 1, to each pair that chose the hit
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int t = tok + e, r0 = row0 + 2 * g;
        for (uint32_t m = t < a.M ? hmask[8 * uh + t] : 0u; m; m &= m - 1) {
          const int64_t o = (int64_t)(t * a.x_div + __ffs(m) - 1) * a.out_stride;
          if (r0 < N) store_out(a, o + r0, zero ? 0.f : acc[e]);
          if (r0 + 1 < N) store_out(a, o + r0 + 1, zero ? 0.f : acc[2 + e]);
        }
      }
      return;
    }
    const int r0 = row0 + rho, r1 = r0 + MT;
#pragma unroll
    for (int e = 0; e < (MT == 8 ? 2 : 1); ++e) {  // MT = 8: acc = {(r0, tok), (r0, tok + 1), (r1, tok), (r1, tok + 1)}
      if (MOE ? tok == 0 : tok + e < a.M) {
        const int64_t o = obase + (int64_t)(tok + e) * a.out_stride;
        const float v0 = MT == 8 ? acc[e] : acc[0], v1 = MT == 8 ? acc[2 + e] : acc[1];
        if (r0 < N) store_out(a, o + r0, zero ? 0.f : v0);
        if (r1 < N) store_out(a, o + r1, zero ? 0.f : v1);
      }
    }
  };
  for (int i = 0; i < total; ++i) {
    wait_stages(S);
    __syncwarp();
    issue(cur == 0 ? S - 1 : cur - 1);
    commit();
    const int c0 = CPS * s;
    // lanes whose chunk is past K (a short last stage) decode the stage's first chunk: their
    // products are not kept
    const bool live = kap < nch - c0;
    const int ch = c0 + (live ? kap : 0);
    const int mis = L::MIS ? (kph + c0 * L::CB) & 15 : 0;  // where the stage's copy starts before its first chunk
    const uint8_t* rg = buf + cur * STAGE + rho * RS + mis + (ch - c0) * L::CB;
    const uint8_t* rg8 = rg + MT * RS;
    const bool live8 = ONE1 ? (kap ^ 2) < nch - c0 : live;  // ONE1: row 1's chunk kap ^ 2
    const int ch8 = ONE1 ? c0 + (live8 ? kap ^ 2 : 0) : ch;
    if constexpr (ONE1) rg8 = buf + cur * STAGE + (rho + 1) * RS + mis + (ch8 - c0) * L::CB;
    if constexpr (RAG && MT == 8) {  // rows at their own offsets, in slot_row's order
      rg = buf + cur * STAGE + g * RS + (((uintptr_t)wa + c0 * L::CB) & 15);
      rg8 = buf + cur * STAGE + (g + 8) * RS + (((uintptr_t)wb + c0 * L::CB) & 15);
    } else if constexpr (RAG) {  // rows at their own offsets
      const uintptr_t a0 = (uintptr_t)wrow + c0 * L::CB, a1 = a0 + (row0 + 1 < N ? a.row_bytes : -a.row_bytes);
      rg = buf + cur * STAGE + (a0 & 15) + (ch - c0) * L::CB;
      rg8 = buf + cur * STAGE + RS + (a1 & 15) + (ch - c0) * L::CB;
    }
    const uint8_t* Bp = xrec + (MOE && !EXP ? 0 : rec_off(MT == 8 ? tb : rho)) + (size_t)ch * R::bstride() + c * (8 * STEPS);
    const uint8_t* Bo = Bp;  // ONE: column g of odd groups
    if constexpr (ONE) {  // column g holds chunk (g >> 1) ^ (g & 1) in even groups, that ^ 2 in odd ones
                          // (ONE1: chunk g, and g ^ 4)
      const int ne = ONE1 ? g : (g >> 1) ^ (g & 1), no = ne ^ (ONE1 ? 4 : 2);
      Bp = xrec + (size_t)(c0 + (ne < nch - c0 ? ne : 0)) * R::bstride() + c * (8 * STEPS);
      Bo = xrec + (size_t)(c0 + (no < nch - c0 ? no : 0)) * R::bstride() + c * (8 * STEPS);
    }
    const uint8_t* Sp = xrec + ((MOE && !EXP) || ONE ? 0 : rec_off(MT == 8 ? t0 : tok)) + (size_t)nch * R::bstride() +
                        (size_t)(ONE1 && (one_t & 1) ? ch8 : ch) * R::sstride();
    const auto product = [&](int q, const uint32_t (&A)[2][4], float (&D)[4]) {
      uint32_t b[4] = {0u, 0u, 0u, 0u};
      const uint8_t* Bq = (ONE && (q & 1) ? Bo : Bp) + q * R::BREC;
      if constexpr (STEPS == 2) {
        const uint4 r = *reinterpret_cast<const uint4*>(Bq);
        b[0] = r.x; b[1] = r.y; b[2] = r.z; b[3] = r.w;
      } else {
        const uint2 r = *reinterpret_cast<const uint2*>(Bq);
        b[0] = r.x; b[1] = r.y;
      }
      mma16816_z(D, A[0], b[0], b[1]);
      if constexpr (STEPS == 2) mma16816(D, A[1], b[2], b[3]);
    };
    if constexpr (MT == 8) {  // every product kept, the epilogue right after it (registers)
      const auto all = [&](int q, const uint32_t (&A)[2][4], float sg, float sg8, float og, float og8) {
        float D[4];
        product(q, A, D);
        const uint8_t* Sp1 = Sp + (rec_off(t1) - rec_off(t0));  // token tok + 1's
        const float2 s0 = *reinterpret_cast<const float2*>(Sp + q * GR);
        const float2 s1 = *reinterpret_cast<const float2*>(Sp1 + q * GR);
        acc[0] = fmaf(sg, fmaf(s0.x, D[0], s0.y), acc[0]);
        acc[1] = fmaf(sg, fmaf(s1.x, D[1], s1.y), acc[1]);
        acc[2] = fmaf(sg8, fmaf(s0.x, D[2], s0.y), acc[2]);
        acc[3] = fmaf(sg8, fmaf(s1.x, D[3], s1.y), acc[3]);
        if constexpr (L::HAS_MIN) {
          const float S0 = *reinterpret_cast<const float*>(Sp + q * GR + 16);
          const float S1 = *reinterpret_cast<const float*>(Sp1 + q * GR + 16);
          acc[0] = fmaf(og, S0, acc[0]);
          acc[1] = fmaf(og, S1, acc[1]);
          acc[2] = fmaf(og8, S0, acc[2]);
          acc[3] = fmaf(og8, S1, acc[3]);
        }
      };
      if constexpr (RAG) chunk_ragged<T>(rg, rg8, c, all);
      else L::chunk(rg, rg8, c, all);
    } else if constexpr (ONE) {  // each pair of groups' products, then the lane's one kept value of each
                                 // pair: role t = c ^ kap, D[0] (row rho) or D[3] (row rho + 2) of the
                                 // even group (t < 2) or the odd one; its scale read by the lane itself
      // in runs of DEF groups as below (Q6_K's 32 a chunk: 8), which L::chunk gives in any order within
      // a run (Q6_K: its even groups first) but each run before the next; the last one's index ends it
      constexpr int DEF = GPC > 16 ? 8 : GPC;
      float ev[DEF / 2];
      const uint8_t* myc = (one_t & 1) ? rg8 : rg;
      const bool mylive = (one_t & 1) ? live8 : live;
      L::chunk(rg, rg8, c, [&](int q, const uint32_t (&A)[2][4], float, float, float, float) {
        float D[4];
        product(q, A, D);
        // ONE1: D[2 (t & 1) + (g & 1)] (row t & 1, column g or g ^ 2, whose chunk is that row's)
        const float v = ONE1 ? ((one_t & 1) ? ((g & 1) ? D[3] : D[2]) : ((g & 1) ? D[1] : D[0]))
                             : (one_t & 1) ? D[3] : D[0];
        if ((q & 1) == (one_t >> 1)) ev[(q % DEF) >> 1] = v;
        if (q % DEF == DEF - 1 && mylive) {
#pragma unroll
          for (int j = 0; j < DEF / 2; ++j) {
            const int G = q - (DEF - 1) + 2 * j + (one_t >> 1);
            float sg, og;
            L::scale(myc, G, sg, og);
            const float2 sb = *reinterpret_cast<const float2*>(Sp + G * GR);
            acc[0] = fmaf(sg, fmaf(sb.x, ev[j], sb.y), acc[0]);
            if constexpr (L::HAS_MIN) acc[0] = fmaf(og, *reinterpret_cast<const float*>(Sp + G * GR + 16), acc[0]);
          }
        }
      });
    } else {  // a run of DEF groups' products first, then the kept ones' epilogue (L::chunk produces the
              // groups of each run before the next run's; Q6_K's 32 groups a chunk go in runs of 8: with
              // runs of 16 its MT = 2 and 4 kernels spill ~50 bytes, with 32 the D values do not fit at all)
      constexpr int DEF = GPC > 16 ? 8 : GPC;
      float e0[DEF], e1[DEF], f0[DEF], f1[DEF], h0[DEF], h1[DEF];
      const auto run = [&](int q, const uint32_t (&A)[2][4], float sg, float sg8, float og, float og8) {
        float D[4];
        product(q, A, D);
        const int j = q % DEF;
        e0[j] = (g & 1) ? D[1] : D[0]; e1[j] = (g & 1) ? D[3] : D[2];
        f0[j] = sg; f1[j] = sg8; h0[j] = og; h1[j] = og8;
        if (DEF < GPC && j == DEF - 1 && keep && live)
          kept_epilogue<DEF, L::HAS_MIN>(e0, e1, f0, f1, h0, h1, Sp + (q - j) * GR, GR, acc);
      };
      if constexpr (RAG) chunk_ragged<T>(rg, rg8, c, run);
      else L::chunk(rg, rg8, c, run);
      if (DEF == GPC && keep && live) kept_epilogue<DEF, L::HAS_MIN>(e0, e1, f0, f1, h0, h1, Sp, GR, acc);
    }
    __syncwarp();
    cur = cur + 1 == S ? 0 : cur + 1;
    const bool unit_end = ++s == nst;
    if (unit_end || (split && i == total - 1)) {  // the unit's last stage (or the warp's): sum over the
                                                  // lanes of one (row, token): chunks kap, and columns c
                                                  // of the same token
      constexpr int RED = MT == 8 ? 0 : ((CPS - 1) << 2) | (CPS / 2 - 1);
      if constexpr (ONE1) {  // a row's 16 lanes: lane bit 0 ^ bit 3 fixed (row 1 where it is set)
        for (int o : {2, 4, 16, 9}) acc[0] += __shfl_xor_sync(0xFFFFFFFFu, acc[0], o);
        if (lane < 2) {  // lanes 0, 1: rows 0, 1
          const int r = row0 + lane;
          if (r < N) store_out(a, obase + r, zero ? 0.f : acc[0]);
        }
      } else if constexpr (ONE) {  // a row's 8 lanes: lane bit 4 and bit 0 ^ bit 2 fixed
        for (int o : {2, 8, 5}) acc[0] += __shfl_xor_sync(0xFFFFFFFFu, acc[0], o);
        if ((lane & ~17) == 0) {  // lanes 0, 16, 1, 17: rows 0, 1, 2, 3
          const int r = row0 + (g >> 2) + 2 * ((c ^ g) & 1);
          if (r < N) store_out(a, obase + r, zero ? 0.f : acc[0]);
        }
      } else {
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        if (RED & o) {
#pragma unroll
          for (float& v : acc) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
        }
      }
      bool emit = true;
      if constexpr (MT == 2 || MT == 4) {
        if (split && !(unit_end && s_head == 0)) {  // a unit cut between warps: add; the last to add stores
          float* us = sums + SLOT * (p - u0);
          float* at[2] = {us + rho * MT + tok, us + (rho + MT) * MT + tok};  // acc's (row, token) slots
          if ((lane & RED) == 0) {
            atomicAdd(at[0], acc[0]);
            atomicAdd(at[1], acc[1]);
          }
          __threadfence_block();
          __syncwarp();
          int last = 0;
          if (lane == 0) {
            const int done = s - s_head;
            last = atomicAdd(reinterpret_cast<int*>(us + SLOT - 1), done) + done == nst;
          }
          emit = __shfl_sync(0xFFFFFFFFu, last, 0) != 0;
          __threadfence_block();
          if (emit && (lane & RED) == 0) {
            acc[0] = *reinterpret_cast<volatile float*>(at[0]);
            acc[1] = *reinterpret_cast<volatile float*>(at[1]);
          }
        }
      }
      if (!KS && emit && (lane & RED) == 0) store_unit();  // KS: one unit a warp, whose slice's sums stay
      }                                                     // in acc for the cluster's epilogue
      if constexpr (!KS) {
#pragma unroll
        for (float& v : acc) v = 0.f;
      }
      if (unit_end) {
        s = s_head = 0;
        p += split ? 1 : ustep;
        if (p < units) unit_io(p);
      }
    }
  }
  if constexpr (KS) {  // ranks 1.. put their sums in rank 0's slots [rank - 1][warp][lane], which adds and stores
    float* slots = reinterpret_cast<float*>(recs + nx * RB + (size_t)WPC * S * STAGE);
    const int Z = (int)cluster_reg_size();
    cluster_wait_acquire();  // every CTA of the cluster has started (the arrive at the top)
    const bool has_unit = gw < units;
    if (rank > 0 && has_unit) st_rank0_v4(slots + ((size_t)(rank - 1) * WPC + warp) * 128 + lane * 4, acc);
    cluster_arrive_release();
    cluster_wait_acquire();
    if (rank == 0 && has_unit) {
      for (int r = 1; r < Z; ++r) {
        const float4 v = *reinterpret_cast<const float4*>(slots + ((size_t)(r - 1) * WPC + warp) * 128 + lane * 4);
        acc[0] += v.x; acc[1] += v.y; acc[2] += v.z; acc[3] += v.w;
      }
      store_unit();
    }
  }
  wait_n<0>();
}

// ---- launch --------------------------------------------------------------------------------------

// An integer knob from the environment: its value, or `unset` when it is not set.
inline int env_knob(const char* name, int unset = 0) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : unset;
}
// A default-on path's switch: off when `name` is set to 0.
inline bool env_off(const char* name) { return std::getenv(name) && !env_knob(name); }

// A matmul kernel here starts as a programmatic dependent launch (PDL) of the kernel before it on the
// stream (`pdl`), so that its CTAs are placed, and start, while that kernel's last CTAs run; each
// waits (griddepcontrol.wait) before it reads anything. A plain launch where the launch with the
// attribute fails, or GGUF_KERNELS_PDL=0.
inline bool knob_pdl_off() {
  static const bool v = env_off("GGUF_KERNELS_PDL");
  return v;
}
// Clusters of z CTAs along x.
inline cudaLaunchAttribute cluster_attr(int z) {
  cudaLaunchAttribute at = {};
  at.id = cudaLaunchAttributeClusterDimension;
  at.val.clusterDim.x = z;
  at.val.clusterDim.y = at.val.clusterDim.z = 1;
  return at;
}
// `cluster` > 1: clusters of that many CTAs along x (no plain launch then: the kernel needs them).
template <typename K, typename... A>
cudaError_t launch_kernel_clustered(K kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t stream, bool pdl,
                                    int cluster, A... a) {
  pdl = pdl && !knob_pdl_off();
  if (pdl || cluster > 1) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[2];
    int n = 0;
    if (cluster > 1) attr[n++] = cluster_attr(cluster);
    if (pdl) {
      attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attr[n].val.programmaticStreamSerializationAllowed = 1;
      ++n;
    }
    cfg.attrs = attr;
    cfg.numAttrs = n;
    if (cudaLaunchKernelEx(&cfg, kernel, a...) == cudaSuccess) return cudaGetLastError();
    cudaGetLastError();
    if (cluster > 1) {  // without PDL (the cluster attribute comes first), else not at all
      cfg.numAttrs = 1;
      if (pdl && cudaLaunchKernelEx(&cfg, kernel, a...) == cudaSuccess) return cudaGetLastError();
      cudaGetLastError();
      return cudaErrorNotSupported;
    }
  }
  kernel<<<grid, block, smem, stream>>>(a...);
  return cudaGetLastError();
}
template <typename K, typename... A>
cudaError_t launch_kernel(K kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t stream, bool pdl, A... a) {
  return launch_kernel_clustered(kernel, grid, block, smem, stream, pdl, 1, a...);
}

// Rows both kernels here take: whole chunks of K, packed, a multiple of 16 bytes long (so every row,
// and every stage of the stream kernel but Q6_K's, starts 16-byte aligned).
template <int T>
bool rows_fit(int K, int64_t row_bytes) {
  using L = FT<T>;
  if constexpr (!L::OK) {
    return false;
  } else {
    return K > 0 && K % L::CE == 0 && row_bytes % 16 == 0 && row_bytes == (int64_t)K / Traits<T>::BLOCK * Traits<T>::BYTES;
  }
}
// Ragged rows gemv_stream_kernel<..., RAG> takes at M = 1 (and MoE pairs): whole blocks, packed, rows and
// experts starting 4-byte aligned, so its decoders' word alignments stay compile-time constants; MXFP4
// only rows of 4k + 2 bytes (K = 2880: even rows 4-byte aligned, odd ones 2 bytes past, chunk_ragged),
// its rows of 4k bytes (K = 768) stay on gemv_mma_kernel. Only the types whose blocks are not a
// multiple of 16 bytes have such rows.
template <int T>
constexpr bool may_rag() {
  return FT<T>::OK && Traits<T>::BYTES % 16 != 0;
}
template <int T>
bool rows_rag(int N, int K, int64_t row_bytes, int64_t expert_bytes) {
  if constexpr (!may_rag<T>()) {
    return false;
  } else {
    return N >= 2 && K > 0 && K % Traits<T>::BLOCK == 0 && row_bytes == (int64_t)K / Traits<T>::BLOCK * Traits<T>::BYTES &&
           row_bytes % 4 == (T == MXFP4 ? 2 : 0) && expert_bytes % 4 == 0;
  }
}

// Scratch bytes for the prep records of gemv_fast_kernel, or 0 when it does not take (T, K, M, row_bytes).
template <int T>
size_t scratch_bytes(int K, int M, int64_t row_bytes) {
  // Q6_K (16-element groups: twice the B records, 4 instructions per weight) measured no faster than
  // gemv_mma_kernel at M = 1 and slower at M = 8 on this kernel (NOTES.md v4): only the stream kernel
  // takes it, unless GGUF_KERNELS_FAST_Q6K=1.
  static const int q6k = env_knob("GGUF_KERNELS_FAST_Q6K");
  const int max_m = T == Q6_K ? (q6k ? 8 : 0) : 8;
  if (M < 1 || M > max_m || !rows_fit<T>(K, row_bytes)) return 0;
  return Prep<T>::scratch(K, M);
}

struct Choice { int W, S, U; };

// gemv_fast_kernel's dynamic shared memory: at most 200 KB (the bound its launch rules were measured
// under), less where the device's opt-in limit is lower.
inline size_t gemv_fast_smem_cap() { return std::min<size_t>(200 * 1024, (size_t)dev_props().optin); }
template <int T>
cudaError_t gemv_fast_attrs() {
  static std::atomic<uint64_t> done{0};
  return smem_attrs_once(done, gemv_fast_kernel<T>, gemv_fast_smem_cap());
}

// Resident CTAs per SM for (W warps, smem bytes) on the current device, from the occupancy calculator
// (registers, shared memory, threads), cached per (device, U, W, S, M) without a lock (choose() asks
// up to 15 of them a launch): 0 = not asked yet, else the count + 1.
template <int T>
int ctas_per_sm(int W, int S, int M, int U, size_t smem) {
  static std::atomic<int> cache[kMaxDevices][3][5][3][8];
  const int dev = current_device();
  int wi = 0;
  while ((1 << wi) < W) ++wi;
  std::atomic<int>* v = tracked_device(dev) ? &cache[dev][U >= 4 ? 2 : U - 1][wi][S - 2][M - 1] : nullptr;
  if (v) {
    const int c = v->load(std::memory_order_relaxed);
    if (c) return c - 1;
  }
  int n = 0;
  if ((smem > 48 * 1024 && gemv_fast_attrs<T>() != cudaSuccess) ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, gemv_fast_kernel<T>, 32 * W, smem) != cudaSuccess) {
    cudaGetLastError();
    n = 0;
  }
  if (v) v->store(n + 1, std::memory_order_relaxed);
  return n;
}

template <int T>
size_t stage_bytes(int M, int U) {
  using L = FT<T>;
  return 16 * (size_t)rs_bytes<T>(U) + (size_t)U * (L::CE / L::GS) * (M * 32 * L::STEPS + Prep<T>::gr(M));
}
template <int T>
size_t smem_bytes(int W, int S, int M, int U) {
  return std::max<size_t>((size_t)W * S * stage_bytes<T>(M, U), (size_t)W * 4 * 32 * 4);
}

// Experiment knobs (0 = automatic): GGUF_KERNELS_FAST_U (type chunks per stage), _W (warps per CTA),
// _S (stages).
inline int knob_u() { static const int v = env_knob("GGUF_KERNELS_FAST_U"); return v; }
inline int knob_w() { static const int v = env_knob("GGUF_KERNELS_FAST_W"); return v; }
inline int knob_s() { static const int v = env_knob("GGUF_KERNELS_FAST_S"); return v; }

// Pick warps per CTA (split of K) and stages: prefer configurations where every CTA is resident at
// once (one wave), and among those the most weight bytes in flight per SM, discounted below 16 warps
// an SM (NOTES.md v15: 8 warps of 2 stages beat 4 warps of 4 stages, the same bytes in flight, by
// 8-17% at M = 5..8 on 14336 -> 4096 and 4096 -> 4096 for Q4_0, Q4_K and Q5_K).
// U: type chunks per stage (each stage asks for U * CB contiguous bytes of every row at once). Measured
// (NOTES.md v4b): U = 2 helped Q8_0 (~8%), U = 4 vs 1 was within noise for Q4_0/Q4_K, U >= 2 hurt Q6_K
// (fewer warps per SM); so the smallest U with runs of >= 400 bytes, for M <= 4 (at M = 8 the B
// records make U > 1 stages too large for one wave). GGUF_KERNELS_FAST_U overrides.
template <int T>
int choose_u(int K, int M) {
  using L = FT<T>;
  const int nch = K / L::CE;
  const int want = knob_u();
  if (want == 1 || want == 2 || want == 4) return nch % want == 0 ? want : 1;
  if (M > 4) return 1;
  for (int U = 1; U <= 4; U *= 2)
    if (nch % U == 0 && U * L::CB >= 400) return U;
  return nch % 4 == 0 ? 4 : (nch % 2 == 0 ? 2 : 1);
}

template <int T>
Choice choose(int N, int K, int M, int sms) {
  using L = FT<T>;
  const int U = choose_u<T>(K, M);
  const int tiles = (N + 15) / 16, nch = K / (U * L::CE);
  Choice best{1, 2, U};
  double best_score = -1.0;
  for (int W = 1; W <= 16; W *= 2) {
    if (W > 1 && W > nch) break;
    if (knob_w() && W != knob_w()) continue;
    for (int S = 2; S <= 4; ++S) {
      if (knob_s() && S != knob_s()) continue;
      const size_t smem = smem_bytes<T>(W, S, M, U);
      if (smem > gemv_fast_smem_cap()) continue;
      const int per_sm = ctas_per_sm<T>(W, S, M, U, smem);
      if (per_sm < 1) continue;
      const int mych = (nch + W - 1) / W;
      const bool one_wave = tiles <= sms * per_sm;
      const double warps_sm = std::min<double>((double)tiles * W / sms, (double)per_sm * W);
      const double inflight = warps_sm * std::min(S - 1, mych) * 16.0 * U * L::CB;
      // fewer warps per SM leave the decode latency-bound (v4: 6.8 warps/SM for IQ4_XS; v15)
      const double score = (one_wave ? 1e12 : 0.0) + inflight * std::min(1.0, warps_sm / 16.0) - 1e-3 * smem;
      if (score > best_score) { best_score = score; best = {W, S, U}; }
    }
  }
  return best;
}

// Dynamic shared memory a gemv_stream_kernel CTA may ask: the device's opt-in limit (227 KB on the H200),
// or GGUF_KERNELS_FAST_SMEM_KB below it (200: the cap of v6..v22, for A/B runs). The last 27 KB let
// Q6_K's 8 tokens at M = 5..8 sit beside 8 warps' stages (4096 -> 14336: 212 KB, the plain launch) or a
// 4-way K split (14336 -> 4096: 213 KB): 35.3 -> 24.7 us and 32.1 -> 27.9 us at M = 5 (NOTES v23).
inline size_t stream_smem_cap() {
  static const int knob_kb = env_knob("GGUF_KERNELS_FAST_SMEM_KB", -1);
  const size_t optin = (size_t)dev_props().optin;
  return knob_kb >= 0 ? std::min((size_t)knob_kb * 1024, optin) : optin;
}
// Raises gemv_stream_kernel<...>'s dynamic shared memory to stream_smem_cap() on the current device,
// with all of the SM's shared memory as carve-out (else the driver may keep L1 and fit fewer CTAs
// than stream_ctas_per_sm counts). Once a device and instantiation.
template <int T, typename XT, bool MOE, int MT, bool RAG, bool ONE, bool KS = false>
cudaError_t stream_attrs() {
  static std::atomic<uint64_t> done{0};
  return smem_attrs_once(done, gemv_stream_kernel<T, XT, MOE, MT, RAG, ONE, KS>, stream_smem_cap(), 100);
}
// Resident CTAs per SM of gemv_stream_kernel<T, XT, MOE, MT> with WPC warps and `smem` bytes: registers,
// shared memory and threads, from the function's attributes (read once) and the current device's
// (stream_attrs gives the launch the carve-out this count assumes).
template <int T, typename XT, bool MOE, int MT, bool RAG, bool ONE = false>
int stream_ctas_per_sm(int WPC, size_t smem) {
  static int regs = 0;
  const DevProps& sm = dev_props();
  if (!regs) {
    const auto kernel = gemv_stream_kernel<T, XT, MOE, MT, RAG, ONE>;
    cudaFuncAttributes fa;
    regs = cudaFuncGetAttributes(&fa, kernel) == cudaSuccess ? std::max(fa.numRegs, 1) : 96;
    cudaGetLastError();
  }
  return std::min({sm.regs / (regs * 32 * WPC), (int)(sm.smem / (smem + sm.reserved)), sm.threads / (32 * WPC)});
}

// gemv_stream_kernel's launch for `units` units and `fixed` bytes of records: WPC warps per CTA, S = 2
// stages, one wave of CTAs, the units spread evenly over just enough CTAs. WPC: the largest of 16, 8,
// 4 whose shared memory fits, since every CTA builds its own records (NOTES.md v7, a sweep of 4 / 8 /
// 16 warps x 2 / 3 stages: 16 warps in one CTA per SM beat 4 warps in five CTAs by 1-10% at M = 1
// and 10-15% at M = 2, 4, though that means more rounds of units per warp; 3 stages no better); or 19
// at M = 1 for types under 8 bits a weight, where rounds x warps (the busiest SM's share) is smaller:
// an SM runs its warps' stages at about a fixed rate, so 4096 -> 14336 (7168 units) in 3 rounds of
// 19 warps on 126 SMs beats 4 rounds of 16 on 112 by 4-8% (NOTES.md v10; Q8_0, bound by DRAM, lost 3%).
// Few units: fewer warps per CTA, one unit each, over more SMs. {0, ...}: the records do not fit, or
// this kernel would lose to the tile kernel (v7 measurements): when fewer than half the warps that
// fit have a unit and a unit is more than 16 stages (a warp's stages run one after another: 14336 ->
// 4096 at M = 4, 512 units of 28 stages, took 30 us against the tile kernel's 27), or when the CTA's
// threads have more than 8 groups of activations each to turn into records (4096 -> 1024 at M = 4:
// 128 units, one warp per CTA, 16 groups a thread, 15 us against 7), or more than 4 and more than
// the stages each warp then streams (Q6_K, same call against gemv_mma_kernel: 8 groups a thread and
// 4 stages, 4096 -> 4096 at M = 4, 14.1 us against 11.2; 8 and 2, 4096 -> 1024 at M = 2, 9.2 against
// 6.9; 7 and 7, 14336 -> 4096 at M = 2, 25.6 against 29.9).
struct StreamChoice { int WPC, S, ctas; size_t smem; int split; int64_t work; };  // work: the busiest SM's stages
inline bool knob_split_off() {
  static const bool v = env_off("GGUF_KERNELS_FAST_SPLIT");
  return v;
}
template <int T, typename XT, bool MOE, int MT, bool RAG, bool ONE = false>
StreamChoice choose_stream(int units, size_t fixed, int nst, int groups) {
  const int sms = num_sms();
  const int S = knob_s() ? knob_s() : 2;
  const auto smem_for = [&](int WPC) { return fixed + (size_t)WPC * S * 2 * MT * stream_rs<T, MT, RAG>(); };
  StreamChoice best{0, 0, 0, 0, 0, 0};
  int best_rounds = 0, best_cap = 0;
  int64_t best_work = 0;  // rounds x warps per SM: the busiest SM's share of the units
  constexpr bool M1 = (MT == 1 || ONE) && FT<T>::CB < FT<T>::CE;  // 19 (ONE: 14 too) warps considered
  for (int WPC : {19, 16, 14, 8, 4}) {
    // 14: where 16 warps' stages do not fit beside the records (ONE; MoE over hit experts, 8 tokens' records)
    if (knob_w() ? WPC != knob_w() : (WPC == 19 && !M1) || (WPC == 14 && !ONE && !(MOE && MT == 8))) continue;
    const size_t smem = smem_for(WPC);
    const int n = smem > stream_smem_cap() ? 0 : stream_ctas_per_sm<T, XT, MOE, MT, RAG, ONE>(WPC, smem);
    if (n <= 0) continue;
    const int rounds = (units + n * sms * WPC - 1) / (n * sms * WPC);
    const int64_t work = (int64_t)rounds * WPC * n;
    if (!best.WPC || work < best_work) {
      best_rounds = rounds;
      best_cap = n * sms * WPC;
      best_work = work;
      best = {WPC, S, (units + rounds * WPC - 1) / (rounds * WPC), smem, 0, work * nst};
    }
    if (WPC != 19 && !(ONE && WPC == 16)) break;
  }
  int64_t per_warp = (int64_t)best_rounds * nst;  // stages of the busiest warp
  if (best.WPC && best_rounds == 1 && units < best.WPC * sms) {
    // Few units: fewer warps per CTA, a unit each, on more SMs; or, MT = 2 and 4 (NOTES.md v10), where
    // that leaves at most 4 warps per SM or chains of 8 stages and more, all the warps, each CTA's stages
    // split evenly over them, if that at least halves the busiest warp's chain (MT = 8 lost 4-35% split,
    // MT = 2 with 8 warps of 4 stages 11%). Not ONE, whose kernel does not split: sized as split, its
    // units sat on the first CTAs (NOTES.md v33).
    const int few = std::max(1, (units + sms - 1) / sms);
    const int64_t items = (int64_t)units * nst;
    const int W = (int)std::min<int64_t>(best.WPC, (items + sms - 1) / sms);  // on as many SMs as there are
    const int G = (int)std::min<int64_t>({best_cap / best.WPC, (items + W - 1) / W, units});  // CTAs
    const size_t smem = smem_for(W) + sizeof(float) * split_slot(MT) * ((units + G - 1) / G);
    const int64_t pw = (items + (int64_t)G * W - 1) / ((int64_t)G * W);
    if ((MT == 2 || MT == 4) && !MOE && !ONE && !knob_split_off() && (few <= 4 || nst >= 8) && nst >= 2 * pw &&
        smem <= stream_smem_cap() && stream_ctas_per_sm<T, XT, MOE, MT, RAG, ONE>(W, smem) * sms >= G) {
      best = {W, S, G, smem, 1, pw * W};
      per_warp = pw;
    } else {
      // MT = 8 (what the K split turned away): warps enough that each thread builds at most 8 groups of
      // records, where that many fit (Q6_K 4096 -> 14336 at M = 8: 8 warps, not 7)
      int w = few;
      while (MT == 8 && !MOE && w < best.WPC && (groups + 32 * w - 1) / (32 * w) > 8) ++w;
      best = {w, S, (units + w - 1) / w, smem_for(w), 0, (int64_t)nst * w};
    }
  }
  if (!best.WPC) return best;
  const int per_thread = (groups + 32 * best.WPC - 1) / (32 * best.WPC);  // records each thread builds
  if ((!best.split && 2 * units < best_cap && nst > 16) || per_thread > 8 || (per_thread > 4 && per_thread > per_warp))
    return StreamChoice{0, 0, 0, 0, 0, 0};
  return best;
}

template <int T, typename XT, bool MOE, int MT, bool RAG, bool ONE = false>
StreamChoice stream_choice(const FastArgs& a, int units, size_t fixed) {
  const int nch = StreamRecs<T>::chunks(a.K), nst = (nch + 8 / MT - 1) / (8 / MT);
  return choose_stream<T, XT, MOE, MT, RAG, ONE>(units, fixed, nst,
                                                 (MOE ? a.nx : ONE ? 1 : MT) * nch * (FT<T>::CE / FT<T>::GS));
}
// The stream kernels launched so far (as a graph's kernel nodes name their functions): they trigger
// their dependents at their start. `add`: record f; else whether f is one.
inline bool stream_kernel_seen(const void* f, bool add) {
  static std::mutex mu;
  static std::unordered_set<const void*> seen;
  std::lock_guard<std::mutex> lock(mu);
  if (add) seen.insert(f);
  return seen.count(f) > 0;
}
// Whether the kernel before this launch on `stream` is a stream kernel, so that a dependent launch
// overlaps its last CTAs; after any other kernel (torch's, which never trigger) it cost 0.4 us (NOTES.md
// v13). Known while the stream is captured into a CUDA graph, from the node the launch will follow;
// outside capture, where each launch waits on the host and nothing overlaps, false.
// GGUF_KERNELS_PDL=2: a dependent launch after any kernel (v13's rule, for A/B runs).
inline bool follows_stream_kernel(cudaStream_t stream) {
  static const bool any = env_knob("GGUF_KERNELS_PDL") == 2;
  if (any) return true;
#if CUDART_VERSION >= 13000
  cudaStreamCaptureStatus st;
  const cudaGraphNode_t* deps = nullptr;
  const cudaGraphEdgeData* edges = nullptr;  // asked for, so that edges with data are not a lossy query
  size_t n = 0;
  if (cudaStreamGetCaptureInfo(stream, &st, nullptr, nullptr, &deps, &edges, &n) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  if (st != cudaStreamCaptureStatusActive || n != 1) return false;
  cudaGraphNodeType type;
  cudaKernelNodeParams p = {};
  if (cudaGraphNodeGetType(deps[0], &type) != cudaSuccess || type != cudaGraphNodeTypeKernel ||
      cudaGraphKernelNodeGetParams(deps[0], &p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return stream_kernel_seen(p.func, false);
#else
  return false;
#endif
}
// MoE local (gemv_stream_kernel): the most x rows one of `ctas` CTAs meets in its range of `units`
// units of hN each, x_div pairs an x row.
inline int local_rows(int units, int hN, int x_div, int ctas) {
  int most = 0;
  for (int b = 0; b < ctas; ++b) {
    const int u0 = (int)((int64_t)b * units / ctas), u1 = (int)((int64_t)(b + 1) * units / ctas);
    if (u1 > u0) most = std::max(most, (u1 - 1) / hN / x_div - u0 / hN / x_div + 1);
  }
  return most;
}
template <int T, typename XT, bool MOE, int MT, bool RAG, bool ONE = false>
cudaError_t launch_choice(FastArgs a, StreamChoice ch, cudaStream_t stream) {
  if (!ch.WPC) return cudaErrorNotSupported;
  a.S = ch.S;
  a.split = ch.split;
  // MoE over hit experts: the units were counted for the most hits, so a CTA on every SM
  if constexpr (MOE && MT == 8) ch.ctas = num_sms();
  if (MOE && a.local) {  // the records of the rows the chosen CTAs meet (a.nx was the guess for one a SM)
    const int hN = (a.N + 2 * MT - 1) / (2 * MT), rows = local_rows(a.P * hN, hN, a.x_div, ch.ctas);
    ch.smem += ((int64_t)rows - a.nx) * (int64_t)stream_rec_stride<T, MT>(a.K);
    a.nx = rows;
  }
  // A dependent launch only after a stream kernel, and where the CTAs are one per SM, with shared memory
  // padded to more than half an SM's so that no two share one: the block scheduler places a dependent
  // grid's CTAs on the SMs as the previous kernel's CTAs leave, and it put two on an SM that another
  // kernel's CTA had left early (IQ4_XS 14336 -> 4096 at M = 1: 17.3 -> 27.7 us; NOTES.md v13).
  const auto kernel = gemv_stream_kernel<T, XT, MOE, MT, RAG, ONE>;
  const bool pdl = ch.ctas <= num_sms() && follows_stream_kernel(stream);
  static const bool recorded = stream_kernel_seen(reinterpret_cast<const void*>(kernel), true);  // once a kernel
  (void)recorded;
  const cudaError_t e = stream_attrs<T, XT, MOE, MT, RAG, ONE>();
  if (e != cudaSuccess) return e;
  const DevProps& sm = dev_props();
  const size_t smem = pdl ? std::max(ch.smem, (size_t)(sm.smem / 2 - sm.reserved + 16)) : ch.smem;
  return launch_kernel(kernel, dim3(ch.ctas), dim3(32 * ch.WPC), smem, stream, pdl, a);
}
template <int T, typename XT, bool MOE, int MT, bool RAG>
cudaError_t launch_stream(FastArgs a, int units, size_t fixed, cudaStream_t stream) {
  return launch_choice<T, XT, MOE, MT, RAG>(a, stream_choice<T, XT, MOE, MT, RAG>(a, units, fixed), stream);
}
inline bool knob_one_off() {
  static const bool v = env_off("GGUF_KERNELS_FAST_ONE");
  return v;
}
// GGUF_KERNELS_FAST_ONE1=0: dense M = 1 row pairs keep their former epilogue (and Q4_0, Q4_K, Q5_K v11's
// stage rule against ONE)
inline bool knob_one1_off() {
  static const bool v = env_off("GGUF_KERNELS_FAST_ONE1");
  return v;
}
inline bool knob_one_force() {  // GGUF_KERNELS_FAST_ONE=2: ONE wherever it takes the case (A/B timing)
  static const bool v = env_knob("GGUF_KERNELS_FAST_ONE") == 2;
  return v;
}
// M = 1, or MoE pairs (one x row a unit), on aligned rows: the MT = 1 form (row pairs, a stage of 8
// chunks; MoE pairs with K of at most 4 chunks: the MT = 2 mapping with both tokens the pair's row) or
// ONE, whichever gives the busiest SM fewer stages (ties: the former, unless ONE keeps at least 12
// warps an SM, or 8 for IQ4_XS and MXFP4, whose table decodes ONE cuts most: 4096 -> 4096 -16%, where
// Q4_0 lost 9% and Q5_K 2%; NOTES.md v11). MoE pairs with K of at most 8 chunks, where the former's
// units are one stage each, take ONE wherever it takes them: its units of 4 rows pay the once-a-unit
// work half as often (Qwen3-30B-A3B's gate, K = 2048, Q4_K at T = 8: 27.1 -> 21.0 us, same call;
// NOTES.md v15). Dense Q4_0, Q4_K and Q5_K, whose row pairs keep one value a lane (ONE1, v32), take ONE
// only where it gives the busiest SM under 0.85 of the former's stages (ONE / former, same call: 5120 ->
// 13824 at 0.82 of the stages 0.92-0.96x the time, 1536 -> 8960 at 0.895 1.11-1.17x, 4096 -> 14336 at
// 0.98 1.07-1.10x); they and Q8_0 not with fewer than 8 warps a CTA (few units: 4864 -> 896, 2 warps
// a CTA, 1.30-1.37x; NOTES.md v33). GGUF_KERNELS_FAST_ONE=0: the former only.
template <int T, typename XT, bool MOE>
cudaError_t launch_stream_one_or_old(const FastArgs& a, size_t fixed, cudaStream_t stream) {
  const int P = MOE ? a.P : 1, u2 = P * ((a.N + 3) / 4), u1 = P * ((a.N + 1) / 2);
  const int nch = StreamRecs<T>::chunks(a.K);
  const bool mt2 = MOE && nch <= 4;
  const StreamChoice old =
      mt2 ? stream_choice<T, XT, MOE, 2, false>(a, u2, fixed) : stream_choice<T, XT, MOE, 1, false>(a, u1, fixed);
  if (!knob_one_off()) {
    const StreamChoice one = stream_choice<T, XT, MOE, 2, false, true>(a, u2, fixed);
    constexpr int tie_warps = T == IQ4_XS || T == MXFP4 ? 8 : 12;
    constexpr bool one1_rule = !MOE && (T == Q4_0 || T == Q4_K || T == Q5_K);
    constexpr int min_warps = !MOE && (one1_rule || T == Q8_0) ? 8 : 1;
    const bool fewer = one1_rule && !knob_one1_off()
                           ? 20 * one.work < 17 * old.work
                           : one.work < old.work || (one.work == old.work && one.WPC >= tie_warps);
    if (one.WPC && (knob_one_force() || (MOE && nch <= 8) || !old.WPC || (fewer && one.WPC >= min_warps)))
      return launch_choice<T, XT, MOE, 2, false, true>(a, one, stream);
  }
  if (mt2) return launch_choice<T, XT, MOE, 2, false>(a, old, stream);
  if constexpr (!MOE) {  // dense row pairs with one kept value a lane (ONE1, NOTES.md v32), the same geometry
    if (!knob_one1_off()) return launch_choice<T, XT, MOE, 1, false, true>(a, old, stream);
  }
  return launch_choice<T, XT, MOE, 1, false>(a, old, stream);
}

// M <= stream_max_m() (default 8) goes to gemv_stream_kernel (MT = 1, 2, 4 or 8 tokens) unless
// GGUF_KERNELS_FAST_TILE=1 or the records of K do not fit one CTA; then gemv_fast_kernel, where
// scratch_bytes() > 0.
inline int knob_tile() { static const int v = env_knob("GGUF_KERNELS_FAST_TILE"); return v; }
inline int stream_max_m() {
  static const int v = env_knob("GGUF_KERNELS_FAST_STREAM_MAX_M", 8);
  return v;
}
template <int T, int MT, bool RAG = false>
cudaError_t launch_stream_dense(const FastArgs& a, DType xt, cudaStream_t stream) {
  const int units = (a.N + 2 * MT - 1) / (2 * MT);
  const size_t fixed = MT * stream_rec_stride<T, MT>(a.K);
  return xt == DType::BF16 ? launch_stream<T, __nv_bfloat16, false, MT, RAG>(a, units, fixed, stream)
                           : launch_stream<T, __half, false, MT, RAG>(a, units, fixed, stream);
}
// M = 5..8 (and 3, 4: ks_first), tried before the plain launch: the MT = 8 kernel with K split over a cluster of Z
// CTAs (KS; NOTES.md v16, v17), each holding the records of its slice, one unit a warp, the slices' sums
// met in rank 0's shared memory. Where 8 tokens' records of all of K do not fit a CTA (14336 -> 4096,
// 4096 -> 4096, 4096 -> 1024) it replaces the 16-row tile kernel; where they fit (4096 -> 14336) it
// doubles the warps an SM of the plain launch (7 -> 14). Z: the smallest of 2, 4, 8 that gives 8 warps a
// CTA (one CTA an SM, one wave of clusters), whose slices are whole chunks and 16-byte runs of every row
// (Q6_K's 420-byte chunks: 4-byte runs, copied from the 16-byte boundary below as its stages are).
// GGUF_KERNELS_FAST_KS: 0 off, 2 / 4 / 8 that Z wherever it fits.
inline int knob_ks() {
  static const int v = env_knob("GGUF_KERNELS_FAST_KS", -1);
  return v;
}
// Whether M tokens try the K split before the plain launch: M = 5..8 always; M = 3, 4 where the plain
// MT = 4 launch has at most 4 units an SM, and for the table types (MXFP4, IQ4_XS) everywhere. Same
// call on the H200 (NOTES.md v18), plain / split, us: 14336 -> 4096 M = 4 Q4_K 29.0 / 21.4, Q8_0 32.4 /
// 22.6, MXFP4 34.7 / 24.7; 4096 -> 1024 Q4_0 4.9 / 4.0; 4096 -> 14336 (1792 units) Q8_0 M = 3 18.7 /
// 20.3, MXFP4 M = 4 21.3 / 19.2; M = 2 lost on 19 of 24 rows. GGUF_KERNELS_FAST_KS_MIN_M: the split
// from that M on, everywhere (A/B runs).
template <int T>
bool ks_first(int M, int N) {
  static const int v = env_knob("GGUF_KERNELS_FAST_KS_MIN_M", -1);
  if (v >= 0) return M >= v;
  return M >= 5 || (M >= 3 && ((N + 7) / 8 <= 4 * num_sms() || T == MXFP4 || T == IQ4_XS));
}
// Clusters of z CTAs (WPC warps, smem bytes; a grid of `clusters` of them) of `kernel` that can run at
// once on the current device, asked once per case (the launch path runs on every matmul outside CUDA
// graphs). Every instantiation shares one function type, so the kernel's address is in the key.
template <typename Kern>
int active_clusters(Kern kernel, int clusters, int z, int WPC, size_t smem) {
  static std::mutex mu;
  static std::map<std::tuple<const void*, int, size_t, int, int, int>, int> seen;
  const auto key = std::make_tuple(reinterpret_cast<const void*>(kernel), current_device(), smem, clusters, WPC, z);
  std::lock_guard<std::mutex> lock(mu);
  const auto it = seen.find(key);
  if (it != seen.end()) return it->second;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(clusters * z);
  cfg.blockDim = dim3(32 * WPC);
  cfg.dynamicSmemBytes = smem;
  cudaLaunchAttribute at = cluster_attr(z);
  cfg.attrs = &at;
  cfg.numAttrs = 1;
  int n = 0;
  if (cudaOccupancyMaxActiveClusters(&n, kernel, &cfg) != cudaSuccess) {
    cudaGetLastError();
    n = 0;
  }
  return seen[key] = n;
}
template <int T, typename XT>
cudaError_t launch_stream_ks(const FastArgs& a0, cudaStream_t stream) {
  using L = FT<T>;
  constexpr int MT = 8;
  const int ks = knob_ks();
  if (ks == 0 || a0.M > 8 || !ks_first<T>(a0.M, a0.N)) return cudaErrorNotSupported;
  const int nch = a0.K / L::CE, units = (a0.N + 2 * MT - 1) / (2 * MT);
  const auto kernel = gemv_stream_kernel<T, XT, false, MT, false, false, true>;
  if (stream_attrs<T, XT, false, MT, false, false, true>() != cudaSuccess) return cudaErrorNotSupported;
  const DevProps& sm = dev_props();
  for (int Z : {2, 4, 8}) {
    // slices of whole chunks, starting 16-byte aligned in every row (Q6_K: 4-byte, its stages' copies
    // start at the 16-byte boundary below, kph)
    if ((ks > 0 && Z != ks) || nch % Z != 0 || (nch / Z * L::CB) % (L::MIS ? 4 : 16) != 0) continue;
    FastArgs a = a0;
    a.K = a0.K / Z;
    a.S = 2;
    a.split = 0;
    const size_t fixed = MT * stream_rec_stride<T, MT>(a.K);
    int clusters = num_sms() / Z, WPC = 0;
    size_t smem = 0;
    bool fits = false;
    for (int it = 0; it < 4 && clusters > 0 && !fits; ++it) {  // as many clusters as can run at once
      WPC = (units + clusters - 1) / clusters;
      smem = std::max(fixed + (size_t)WPC * (a.S * 2 * MT * stream_rs<T, MT, false>() + (Z - 1) * 512),
                      (size_t)(sm.smem / 2 - sm.reserved + 16));  // one CTA an SM
      if (WPC > 16 || smem > stream_smem_cap()) break;
      const int n = active_clusters(kernel, clusters, Z, WPC, smem);
      fits = n >= clusters;
      if (!fits) clusters = n;
    }
    if (!fits) continue;
    const int per_thread = (MT * nch / Z * (L::CE / L::GS) + 32 * WPC - 1) / (32 * WPC);
    if (per_thread > 8 || (ks < 0 && WPC < 8 && Z < 8)) continue;
    const bool pdl = clusters * Z <= num_sms() && follows_stream_kernel(stream);
    static const bool recorded = stream_kernel_seen(reinterpret_cast<const void*>(kernel), true);
    (void)recorded;
    return launch_kernel_clustered(kernel, dim3(clusters * Z), dim3(32 * WPC), smem, stream, pdl, Z, a);
  }
  return cudaErrorNotSupported;
}
// GemvArgs as FastArgs (MoE: the pairs' fields too; P, nx and local are the launch's to set).
inline FastArgs fast_args(const GemvArgs& ga, DType xt) {
  FastArgs a = {};
  a.w = ga.w; a.row_bytes = ga.row_bytes; a.N = ga.N; a.K = ga.K; a.M = ga.M; a.x = ga.x; a.x_stride = ga.x_stride;
  a.out = ga.out; a.out_stride = ga.out_stride;
  a.out_bf16 = xt == DType::BF16;
  a.ids = ga.ids; a.ids64 = ga.ids64; a.n_experts = ga.n_experts; a.x_div = ga.x_div; a.expert_bytes = ga.expert_bytes;
  return a;
}
// gemv_stream_kernel for a dense matmul, no scratch; cudaErrorNotSupported when it does not take the case.
template <int T>
cudaError_t launch_stream_any_m(const GemvArgs& ga, DType xt, cudaStream_t stream) {
  const int M = ga.M;
  if (M < 1 || M > stream_max_m() || knob_tile() || (xt != DType::BF16 && xt != DType::F16))
    return cudaErrorNotSupported;
  const FastArgs a = fast_args(ga, xt);
  if (!rows_fit<T>(ga.K, ga.row_bytes)) {
    if constexpr (may_rag<T>()) {
      if (M == 1 && rows_rag<T>(ga.N, ga.K, ga.row_bytes, 0)) return launch_stream_dense<T, 1, true>(a, xt, stream);
    }
    return cudaErrorNotSupported;
  }
  if (M == 1) {
    const size_t fixed = stream_rec_stride<T, 1>(a.K);
    return xt == DType::BF16 ? launch_stream_one_or_old<T, __nv_bfloat16, false>(a, fixed, stream)
                             : launch_stream_one_or_old<T, __half, false>(a, fixed, stream);
  }
  const cudaError_t e = xt == DType::BF16 ? launch_stream_ks<T, __nv_bfloat16>(a, stream)
                                          : launch_stream_ks<T, __half>(a, stream);
  if (e != cudaErrorNotSupported) return e;
  if (M <= 4) return M == 2 ? launch_stream_dense<T, 2>(a, xt, stream) : launch_stream_dense<T, 4>(a, xt, stream);
  return launch_stream_dense<T, 8>(a, xt, stream);
}
// prep_kernel: the records of ga's M tokens into `scratch` (Prep<T>'s layout: B part, then sigma / beta).
template <int T>
cudaError_t launch_prep(const GemvArgs& ga, DType xt, void* scratch, cudaStream_t stream) {
  const int K = ga.K, M = ga.M;
  uint8_t* xb = reinterpret_cast<uint8_t*>(scratch);
  uint8_t* xs = xb + Prep<T>::b_bytes(K, M);
  const dim3 grid((K / FT<T>::GS * M + 127) / 128);
  if (xt == DType::BF16)
    prep_kernel<T, __nv_bfloat16><<<grid, 128, 0, stream>>>(reinterpret_cast<const __nv_bfloat16*>(ga.x), ga.x_stride,
                                                             K, M, xb, xs);
  else if (xt == DType::F16)
    prep_kernel<T, __half><<<grid, 128, 0, stream>>>(reinterpret_cast<const __half*>(ga.x), ga.x_stride, K, M, xb, xs);
  else
    return cudaErrorInvalidValue;
  return cudaGetLastError();
}
// The stream kernel where it takes the case (unless `tile`: benchmarks/gemv_probe.cu compares both
// kernels in one process), else the prep kernel and gemv_fast_kernel on `scratch`.
template <int T>
cudaError_t launch_with(const GemvArgs& ga, DType xt, void* scratch, size_t scratch_size, bool tile,
                        cudaStream_t stream) {
  using L = FT<T>;
  if constexpr (!L::OK) {
    return cudaErrorNotSupported;
  } else {
    if (!tile) {
      const cudaError_t e = launch_stream_any_m<T>(ga, xt, stream);
      if (e != cudaErrorNotSupported) return e;
    }
    const int K = ga.K, M = ga.M, N = ga.N;
    if (scratch_bytes<T>(K, M, ga.row_bytes) == 0 || scratch_size < Prep<T>::bytes(K, M)) return cudaErrorInvalidValue;
    cudaError_t e = launch_prep<T>(ga, xt, scratch, stream);
    if (e != cudaSuccess) return e;
    FastArgs a = fast_args(ga, xt);
    a.xb = reinterpret_cast<uint8_t*>(scratch);
    a.xs = a.xb + Prep<T>::b_bytes(K, M);
    const Choice ch = choose<T>(N, K, M, num_sms());
    a.S = ch.S; a.U = ch.U; a.RS = rs_bytes<T>(ch.U);
    const dim3 grid((unsigned)((N + 15) / 16)), block(32 * ch.W);
    const size_t smem = smem_bytes<T>(ch.W, ch.S, M, ch.U);
    auto kernel = gemv_fast_kernel<T>;
    if (smem > 48 * 1024 && (e = gemv_fast_attrs<T>()) != cudaSuccess) return e;
    return launch_kernel(kernel, grid, block, smem, stream, true, a);
  }
}

// MoE pairs (GEMV_PAIRS args) on gemv_stream_kernel: cudaErrorNotSupported when this path does not
// take the case (type, K, row bytes, dtype, or more than kMoeRecBytes of x records: one CTA per SM
// would be left; ragged rows: more than kMoeRagRecBytes, measured on gpt-oss-20b's gate at T = 8, 64 KB
// of records, 8 warps per SM: 137 us against 123 on gemv_mma_kernel); GGUF_KERNELS_FAST_MOE=0 turns
// it off.
constexpr size_t kMoeRecBytes = 64 * 1024, kMoeRagRecBytes = 32 * 1024;
inline bool knob_moe_off() {
  static const bool v = env_off("GGUF_KERNELS_FAST_MOE");
  return v;
}
// GGUF_KERNELS_FAST_LOCAL=0: every CTA builds the records of all the pairs' x rows (before v17).
inline bool knob_local_off() {
  static const bool v = env_off("GGUF_KERNELS_FAST_LOCAL");
  return v;
}
// Whether `tokens` tokens' MoE pairs run on units over the hit experts (EXP): from 2 tokens, and one
// token whose pairs make at least 8 units an SM (GGUF_KERNELS_FAST_EXP_MIN_T: from that many tokens
// only; 9: off). Same call on the H200 (NOTES.md v18), gpt-oss-20b's experts (MXFP4, K = 2880, 32 x
// top 4), us, row pairs or grouped / EXP: N = 2880 (720 units at T = 1) T = 1 18.2 / 20.1, 2 33.2 /
// 26.7, 4 58.0 / 47.2, 8 100.9 / 76.7; N = 5760 (the fused gate_up, 1440 units) T = 1 33.6 / 27.4, 8
// 186.9 / 134.8.
inline bool exp_takes(int tokens, int P, int N) {
  static const int v = env_knob("GGUF_KERNELS_FAST_EXP_MIN_T", -1);
  if (v >= 0) return tokens >= v;
  return tokens >= 2 || (tokens == 1 && (int64_t)P * ((N + 15) / 16) >= 8 * (int64_t)num_sms());
}
template <int T>
cudaError_t launch_moe(const GemvArgs& ga, DType xt, int P, int min_chunks, cudaStream_t stream) {
  using L = FT<T>;
  if constexpr (!L::OK) {
    return cudaErrorNotSupported;
  } else {
    const int K = ga.K, N = ga.N;
    if (knob_moe_off() || ga.mode != GEMV_PAIRS || P < 1 || (xt != DType::BF16 && xt != DType::F16))
      return cudaErrorNotSupported;
    // Rows of whole 16-byte pieces at any K (Qwen3-30B-A3B's down projection, K = 768: 3 chunks, at T = 8
    // Q4_K 36.1 us grouped by expert, 31.5 here; ragged ones lost: Q6_K 49.8 against 57.1, gpt-oss-20b's
    // MXFP4 gate 101 against 112; same call, NOTES.md v17)
    const bool rag = !rows_fit<T>(K, ga.row_bytes);
    if constexpr (T == MXFP4) {  // one x row a token and at most 8 tokens: units over the hit experts (EXP)
      const int tokens = ga.x_div > 1 && P % ga.x_div == 0 ? P / ga.x_div : 0;
      if (rag && tokens >= 1 && tokens <= 8 && exp_takes(tokens, P, N) && ga.x_div <= 32 && P <= 64 && ga.n_experts < 1024 &&
          ga.x_stride % 8 == 0 && rows_rag<T>(N, K, ga.row_bytes, ga.expert_bytes)) {
        FastArgs a = fast_args(ga, xt);
        a.M = a.nx = tokens;
        a.P = P;
        const size_t fixed = tokens * stream_rec_stride<T, 8>(K) + 4 * (size_t)exp_table_ints(P, ga.n_experts);
        const int units = std::min(ga.n_experts + 1, P) * ((N + 15) / 16);  // the most hits
        const cudaError_t e = xt == DType::BF16 ? launch_stream<T, __nv_bfloat16, true, 8, true>(a, units, fixed, stream)
                                                : launch_stream<T, __half, true, 8, true>(a, units, fixed, stream);
        if (e != cudaErrorNotSupported) return e;
      }
    }
    if (rag && (StreamRecs<T>::chunks(K) < min_chunks || !rows_rag<T>(N, K, ga.row_bytes, ga.expert_bytes)))
      return cudaErrorNotSupported;
    if (ga.x_stride % 8 != 0) return cudaErrorNotSupported;
    // local: each CTA only the records of the x rows its own range of units meets (guessed for a CTA an
    // SM and 2-row units, set for the chosen grid at launch), where that is fewer than all of them
    int nx = (P + ga.x_div - 1) / ga.x_div;
    const int hN = (N + 3) / 4, guess = local_rows(P * hN, hN, ga.x_div, num_sms());
    const bool local = !knob_local_off() && guess < nx;
    if (local) nx = guess + 1;
    const size_t recs = (size_t)nx * stream_rec_stride<T, 1>(K);
    if (recs > (rag ? kMoeRagRecBytes : kMoeRecBytes)) return cudaErrorNotSupported;
    FastArgs a = fast_args(ga, xt);
    a.M = 1;
    a.P = P;
    a.nx = nx;
    a.local = local;
    const size_t fixed = recs + ((size_t)P * 4 + 15) / 16 * 16;
    if constexpr (may_rag<T>()) {
      if (rag) {
        const int units = P * ((N + 1) / 2);
        return xt == DType::BF16 ? launch_stream<T, __nv_bfloat16, true, 1, true>(a, units, fixed, stream)
                                 : launch_stream<T, __half, true, 1, true>(a, units, fixed, stream);
      }
    }
    return xt == DType::BF16 ? launch_stream_one_or_old<T, __nv_bfloat16, true>(a, fixed, stream)
                             : launch_stream_one_or_old<T, __half, true>(a, fixed, stream);
  }
}

}  // namespace fast

template <int T>
size_t gemv_fast_scratch(int K, int M, int64_t row_bytes) {
  return fast::scratch_bytes<T>(K, M, row_bytes);
}
template <int T>
cudaError_t launch_gemv_stream(const GemvArgs& a, DType xt, cudaStream_t stream) {
  return fast::launch_stream_any_m<T>(a, xt, stream);
}
template <int T>
cudaError_t launch_gemv_fast(const GemvArgs& a, DType xt, void* scratch, size_t scratch_size,
                             cudaStream_t stream) {
  return fast::launch_with<T>(a, xt, scratch, scratch_size, true, stream);
}
template <int T>
cudaError_t launch_gemv_fast_moe(const GemvArgs& a, DType xt, int P, int min_chunks, cudaStream_t stream) {
  return fast::launch_moe<T>(a, xt, P, min_chunks, stream);
}

#define GQ_FAST_INSTANTIATE(T)                                        \
  template size_t gemv_fast_scratch<T>(int, int, int64_t);           \
  template cudaError_t launch_gemv_stream<T>(const GemvArgs&, DType, cudaStream_t);  \
  template cudaError_t launch_gemv_fast<T>(const GemvArgs&, DType, void*, size_t, cudaStream_t); \
  template cudaError_t launch_gemv_fast_moe<T>(const GemvArgs&, DType, int, int, cudaStream_t);

}  // namespace gq
