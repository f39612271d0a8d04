// Tile matmul on tensor cores: dense M > 8 and MoE (token, slot) pairs, one weight decode per tile
// of tokens. Each type_*.cu instantiates it for one ggml type.
//
// A CTA of 8 warps owns 128 weight rows and a tile of up to 8NT tokens: dense, rows m0 .. of x;
// MoE, one entry of moe_route's chunk table (pairs of one expert).
// Per stage of 256 elements the CTA copies its rows' bytes (the chunk rounded out to 16-byte
// boundaries, so every block keeps its file alignment modulo 16: by tensor-map boxes, bulk copies
// or cp.async pieces, the copies' comment below) and the tile's activations (cp.async) into shared
// memory, S stages deep. Every warp decodes its 16 rows
// once per unit (unit_mma, as gemv_mma_kernel) and multiplies them with each
// group of 8 tokens that holds a token, reading x from shared memory. So a weight is decoded once
// per 8NT tokens and an activation read from memory once per 16W rows (gemv_mma_kernel: once per
// 16 rows, which made x, not the weights, most of its traffic). Where the rows and tiles give too
// few CTAs to fill the GPU, grid.z splits K: each split writes fp32 partial sums to a workspace and
// split_reduce_kernel adds them into the output.
#pragma once
#include "kernels.cuh"
#include "tensor_map.cuh"

