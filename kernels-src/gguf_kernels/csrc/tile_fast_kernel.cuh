// Dense matmul for 9..32 tokens with the scale applied after the product (NOTES.md v14): the CTA of
// tile_kernel.cuh (8 warps whose weight rows are decoded once for a tile of tokens) with the decode
// and activation records of the fast small-M kernels (gemv_fast.cuh). tile_kernel folds each block's
// scale into bf16 weights before the product (v3: ~7 instructions a weight); here a weight becomes an
// fp16 "1024 + u" in one or two instructions and the group's scale multiplies the fp32 product, so
// the decode costs what it costs gemv_stream_kernel at M = 8, for up to 8 NT tokens at once.
//
// A CTA is 8 warps over rows n0 .. n0 + 127 and tokens m0 .. m0 + 8 NT - 1; a stage holds one chunk
// of K of those rows (cp.async) and the prep kernel's records of that chunk's groups for the tile's
// tokens; each warp multiplies its 16 rows' chunk with each group of 8 tokens, as gemv_fast_kernel does
// with one. 128 rows a CTA because every CTA copies its tokens' records of its K (2.4 bytes an element
// and token, against 0.56 of weights for Q4_0): where rows are few, grid.z splits K instead, into an
// fp32 workspace that split_reduce_kernel adds up (16 rows a CTA with 8 warps on 8 chunks of a stage
// copied 4x the weight bytes in records and ran 1.5-2x slower than tile_kernel at 14336 -> 4096).
#pragma once
#include "gemv_fast_launch.cuh"
#include "tile_kernel.cuh"  // launch_split_reduce

