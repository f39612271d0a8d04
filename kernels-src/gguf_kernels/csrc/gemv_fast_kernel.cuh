// Device side of the fast small-M matmul (layout and decoders: gemv_fast.cuh). Each fast_*.cu
// instantiates it for one type.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>

#include "gemv_fast.cuh"
#include "launch.h"

namespace gq {
namespace fast {

__device__ __forceinline__ void cp16(void* smem, const void* gmem) {
  const uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void wait_n() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }
__device__ __forceinline__ void wait_stages(int S) {  // S - 2 groups may stay in flight
  if (S >= 4) wait_n<2>();
  else if (S == 3) wait_n<1>();
  else wait_n<0>();
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
  void* out;
  int64_t out_stride;
  int out_bf16;
  int S;   // pipeline stages
  int U;   // type chunks (FT<T>::CE elements) per stage: one row's bytes per stage are U * CB, contiguous
  int RS;  // shared-memory row stride (rs_bytes<T>(U))
};

// Row stride of a stage holding U chunks: a multiple of 16 with an odd number of 16-byte units, so
// the 8 rows g (stride RS/4 words = 4 mod 8) and 4 lanes c hit 32 different banks.
template <int T>
GQ_HD int rs_bytes(int U) {
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
template <int T, typename XT>
__global__ void __launch_bounds__(128) prep_kernel(const XT* __restrict__ x, int64_t x_stride, int K, int M,
                                                  uint8_t* __restrict__ xb, uint8_t* __restrict__ xs) {
  using L = FT<T>;
  grid_dep_launch();  // let the matmul start fetching weights now
  const int nG = K / L::GS;
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= nG * M) return;
  const int G = idx / M, t = idx - G * M;
  const XT* xp = x + (int64_t)t * x_stride + (int64_t)G * L::GS;
  float v[L::GS];
#pragma unroll
  for (int i = 0; i < L::GS / 8; ++i) {
    const uint4 r = *reinterpret_cast<const uint4*>(xp + 8 * i);
    const uint32_t wds[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 f = to_f2(XT(), wds[j]);
      v[8 * i + 2 * j] = f.x;
      v[8 * i + 2 * j + 1] = f.y;
    }
  }
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

// ---- M = 1: two rows per warp, the "diagonal" mapping (NOTES.md v5) -----------------------------
// A stage is 8 consecutive chunks of K of two adjacent rows r0, r1 (two contiguous runs of memory).
// mma.m16n8k16's A row g is chunk g of r0 and A row g + 8 chunk g of r1 (lane (g, c) decodes them
// exactly as gemv_fast_kernel decodes its rows g, g + 8), and B's column g holds the activations of
// chunk g (the prep records of that chunk's groups). The diagonal then carries the dot products:
// D[g][g] (lane (g, g / 2), element g & 1) for r0, D[g + 8][g] for r1; the other 7/8 of the product
// is discarded, which costs nothing at M = 1. Each warp streams whole rows instead of 16 rows x one
// chunk, and there are N / 2 warps instead of N / 16 x (split of K) (v4: at most ~2.8 TB/s for that
// copy pattern alone, against 3.5 TB/s for contiguous runs; gemv_probe.cu).
template <int T>
__global__ void __maxnreg__(96) gemv_diag_kernel(const FastArgs a) {
  using L = FT<T>;
  constexpr int STEPS = L::STEPS, GPC = L::CE / L::GS, SEG = 8;
  const int GR = Prep<T>::gr(1);
  extern __shared__ __align__(16) uint8_t smem[];

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, W = blockDim.x >> 5;
  const int g = lane >> 2, c = lane & 3;
  const int N = a.N, S = a.S, RS = a.RS, STAGE = 2 * RS;
  const int pair = blockIdx.x * blockDim.y + threadIdx.y;
  const int r0 = min(2 * pair, N - 1);
  const int64_t rb1 = r0 + 1 < N ? a.row_bytes : 0;  // an odd last row is read twice, stored once
  uint8_t* buf = smem + (size_t)(threadIdx.y * W + warp) * S * STAGE;
  const uint8_t* w0 = a.w + (int64_t)r0 * a.row_bytes;

  const int nch = a.K / L::CE, nst = (nch + SEG - 1) / SEG;
  const int myst = nst > warp ? (nst - warp + W - 1) / W : 0;

  // stage i of this warp (chunks SEG * (warp + i * W) ...) into stage buffer `st`: lanes walk the
  // 16-byte pieces of the two runs in memory order
  auto issue = [&](int i, int st) {
    if (i < myst) {
      const int c0 = SEG * (warp + i * W);
      const int P = min(SEG, nch - c0) * (L::CB / 16);
      const uint8_t* src = w0 + (int64_t)c0 * L::CB;
      uint8_t* dst = buf + st * STAGE;
      for (int p = lane; p < 2 * P; p += 32) {
        const int r = p >= P, pc = p - r * P;
        cp16(dst + r * RS + 16 * pc, src + r * rb1 + 16 * pc);
      }
    }
  };
  for (int s = 0; s < S - 1; ++s) { issue(s, s); commit(); }
  grid_dep_wait();  // the prep records are read straight from global memory below

  float acc0 = 0.f, acc1 = 0.f;
  const bool on_diag = c == (g >> 1);
  int cur = 0;
  for (int i = 0; i < myst; ++i) {
    wait_stages(S);
    __syncwarp();
    issue(i + S - 1, cur == 0 ? S - 1 : cur - 1);
    commit();
    const int c0 = SEG * (warp + i * W);
    // lanes whose chunk is past K (a short last stage) decode chunk 0 against zero activations
    const bool live = g < nch - c0;
    const int cg = live ? g : 0;
    const uint8_t* rg = buf + cur * STAGE + cg * L::CB;
    const int64_t G0 = (int64_t)(c0 + cg) * GPC;  // the lane's first group
    const uint8_t* Bp = a.xb + G0 * Prep<T>::BREC + c * (8 * STEPS);
    const uint8_t* Sp = a.xs + G0 * GR;
    // all of the chunk's B records up front: one round trip to L1/L2 per chunk, not per group
    uint4 bq[GPC];
#pragma unroll
    for (int q = 0; q < GPC; ++q) {
      if constexpr (STEPS == 2) bq[q] = live ? *reinterpret_cast<const uint4*>(Bp + q * Prep<T>::BREC) : make_uint4(0, 0, 0, 0);
      else {
        const uint2 r = live ? *reinterpret_cast<const uint2*>(Bp + q * Prep<T>::BREC) : make_uint2(0, 0);
        bq[q] = make_uint4(r.x, r.y, 0, 0);
      }
    }
    L::chunk(rg, rg + RS, c, [&](int q, const uint32_t (&A)[2][4], float sg, float sg8, float og, float og8) {
      const uint32_t b[4] = {bq[q].x, bq[q].y, bq[q].z, bq[q].w};
      float D[4];
      mma16816_z(D, A[0], b[0], b[1]);
      if constexpr (STEPS == 2) mma16816(D, A[1], b[2], b[3]);
      if (on_diag && live) {
        const float2 sb = *reinterpret_cast<const float2*>(Sp + q * GR);  // {sigma, -beta}
        const float d0 = (g & 1) ? D[1] : D[0], d1 = (g & 1) ? D[3] : D[2];
        acc0 = fmaf(sg, fmaf(sb.x, d0, sb.y), acc0);
        acc1 = fmaf(sg8, fmaf(sb.x, d1, sb.y), acc1);
        if constexpr (L::HAS_MIN) {
          const float Sx = *reinterpret_cast<const float*>(Sp + q * GR + 16);
          acc0 = fmaf(og, Sx, acc0);
          acc1 = fmaf(og8, Sx, acc1);
        }
      }
    });
    __syncwarp();
    cur = cur + 1 == S ? 0 : cur + 1;
  }
  wait_n<0>();
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    acc0 += __shfl_xor_sync(0xFFFFFFFFu, acc0, o);
    acc1 += __shfl_xor_sync(0xFFFFFFFFu, acc1, o);
  }
  if (W > 1) {  // warps of one pair split K: partial sums meet in shared memory
    __syncthreads();
    float* red = reinterpret_cast<float*>(smem) + threadIdx.y * 2 * W;
    if (lane == 0) { red[2 * warp] = acc0; red[2 * warp + 1] = acc1; }
    __syncthreads();
    if (warp != 0) return;
    for (int w = 1; w < W; ++w) { acc0 += red[2 * w]; acc1 += red[2 * w + 1]; }
  }
  if (lane == 0 && 2 * pair < N) {
    store_out(a, 2 * pair, acc0);
    if (2 * pair + 1 < N) store_out(a, 2 * pair + 1, acc1);
  }
}

// ---- launch --------------------------------------------------------------------------------------

inline int env_knob(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : 0;
}

// Scratch bytes for the prep records, or 0 when this path does not take (T, K, M, row_bytes).
template <int T>
size_t scratch_bytes(int K, int M, int64_t row_bytes) {
  using L = FT<T>;
  if constexpr (!L::OK) {
    return 0;
  } else {
    // Q6_K (16-element groups: twice the B records, 4 instructions per weight) measured no faster
    // than gemv_mma_kernel at M = 1 and slower at M = 8 (NOTES.md v4): left to that kernel for now
    // (the decoder here is checked on the host and on the GPU with GGUF_KERNELS_FAST_Q6K=1).
    static const int q6k = env_knob("GGUF_KERNELS_FAST_Q6K");
    const int max_m = T == Q6_K ? (q6k ? 8 : 0) : 8;
    if (M < 1 || M > max_m || K <= 0 || K % L::CE != 0 || row_bytes % 16 != 0) return 0;
    if (row_bytes != (int64_t)K / Traits<T>::BLOCK * Traits<T>::BYTES) return 0;
    return (Prep<T>::bytes(K, M) + 255) / 256 * 256;
  }
}

struct Choice { int W, S, U; };

// Resident CTAs per SM for (W warps, smem bytes), from the occupancy calculator (registers, shared
// memory, threads), cached per (W, S, M).
template <int T>
int ctas_per_sm(int W, int S, int M, int U, size_t smem) {
  static int cache[3][5][3][8];
  static bool init = false;
  if (!init) {
    for (auto& a : cache) for (auto& b : a) for (auto& c : b) for (int& v : c) v = -1;
    init = true;
  }
  int wi = 0;
  while ((1 << wi) < W) ++wi;
  const int ui = U >= 4 ? 2 : U - 1;
  int& v = cache[ui][wi][S - 2][M - 1];
  if (v < 0) {
    int n = 0;
    if (smem > 48 * 1024)
      cudaFuncSetAttribute(gemv_fast_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, gemv_fast_kernel<T>, 32 * W, smem) != cudaSuccess) {
      cudaGetLastError();
      n = 0;
    }
    v = n;
  }
  return v;
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
// once (one wave), and among those the most weight bytes in flight per SM.
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
      if (smem > 200 * 1024) continue;
      const int per_sm = ctas_per_sm<T>(W, S, M, U, smem);
      if (per_sm < 1) continue;
      const int mych = (nch + W - 1) / W;
      const bool one_wave = tiles <= sms * per_sm;
      const double warps_sm = std::min<double>((double)tiles * W / sms, (double)per_sm * W);
      const double inflight = warps_sm * std::min(S - 1, mych) * 16.0 * U * L::CB;
      // fewer than ~8 warps per SM leave the decode latency-bound (v4: 6.8 warps/SM for IQ4_XS)
      const double score = (one_wave ? 1e12 : 0.0) + inflight * std::min(1.0, warps_sm / 8.0) - 1e-3 * smem;
      if (score > best_score) { best_score = score; best = {W, S, U}; }
    }
  }
  return best;
}