namespace gq {

constexpr int TILE_WARPS = TILE_ROWS / 16;  // a warp per 16 rows

template <int T, int NT>
struct TileGeom {
  static constexpr int CE = MmaGeom<T>::CE, CB = MmaGeom<T>::CB;
  static constexpr int ROWBUF = MmaGeom<T>::ROWBUF, PMAX = MmaGeom<T>::PMAX;
  static_assert(CE == TILE_CHUNK, "tile_splits counts K in the kernel's stages");
  // Bytes per token per stage. The +32 puts the 8-byte B loads of tokens g = 0..3 (one half-warp)
  // in different bank quarters.
  static constexpr int XPITCH = CE * 2 + 32;
  static constexpr size_t STAGE = (size_t)TILE_ROWS * ROWBUF + 8 * NT * XPITCH, IDS = 2 * 8 * NT * sizeof(int);
  // A stage's weight barrier, for up to three stages, where the weights come by bulk copies (tile_kernel's BULK) or
  // by tensor map (MAP); unused by NT = 1's cp.async form, whose stage count S and CTAs an SM the 24 bytes change for
  // no type.
  static constexpr size_t BARS = 3 * sizeof(uint64_t);
  // Three stages where two CTAs still fit on an SM (2 x 114 KB), else two: the first H200 runs had
  // the tile kernel twice as slow wherever its shared memory allowed one CTA (8 warps) per SM.
  static constexpr int S = 3 * STAGE + IDS + BARS <= 113 * 1024 ? 3 : 2;
  static constexpr size_t SMEM = S * STAGE + IDS + BARS;
  // CTAs an SM, for the registers' cap: three where three fit the H100's / H200's 228 KB an SM (1 KB of it reserved a
  // CTA): the tiles of 8 tokens with row slots of at most 160 bytes (IQ4_XS, Q4_K, MXFP4, Q4_0, ...), which then run
  // at most 80 registers; else two, at most 128 (the NT = 8 forms use 110-126). Those over 80 before ran two CTAs an SM:
  // held to 80, Qwen3-30B-A3B's down projection at T = 32 is 5-9% faster (Q2_K, IQ1_M, NVFP4, IQ4_NL; H100, NOTES.md
  // v128).
  static constexpr int CTAS = 3 * (SMEM + 1024) <= 228 * 1024 ? 3 : 2;
};

// The tile kernel's last parameter: for its MAP form (v130, v132) the weights as a 2-D tensor map of super-rows
// of 2^lg rows (encode_tile_map), encoded at the launch; empty elsewhere.
template <bool USED>
struct TileMap {};
template <>
struct TileMap<true> {
  CUtensorMap map;
  int lg;
};

// MAP: each stage's weights by 2^tm.lg copies of the tensor map tm (the copies' comment below)
template <int T, int NT, typename XT, bool MAP>
__global__ void __launch_bounds__(32 * TILE_WARPS, TileGeom<T, NT>::CTAS)
    tile_kernel(const GemvArgs a, float* __restrict__ ws, const __grid_constant__ TileMap<MAP> tm) {
  using G = TileGeom<T, NT>;
  constexpr int TT = 8 * NT, CE = G::CE, S = G::S, CB = G::CB, ROWBUF = G::ROWBUF, PMAX = G::PMAX, XPITCH = G::XPITCH;
  constexpr bool BULK = NT >= 2 && !MAP;  // weight rows by bulk copies (the copies' comment below)
  constexpr int QA = NT >= 4 ? 1 : 4 / NT;  // independent accumulators per token group (mma latency)
  constexpr bool BLOCK32 = Traits<T>::BLOCK == 32;
  // 128: the tensor copies' destinations; a name of its own, since kernels.cuh declares its dsmem 16-byte aligned in
  // the same files (declared again with another alignment, it draws nvcc's warning 1886)
  extern __shared__ __align__(128) uint8_t tile_smem[];

  constexpr int rows = TILE_ROWS;
  constexpr int NTH = 32 * TILE_WARPS;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, c = lane & 3;
  const int N = a.N, K = a.K;
  const int n0 = blockIdx.x * rows;
  const int wstage = rows * ROWBUF;
  uint8_t* wbuf = tile_smem;
  uint8_t* xbuf = tile_smem + S * wstage;
  int* xrow = reinterpret_cast<int*>(xbuf + S * TT * XPITCH);
  int* orow = xrow + TT;
  uint64_t* wbar = reinterpret_cast<uint64_t*>(orow + TT);  // stage st's weights: phase k (mod 2) holds its k-th use
  int lg = 0;  // MAP: a map row holds 2^lg weight rows
  if constexpr (MAP) lg = tm.lg;
  if ((BULK || MAP) && tid == 0)
    for (int st = 0; st < S; ++st) mbar_init_n(&wbar[st], MAP ? 1 << lg : rows);

  int M;
  int64_t expert = 0;
  if (a.mode == GEMV_DENSE) {
    const int m0 = blockIdx.y * TT;
    M = min(TT, a.M - m0);
    if (tid < TT) xrow[tid] = orow[tid] = m0 + tid;
  } else {  // GEMV_CHUNKS
    const int4 ch = a.chunks[blockIdx.y];
    M = ch.z;
    if (M <= 0) return;  // unused table entry (the whole CTA)
    expert = ch.x;
    if (tid < M) {
      const int p = a.sorted[ch.y + tid];
      xrow[tid] = p / a.x_div;
      orow[tid] = p;
    }
  }
  __syncthreads();
  XT* out = reinterpret_cast<XT*>(a.out);
  // out[orow[tok], row] = v, or this split's partial sum into the workspace.
  auto store = [&](int tok, int row, float v) {
    if (gridDim.z > 1) ws[((int64_t)blockIdx.z * a.out_rows + orow[tok]) * N + row] = v;
    else out[(int64_t)orow[tok] * a.out_stride + row] = XIO<XT>::cvt(v);
  };
  if (a.mode != GEMV_DENSE && (expert < 0 || expert >= a.n_experts)) {  // unroutable pairs: zero rows
    for (int i = tid; i < M * rows; i += NTH) {
      const int j = i / rows, r = n0 + i % rows;
      if (r < N) store(j, r, 0.f);
    }
    return;
  }

  const uint8_t* wbase = a.w + expert * a.expert_bytes;
  const uintptr_t wend = reinterpret_cast<uintptr_t>(wbase + (int64_t)N * a.row_bytes);
  const bool tail = tail_of(n0 + rows - 1, N, wend);
  const XT* xb = reinterpret_cast<const XT*>(a.x);
  const int nunits = (K + 63) >> 6;
  // This split's chunks of K: [c0, c1).
  const int nchunks = (K + CE - 1) / CE, per = (nchunks + gridDim.z - 1) / gridDim.z;
  const int c0 = min(nchunks, (int)blockIdx.z * per), c1 = min(nchunks, c0 + per);
  // Copies into stage ch % S. Weights: by tensor map (MAP, below) wherever the launch encodes one; else, tiles of 16
  // tokens or more (v127): thread r < 128 copies row n0 + r's
  // chunk, its 16-byte superset (rounded_pieces), as one bulk copy counted on the stage's barrier (wbar: 128 arrivals
  // a phase, one a row thread, each with its copy's bytes as expected transactions). That issues ~40% fewer
  // instructions a stage, 2-6% faster at MoE T = 512 and dense M = 16..64 on the H100, but 1-6% slower on tiles of 8
  // (MoE at T = 32: NOTES.md v127), which keep the cp.async loop: 8 threads a row taking pieces p,
  // p + 8, ..., rows tid / 8 + 32 i (a warp's copy covers 128 contiguous bytes of each of 4 rows, NOTES.md v31), each
  // thread's share fixed for the whole loop. Rows past N are not copied (a bulk row thread only arrives): their stage
  // bytes are stale, and their products are never stored. Where the matrix ends off a 16-byte boundary (tail), its
  // last row's last chunk goes by cp_async_piece<true>, which reads nothing past the end, in the activations' cp.async
  // group. MAP (v130 for tiles of 8, v132 for every tile): the map's rows are super-rows of G = 2^lg weight rows,
  // G x row_bytes a multiple of 16 bytes
  // (encode_tile_map); thread j < G copies position j of the 128 / G super-rows n0 / G .. as one box, each row's ROWBUF
  // bytes from the 16-byte boundary below its chunk's start, into slots j x 128 / G .. (rows position-major: row r in
  // slot (r % G) x 128 / G + r / G, its chunk at the offset the cp.async form gives it). Rows past N come from the
  // next expert (never stored) or, past the last, as the map's zeros, as do bytes past a super-row's end.
  // Activations: piece tid % 32 of tokens tid / 32 + 8 i.
  constexpr int TPR = 8, RPP = NTH / TPR;
  static_assert(rows % RPP == 0 && CE / 8 == 32 && NTH % 32 == 0, "copy shares");
  const int cr = tid / TPR, cp = tid % TPR, xp = tid & 31, xj = tid >> 5;
  const uint8_t* prow = wbase + (int64_t)(n0 + cr) * a.row_bytes;
  const bool copier = n0 + tid < N, last_row = tail && n0 + tid == N - 1;  // BULK's row threads (tid < rows)
  const uint8_t* wrow = wbase + (int64_t)(n0 + min(tid, rows - 1)) * a.row_bytes;
  const int64_t ppass = (int64_t)RPP * a.row_bytes;
  auto issue = [&](int ch) {
    if (ch < c1) {
      const int st = ch % S;
      const uint32_t bytes = (uint32_t)min((int64_t)CB, a.row_bytes - (int64_t)ch * CB);  // the row's in chunk ch
      if constexpr (MAP) {
        if (tid < (1 << lg)) {
          const int sub = rows >> lg;
          mbar_expect_bytes(&wbar[st], (uint32_t)(sub * ROWBUF));
          tensor_copy_2d((uint32_t)__cvta_generic_to_shared(wbuf + st * wstage + tid * sub * ROWBUF), &tm.map,
                         ((tid * (int)a.row_bytes + ch * CB) & ~15) / 4, (int)((expert * N + n0) >> lg), &wbar[st]);
        }
      } else if constexpr (BULK) {
        if (tid < rows) {
          uint8_t* ws = wbuf + st * wstage + tid * ROWBUF;
          if (copier) {
            const uintptr_t s = reinterpret_cast<uintptr_t>(wrow + (int64_t)ch * CB);
            const uint32_t np = (uint32_t)rounded_pieces(s, bytes);
            if (last_row && ch == nchunks - 1) {
#pragma unroll 1
              for (int pc = 0; pc < (int)np; ++pc) cp_async_piece<true>(ws, s, pc, wend);
              mbar_arrive(&wbar[st]);
            } else {
              mbar_expect_bytes(&wbar[st], 16u * np);
              bulk_copy_1d((uint32_t)__cvta_generic_to_shared(ws),
                           reinterpret_cast<const uint8_t*>(s & ~(uintptr_t)15), 16u * np, &wbar[st]);
            }
          } else {
            mbar_arrive(&wbar[st]);
          }
        }
      } else {
#pragma unroll
        for (int i = 0; i < rows / RPP; ++i) {
          if (n0 + cr + RPP * i < N) {
            uint8_t* ws = wbuf + st * wstage + (cr + RPP * i) * ROWBUF;
            const uintptr_t s = reinterpret_cast<uintptr_t>(prow + i * ppass + (int64_t)ch * CB);
            const int np = rounded_pieces(s, bytes);
            const auto copy = [&](auto tc) {  // TAIL once a chunk, uniform over the CTA
#pragma unroll
              for (int pc = cp; pc < PMAX; pc += TPR)
                if (pc < np) cp_async_piece<tc>(ws, s, pc, wend);
            };
            if (tail && ch == nchunks - 1) copy(std::true_type{});
            else copy(std::false_type{});
          }
        }
      }
      uint8_t* xs = xbuf + st * TT * XPITCH + xp * 16;
      const int k = ch * CE + 8 * xp;
#pragma unroll
      for (int i = 0; i < TT / (NTH / 32); ++i) {
        const int j = xj + (NTH / 32) * i;
        uint8_t* dst = xs + j * XPITCH;
        if (j < M && k < K) cp_async16(dst, xb + (int64_t)xrow[j] * a.x_stride + k);
        else *reinterpret_cast<uint4*>(dst) = make_uint4(0u, 0u, 0u, 0u);
      }
    }
    cp_async_commit();
  };

  // This warp's stage slots 16 warp + g and + 8, the rows they hold (r0, r8) and those rows' offsets modulo 16 in the
  // file (kept in the stage). Slot s holds row s, or under MAP row (s % (128 / G)) G + s / (128 / G): a warp's lanes g
  // read 8 adjacent slots, ROWBUF bytes apart, in both forms (by rows, G = 4 or 8 would put a warp's 8 rows 32 or 16
  // slots apart, a multiple of 128 bytes: on the same banks).
  static_assert(rows == 1 << 7, "the slots' shift");
  const int sl0 = 16 * warp + g;
  int r0 = sl0, r8 = sl0 + 8;
  if constexpr (MAP) {
    const auto row_of = [&](int sl) { return ((sl & ((rows >> lg) - 1)) << lg) + (sl >> (7 - lg)); };
    r0 = row_of(sl0);
    r8 = row_of(sl0 + 8);
  }
  const uint32_t mis0 = (uint32_t)reinterpret_cast<uintptr_t>(wbase + (int64_t)min(n0 + r0, N - 1) * a.row_bytes);
  const uint32_t mis8 = (uint32_t)reinterpret_cast<uintptr_t>(wbase + (int64_t)min(n0 + r8, N - 1) * a.row_bytes);
  const int groups = (M + 7) >> 3;  // token groups that hold a token

  float acc[NT][QA][4];
#pragma unroll
  for (int t = 0; t < NT; ++t)
#pragma unroll
    for (int q = 0; q < QA; ++q)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[t][q][i] = 0.f;

#pragma unroll
  for (int s = 0; s < S - 1; ++s) issue(c0 + s);

  // The stage loop for tiles of at most G token groups (G a constant: a run-time bound on the groups
  // had ptxas recompute each B load's address, 3 more instructions a load).
  auto stages = [&](auto gc) {
    constexpr int G = decltype(gc)::value;
    for (int ch = c0; ch < c1; ++ch) {
      // (ch % S spelled out, not named: a stage index named here changed NT = 1's register allocation; as written,
      // NT = 1 compiles to the cp.async-only kernel of before v127, instruction for instruction: NOTES.md v127b.)
      if constexpr (BULK || MAP) mbar_wait_cluster(&wbar[ch % S], (uint32_t)((ch - c0) / S) & 1u);  // its weights
      cp_async_wait<S - 2>();  // its activations, and the weights' cp.async pieces
      __syncthreads();  // stage ch is in; every warp is done with stage ch - 1, which the next issue refills
      issue(ch + S - 1);
      const uint8_t* ws = wbuf + (ch % S) * wstage;
      const uint8_t* xs = xbuf + (ch % S) * TT * XPITCH + g * XPITCH + 8 * c;
      const uint8_t* pg = ws + sl0 * ROWBUF + ((mis0 + (uint32_t)(ch * CB)) & 15u);
      const uint8_t* pg8 = ws + (sl0 + 8) * ROWBUF + ((mis8 + (uint32_t)(ch * CB)) & 15u);
#pragma unroll
      for (int uu = 0; uu < 4; ++uu) {
        const int U = ch * 4 + uu;
        if (U < nunits) {
          const bool full = !BLOCK32 || U * 64 + 64 <= K;
          unit_mma<T, XT, NT>(pg, pg8, uu, c, full, G, [&](int t, int q) {
            return *reinterpret_cast<const uint2*>(xs + t * 8 * XPITCH + (uu * 64 + 16 * q) * 2);
          }, acc);
        }
      }
    }
  };
  // Full tiles on all NT groups; a tile of at most a quarter of them (MoE: an expert's last few
  // pairs) on NT / 4, whose unused groups multiply zero rows.
  if constexpr (NT >= 4) {
    if (groups <= NT / 4) stages(std::integral_constant<int, NT / 4>{});
    else stages(std::integral_constant<int, NT>{});
  } else {
    stages(std::integral_constant<int, NT>{});
  }
  cp_async_wait<0>();

  // D fragment of group t: (row g, token 2c), (g, 2c + 1), (g + 8, 2c), (g + 8, 2c + 1).
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    if (t >= groups) break;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float v = acc[t][0][i];
#pragma unroll
      for (int q = 1; q < QA; ++q) v += acc[t][q][i];
      const int tok = 8 * t + 2 * c + (i & 1), row = n0 + ((i >> 1) ? r8 : r0);
      if (tok < M && row < N) store(tok, row, v);
    }
  }
}