namespace gq {
namespace fast {

constexpr int TF_WARPS = 8;

// Shared-memory bytes of one stage of tile_fast_kernel<T, NT>: weights (128 rows at stride
// rs_bytes<T>(1)), then the B records [GPC groups][8 NT tokens][BREC], then per group {sigma, -beta} of
// the 8 NT tokens (8 bytes each) and, for types with mins, their sums S (4 bytes).
template <int T>
struct TileFastGeom {
  using L = FT<T>;
  static constexpr int GPC = L::CE / L::GS, BREC = Prep<T>::BREC, SBREC = L::HAS_MIN ? 12 : 8;
  static constexpr int ROWS = 16 * TF_WARPS, RS = rs_bytes<T>(1), WB = ROWS * RS;
  static GQ_HD constexpr int stage(int TT) { return WB + GPC * TT * (BREC + SBREC); }
};

// a.S stages; a.xb / a.xs: prep_kernel's records of all M tokens; grid.z > 1: this CTA's share of the
// chunks of K, its sums into ws [grid.z][M][N].
template <int T, int NT>
__global__ void __launch_bounds__(32 * TF_WARPS, 2) tile_fast_kernel(const FastArgs a, float* __restrict__ ws) {
  using L = FT<T>;
  using G = TileFastGeom<T>;
  static_assert(L::STEPS == 2 && !L::MIS, "16-byte chunks of two mma steps a group (not Q6_K)");
  constexpr int TT = 8 * NT, GPC = G::GPC, BREC = G::BREC, SBREC = G::SBREC, NTH = 32 * TF_WARPS;
  constexpr int RS = G::RS, WB = G::WB, BB = GPC * TT * BREC, STAGE = G::stage(TT);
  extern __shared__ __align__(16) uint8_t smem[];
  const int S = a.S;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, c = lane & 3;
  const int N = a.N, M = a.M;
  const int n0 = blockIdx.x * G::ROWS, m0 = blockIdx.y * TT, M0 = min(TT, M - m0);
  const int nch = a.K / L::CE, per = (nch + gridDim.z - 1) / gridDim.z;
  const int c0 = min(nch, (int)blockIdx.z * per), c1 = min(nch, c0 + per), GR = Prep<T>::gr(M);

  // Chunk ch's weights (two threads a row) into stage buffer ch % S.
  const int cr = tid >> 1, cj = tid & 1;
  const uint8_t* wrow = a.w + (int64_t)min(n0 + cr, N - 1) * a.row_bytes;
  auto issue_w = [&](int ch) {
    if (ch >= c1) return;
    uint8_t* dst = smem + (ch % S) * STAGE + cr * RS;
    const uint8_t* src = wrow + (int64_t)ch * L::CB;
#pragma unroll
    for (int pc = cj; pc < L::CB / 16; pc += 2) cp_async16(dst + 16 * pc, src + 16 * pc);
  };
  // Chunk ch's records of the tile's M0 tokens (Prep<T>'s layout: [group][M][BREC], then per group GR
  // bytes of {sigma, -beta} pairs, with the pad token of an odd M, and S). Tokens past M0 are left as
  // they are: only their own D columns, which are never stored, read them.
  constexpr int QB = TT * BREC / 16, QS = TT / 2 + (L::HAS_MIN ? TT / 4 : 0);  // pieces a group, at most
  const int PB = M0 * BREC / 16, PS = (M0 * 8 + 15) / 16, PM = (M0 * 4 + 15) / 16;
  auto issue_x = [&](int ch) {
    if (ch >= c1) return;
    uint8_t* dst = smem + (ch % S) * STAGE + WB;
    const int q0 = ch * GPC;
    for (int i = tid; i < GPC * QB; i += NTH) {
      const int q = i / QB, pc = i - q * QB;
      if (pc < PB) cp_async16(dst + q * TT * BREC + 16 * pc, a.xb + ((int64_t)(q0 + q) * M + m0) * BREC + 16 * pc);
    }
    for (int i = tid; i < GPC * QS; i += NTH) {
      const int q = i / QS, pc = i - q * QS;
      const uint8_t* src = a.xs + (int64_t)(q0 + q) * GR;
      uint8_t* d = dst + BB + q * TT * SBREC;
      if (pc < TT / 2) {
        if (pc < PS) cp_async16(d + 16 * pc, src + 8 * m0 + 16 * pc);
      } else if (pc - TT / 2 < PM) {
        cp_async16(d + TT * 8 + 16 * (pc - TT / 2), src + 16 * ((M + 1) / 2) + 4 * m0 + 16 * (pc - TT / 2));
      }
    }
  };

  // The weights do not depend on the prep kernel: ask for the first stages' before waiting on it.
  for (int s = 0; s < S - 1; ++s) { issue_w(c0 + s); cp_async_commit(); }
  grid_dep_wait();
  for (int s = 0; s < S - 1; ++s) { issue_x(c0 + s); cp_async_commit(); }

  float acc[NT][4];
#pragma unroll
  for (int t = 0; t < NT; ++t)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[t][e] = 0.f;
  const int groups = (M0 + 7) >> 3;  // token groups that hold a token

  for (int ch = c0; ch < c1; ++ch) {
    wait_stages(S);  // chunk ch has landed
    __syncthreads();  // and every warp is done with chunk ch - 1, whose stage the next issue refills
    issue_w(ch + S - 1);
    issue_x(ch + S - 1);
    cp_async_commit();
    const uint8_t* st = smem + (ch % S) * STAGE;
    const uint8_t* rg = st + (16 * warp + g) * RS;
    const uint8_t* Bw = st + WB + g * BREC + c * 16;
    const uint8_t* Sw = st + WB + BB;
    // fp16 for every type: its NT token groups would each convert int8 products (v98)
    chunk_as<T, false>(rg, rg + 8 * RS, c, [&](int qq, const uint32_t (&A)[2][4], float sg, float sg8, float og, float og8) {
      const uint8_t* Bq = Bw + qq * TT * BREC;
      const uint8_t* Sq = Sw + qq * TT * SBREC;
      // every token group, held or not (an empty one's columns are never stored): a branch here kept
      // the compiler from issuing the groups' products ahead of their epilogues
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        const uint4 b = *reinterpret_cast<const uint4*>(Bq + 8 * t * BREC);  // token 8t + g, lane c
        const float4 r = *reinterpret_cast<const float4*>(Sq + 64 * t + 16 * c);  // tokens 8t + 2c, + 1
        const float sb[4] = {r.x, r.y, r.z, r.w};
        float D[4];
        group_mma<T, false>(D, A, {b.x, b.y, b.z, b.w});
        epilogue(D, sb, sg, sg8, acc[t]);
        if constexpr (L::HAS_MIN) {
          const float2 m = *reinterpret_cast<const float2*>(Sq + TT * 8 + 32 * t + 8 * c);
          const float Sv[2] = {m.x, m.y};
          epilogue_min(Sv, og, og8, acc[t]);
        }
      }
    });
  }
  cp_async_wait<0>();