// M = 1 (gemv_diag_kernel): PW row pairs per CTA, W warps per pair splitting K, S stages. Enough
// warps for ~16 per SM (one row pair is one warp's whole K unless N is small).
struct DiagChoice { int PW, W, S; };
inline int knob_nodiag() { static const int v = env_knob("GGUF_KERNELS_FAST_NODIAG"); return v; }
inline int knob_pw() { static const int v = env_knob("GGUF_KERNELS_FAST_PW"); return v; }
template <int T>
DiagChoice choose_diag(int N, int K) {
  using L = FT<T>;
  const int pairs = (N + 1) / 2, nst = (K / L::CE + 7) / 8;
  int W = 1;
  while (W < 8 && 2 * W <= nst && pairs * W < 2048) W *= 2;
  if (knob_w()) W = std::min(knob_w(), nst);
  const int PW = knob_pw() ? knob_pw() : std::max(1, 4 / W);
  const int S = knob_s() ? knob_s() : 2;
  return {PW, W, S};
}

// diag: M = 1 through gemv_diag_kernel (launch() passes !GGUF_KERNELS_FAST_NODIAG; benchmarks/gemv_probe.cu
// calls this directly to compare both kernels in one process).
template <int T>
cudaError_t launch_with(const GemvArgs& ga, DType xt, void* scratch, size_t scratch_size, int pdl, bool diag,
                        cudaStream_t stream) {
  using L = FT<T>;
  if constexpr (!L::OK) {
    return cudaErrorNotSupported;
  } else {
    const int K = ga.K, M = ga.M, N = ga.N;
    if (scratch_bytes<T>(K, M, ga.row_bytes) == 0 || scratch_size < Prep<T>::bytes(K, M)) return cudaErrorInvalidValue;
    uint8_t* xb = reinterpret_cast<uint8_t*>(scratch);
    uint8_t* xs = xb + Prep<T>::b_bytes(K, M);
    const int nthreads = K / L::GS * M;
    const dim3 pgrid((nthreads + 127) / 128);
    if (xt == DType::BF16)
      prep_kernel<T, __nv_bfloat16><<<pgrid, 128, 0, stream>>>(reinterpret_cast<const __nv_bfloat16*>(ga.x),
                                                               ga.x_stride, K, M, xb, xs);
    else if (xt == DType::F16)
      prep_kernel<T, __half><<<pgrid, 128, 0, stream>>>(reinterpret_cast<const __half*>(ga.x), ga.x_stride, K, M,
                                                        xb, xs);
    else
      return cudaErrorInvalidValue;
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;

    FastArgs a;
    a.w = ga.w; a.row_bytes = ga.row_bytes; a.N = N; a.K = K; a.M = M;
    a.xb = xb; a.xs = xs; a.out = ga.out; a.out_stride = ga.out_stride;
    a.out_bf16 = xt == DType::BF16;
    void (*kernel)(FastArgs);
    dim3 grid, block;
    size_t smem;
    if (M == 1 && !L::MIS && diag) {
      const DiagChoice dc = choose_diag<T>(N, K);
      kernel = gemv_diag_kernel<T>;
      a.S = dc.S; a.U = 1; a.RS = 8 * L::CB;
      grid = dim3((unsigned)((N / 2 + (N & 1) + dc.PW - 1) / dc.PW));
      block = dim3(32 * dc.W, dc.PW);
      smem = (size_t)dc.PW * dc.W * dc.S * 2 * a.RS;
    } else {
      const Choice ch = choose<T>(N, K, M, num_sms());
      kernel = gemv_fast_kernel<T>;
      a.S = ch.S; a.U = ch.U; a.RS = rs_bytes<T>(ch.U);
      grid = dim3((unsigned)((N + 15) / 16));
      block = dim3(32 * ch.W);
      smem = smem_bytes<T>(ch.W, ch.S, M, ch.U);
    }
    static bool raised[2] = {false, false};  // per kernel: dynamic shared memory limit raised
    bool& big = raised[kernel == gemv_diag_kernel<T>];
    if (smem > 48 * 1024 && !big) {
      e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
      if (e != cudaSuccess) return e;
      big = true;
    }
    if (pdl) {
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = grid;
      cfg.blockDim = block;
      cfg.dynamicSmemBytes = smem;
      cfg.stream = stream;
      cudaLaunchAttribute attr[1];
      attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attr[0].val.programmaticStreamSerializationAllowed = 1;
      cfg.attrs = attr;
      cfg.numAttrs = 1;
      e = cudaLaunchKernelEx(&cfg, kernel, a);
      if (e == cudaSuccess) return cudaGetLastError();
      cudaGetLastError();  // fall back to a plain launch
    }
    kernel<<<grid, block, smem, stream>>>(a);
    return cudaGetLastError();
  }
}

template <int T>
cudaError_t launch(const GemvArgs& ga, DType xt, void* scratch, size_t scratch_size, int pdl, cudaStream_t stream) {
  return launch_with<T>(ga, xt, scratch, scratch_size, pdl, !knob_nodiag(), stream);
}

}  // namespace fast

template <int T>
size_t gemv_fast_scratch(int K, int M, int64_t row_bytes) {
  return fast::scratch_bytes<T>(K, M, row_bytes);
}
template <int T>
cudaError_t launch_gemv_fast(const GemvArgs& a, DType xt, void* scratch, size_t scratch_size, int pdl,
                             cudaStream_t stream) {
  return fast::launch<T>(a, xt, scratch, scratch_size, pdl, stream);
}

#define GQ_FAST_INSTANTIATE(T)                                        \
  template size_t gemv_fast_scratch<T>(int, int, int64_t);           \
  template cudaError_t launch_gemv_fast<T>(const GemvArgs&, DType, void*, size_t, int, cudaStream_t);

}  // namespace gq