// out[r, n] = sum over the splits of ws[s, r, n] (out rows out_stride apart).
template <typename XT>
__global__ void __launch_bounds__(256) split_reduce_kernel(const float* __restrict__ ws, int splits, int64_t rows, int N,
                                                           XT* __restrict__ out, int64_t out_stride) {
  const int64_t total = rows * N;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    float v = 0.f;
    for (int s = 0; s < splits; ++s) v += ws[s * total + i];
    out[(i / N) * out_stride + i % N] = XIO<XT>::cvt(v);
  }
}

template <typename XT>
cudaError_t launch_split_reduce(const float* ws, int splits, int64_t rows, int N, XT* out, int64_t out_stride,
                                cudaStream_t stream) {
  const unsigned blocks = (unsigned)std::min<int64_t>((rows * N + 255) / 256, 8 * num_sms());
  split_reduce_kernel<XT><<<blocks, 256, 0, stream>>>(ws, splits, rows, N, out, out_stride);
  return cudaGetLastError();
}

// Tiles copy their weights by tensor map (tile_kernel's MAP) over super-rows of the fewest G = 2^lg rows (G <= 8)
// whose bytes are a multiple of 16, where G divides N (a tile's rows start a super-row) and the super-rows span the
// map's box ([experts x N / G super-rows, G x row_bytes / 4 words], a box of 128 / G super-rows by ROWBUF bytes): G = 1
// for Qwen3-30B-A3B's gate in every table type, 2 for IQ4_XS's 408-byte down rows, 8 for Q6_K's 630 and gpt-oss's
// MXFP4 1530. False where none fits, the weights' base is off 16 bytes, or the driver has no encoder: the launch then
// takes the cp.async form (tiles of 8) or the bulk copies (larger tiles).
template <int T>
bool encode_tile_map(const GemvArgs& a, TileMap<true>& tm) {
  constexpr int ROWBUF = TileGeom<T, 1>::ROWBUF;
  const int64_t rows = (a.mode == GEMV_DENSE ? 1 : (int64_t)a.n_experts) * a.N;
  const auto fits = [&](int lg) { return (a.row_bytes << lg) % 16 == 0 && a.N % (1 << lg) == 0; };
  int lg = 0;
  while (lg < 3 && !fits(lg)) ++lg;
  if (!fits(lg) || (a.row_bytes << lg) < ROWBUF || rows < TILE_ROWS || rows > INT32_MAX - TILE_ROWS) return false;
  tm.lg = lg;
  return encode_rows_map(tm.map, a.w, 4, (uint64_t)a.row_bytes, (uint64_t)rows, lg, ROWBUF, TILE_ROWS,
                         CU_TENSOR_MAP_L2_PROMOTION_L2_128B);
}