  // D fragment of token group t: (row g, token 2c), (g, 2c + 1), (g + 8, 2c), (g + 8, 2c + 1).
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    if (t >= groups) break;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int tok = m0 + 8 * t + 2 * c + (e & 1), row = n0 + 16 * warp + g + 8 * (e >> 1);
      if (tok >= M || row >= N) continue;
      if (gridDim.z > 1) ws[((int64_t)blockIdx.z * M + tok) * N + row] = acc[t][e];
      else store_out(a, (int64_t)tok * a.out_stride + row, acc[t][e]);
    }
  }
}

// ---- launch --------------------------------------------------------------------------------------
// The types it is launched for, from same-run A/Bs on the H200: against the paths they had (NOTES.md
// v14: gemv_mma_kernel to M = 16, tile_kernel above), 1.00-1.25x faster for Q4_0 at M = 9..32, MXFP4
// 1.03-1.17x, IQ4_XS 1.04-1.21x at M = 9..16. Against v31's tile kernel (its time over this kernel's,
// 4096 -> 14336, 14336 -> 4096, 4096 -> 4096): IQ4_XS at M = 16 1.08-1.18 on the two large shapes
// (0.90 on 4096 -> 4096), MXFP4 0.86-1.06 at 16 and 0.74-0.99 at 32, Q4_0 0.81-0.92 at 16 and 32: Q4_0
// and MXFP4 above 16 now take the tile kernel.
template <int T>
constexpr bool tile_fast_type() {
  return T == IQ4_XS || T == MXFP4;
}
// Largest M it takes: 16; GGUF_KERNELS_TILE_FAST_MAX_M overrides (0: off; up to 64, for A/B runs).
inline int tile_fast_max_m() {
  static const int v = std::min(64, env_knob("GGUF_KERNELS_TILE_FAST_MAX_M", -1));
  return v >= 0 ? v : 16;
}
// Experiment knobs (0 = automatic): GGUF_KERNELS_TF_NT (token groups a tile: 2 or 4), _Z (K splits),
// _S (stages).
inline int knob_tf(int i) {
  static const int v[3] = {env_knob("GGUF_KERNELS_TF_NT"), env_knob("GGUF_KERNELS_TF_Z"), env_knob("GGUF_KERNELS_TF_S")};
  return v[i];
}

struct TileFastChoice { int NT, Z, S; int64_t tiles, ctas; size_t smem; };  // ctas: a K split's

// Tiles of 16 tokens up to M = 16, else of 32. Stages: 3 where two CTAs still fit an SM, else 2. K
// splits: the most (up to 8, each at least 2 chunks) that keep the CTAs one wave of two an SM.
template <int T>
TileFastChoice tile_fast_choice(int N, int K, int M) {
  using G = TileFastGeom<T>;
  const int NT = knob_tf(0) ? knob_tf(0) : (M <= 16 ? 2 : 4);
  const int64_t tiles = (M + 8 * NT - 1) / (8 * NT), ctas = (N + G::ROWS - 1) / G::ROWS * tiles;
  const int nch = K / FT<T>::CE;
  int Z = knob_tf(1);
  if (!Z) {
    Z = 1;
    while (Z < 8 && ctas * Z * 2 <= 2 * (int64_t)num_sms() && nch >= 4 * Z) Z *= 2;
  }
  const size_t st = (size_t)G::stage(8 * NT);
  const DevProps& sm = dev_props();
  const size_t two = (size_t)(sm.smem / 2 - sm.reserved);  // a CTA's share where two fit an SM
  const int S = knob_tf(2) ? knob_tf(2) : (3 * st <= two ? 3 : 2);
  return {NT, Z, S, tiles, ctas, S * st};
}
template <int T, int NT>
cudaError_t launch_tile_fast_nt(const FastArgs& a, const TileFastChoice& ch, float* ws,
                                cudaStream_t stream) {
  auto kernel = tile_fast_kernel<T, NT>;
  static std::atomic<uint64_t> attrs{0};  // devices whose limit is raised to their opt-in
  if (ch.smem > 48 * 1024) {
    // all of the SM's shared memory (else the driver may keep L1 and fit one CTA where two were counted)
    const cudaError_t e = smem_attrs_once(attrs, kernel, (size_t)dev_props().optin, 100);
    if (e != cudaSuccess) return e;
  }
  const dim3 grid((unsigned)((a.N + TileFastGeom<T>::ROWS - 1) / TileFastGeom<T>::ROWS), (unsigned)ch.tiles, (unsigned)ch.Z);
  // a dependent launch of the prep kernel, which triggers at its start
  cudaError_t e = launch_kernel(kernel, grid, dim3(32 * TF_WARPS), ch.smem, stream, true, a, ws);
  if (e != cudaSuccess || ch.Z == 1) return e;
  if (a.out_bf16) return launch_split_reduce(ws, ch.Z, a.M, a.N, reinterpret_cast<__nv_bfloat16*>(a.out), a.out_stride, stream);
  return launch_split_reduce(ws, ch.Z, a.M, a.N, reinterpret_cast<__half*>(a.out), a.out_stride, stream);
}

}  // namespace fast