template <int T, int NT, typename XT, bool MAP>
cudaError_t launch_tile_kernel(const GemvArgs& a, int64_t tiles, int splits, float* ws, const TileMap<MAP>& tm,
                               cudaStream_t stream) {
  constexpr size_t smem = TileGeom<T, NT>::SMEM;
  static std::atomic<uint64_t> attrs{0};
  const cudaError_t e = smem_attrs_once(attrs, tile_kernel<T, NT, XT, MAP>, smem, 100);
  if (e != cudaSuccess) return e;
  const dim3 grid((unsigned)((a.N + TILE_ROWS - 1) / TILE_ROWS), (unsigned)tiles, (unsigned)splits);
  tile_kernel<T, NT, XT, MAP><<<grid, dim3(32 * TILE_WARPS), smem, stream>>>(a, ws, tm);
  return cudaGetLastError();
}

template <int T, int NT, typename XT>
cudaError_t launch_tile_impl(const GemvArgs& a, int64_t tiles, int splits, float* ws, bool map, cudaStream_t stream) {
  TileMap<true> tm;
  const cudaError_t e = map && encode_tile_map<T>(a, tm)
                            ? launch_tile_kernel<T, NT, XT, true>(a, tiles, splits, ws, tm, stream)
                            : launch_tile_kernel<T, NT, XT, false>(a, tiles, splits, ws, TileMap<false>{}, stream);
  if (e != cudaSuccess || splits == 1) return e;
  return launch_split_reduce(ws, splits, a.out_rows, a.N, reinterpret_cast<XT*>(a.out), a.out_stride, stream);
}

template <int T>
cudaError_t launch_tile(const GemvArgs& a, DType xt, int tt, int64_t tiles, int splits, float* ws, bool map,
                        cudaStream_t stream) {
  if (tiles <= 0 || a.N <= 0) return cudaSuccess;
  const int NT = tt / 8;
  if (tiles > 65535 || splits < 1 || (splits > 1 && !ws) || (NT != 1 && NT != 2 && NT != 4 && NT != 8))
    return cudaErrorNotSupported;
  return with_xt(xt, [&](auto tag) {
    using XT = typename decltype(tag)::type;
    if constexpr (std::is_same<XT, float>::value) return cudaErrorNotSupported;  // bf16 / fp16 only
    else {
      switch (NT) {
        case 1: return launch_tile_impl<T, 1, XT>(a, tiles, splits, ws, map, stream);
        case 2: return launch_tile_impl<T, 2, XT>(a, tiles, splits, ws, map, stream);
        case 4: return launch_tile_impl<T, 4, XT>(a, tiles, splits, ws, map, stream);
        default: return launch_tile_impl<T, 8, XT>(a, tiles, splits, ws, map, stream);
      }
    }
  });
}

#define GQ_INSTANTIATE_TILE(T) \
  template cudaError_t launch_tile<T>(const GemvArgs&, DType, int, int64_t, int, float*, bool, cudaStream_t);

}  // namespace gq