namespace fast {
// The launch (`ch`) for (T, N, K, M, row_bytes) and its scratch bytes (the prep records, then with K
// split the fp32 workspace [Z][M][N]), or 0 when this kernel does not take the case.
template <int T>
size_t tile_fast_plan(int N, int K, int M, int64_t row_bytes, TileFastChoice& ch) {
  if constexpr (!tile_fast_type<T>()) {
    return 0;
  } else {
    if (M <= 8 || M > tile_fast_max_m() || !rows_fit<T>(K, row_bytes)) return 0;
    ch = tile_fast_choice<T>(N, K, M);
    // at least one CTA an SM (IQ4_XS / MXFP4 4096 -> 4096 at M = 9..16, on 128 CTAs: 0.81-0.84x)
    if (ch.ctas * ch.Z < num_sms() || ch.tiles > 65535 || ch.smem > (size_t)dev_props().optin) return 0;
    return Prep<T>::scratch(K, M) + (ch.Z > 1 ? (size_t)ch.Z * M * N * sizeof(float) : 0);
  }
}
}  // namespace fast

template <int T>
size_t tile_fast_scratch(int N, int K, int M, int64_t row_bytes) {
  fast::TileFastChoice ch;
  return fast::tile_fast_plan<T>(N, K, M, row_bytes, ch);
}

// The prep kernel (records of the M tokens at the start of `scratch`), then tile_fast_kernel.
template <int T>
cudaError_t launch_tile_fast(const GemvArgs& ga, DType xt, void* scratch, size_t scratch_size, cudaStream_t stream) {
  using namespace fast;
  if constexpr (!tile_fast_type<T>()) {
    return cudaErrorNotSupported;
  } else {
    const int K = ga.K, M = ga.M;
    TileFastChoice ch;
    const size_t need = tile_fast_plan<T>(ga.N, K, M, ga.row_bytes, ch);
    if (need == 0 || scratch_size < need || (xt != DType::BF16 && xt != DType::F16)) return cudaErrorNotSupported;
    cudaError_t e = launch_prep<T, false>(ga, xt, scratch, stream);
    if (e != cudaSuccess) return e;
    FastArgs a = fast_args(ga, xt);
    a.xb = reinterpret_cast<uint8_t*>(scratch);
    a.xs = a.xb + Prep<T>::b_bytes(K, M);
    a.S = ch.S;
    float* ws = reinterpret_cast<float*>(static_cast<uint8_t*>(scratch) + Prep<T>::scratch(K, M));
    switch (ch.NT) {
      case 2: return launch_tile_fast_nt<T, 2>(a, ch, ws, stream);
      case 4: return launch_tile_fast_nt<T, 4>(a, ch, ws, stream);
      default: return cudaErrorNotSupported;
    }
  }
}

#define GQ_TILE_FAST_INSTANTIATE(T)                                \
  template size_t tile_fast_scratch<T>(int, int, int, int64_t);    \
  template cudaError_t launch_tile_fast<T>(const GemvArgs&, DType, void*, size_t, cudaStream_t);

}  // namespace gq
