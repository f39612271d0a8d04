// gemv_stream_kernel: the fast small-M matmul's persistent stream kernel (M <= 8 and MoE pairs), its
// helpers and forms (NOTES.md v6 on). Launched by gemv_fast_launch.cuh.
#pragma once
#include "gemv_fast_kernel.cuh"

namespace gq {
namespace fast {

// ---- M <= 8: persistent stream with in-CTA activation records (NOTES.md v6, v7) -----------------
// Shared-memory bytes of one row's stage (8 / MT chunks). Q6_K (MIS): a stage starts at chunk c0, byte
// 420 c0 of a row whose start is 16-byte aligned, so it is copied from the 16-byte boundary below
// (up to 12 bytes early) and the stride keeps every row 16-byte aligned. RAG (ragged rows, not a
// multiple of 16 bytes): every row's stage starts up to 15 bytes past its copy's 16-byte boundary.
template <int T, int MT, bool RAG>
GQ_HD constexpr int stream_rs() {
  constexpr int B = (8 / MT) * FT<T>::CB;
  // RAG && MT == 8 (v144): an odd number of 16-byte pieces, so that the 16 slots' rows do not fall on the same
  // banks four slots apart (a pitch of 288 bytes is 8 banks: the scale bytes' LDS took 2 wavefronts, ncu 29% of the
  // shared load wavefronts conflicted at gpt-oss T = 8)
  return RAG ? ((B + 15 + 15) / 16 | (MT == 8 ? 1 : 0)) * 16 : FT<T>::MIS ? (B + 12 + 15) / 16 * 16 : B;
}
// The stage copies by tensor map (NOTES.md v70-v72): one box a stage, the unit's 2 MT rows by stream_rs bytes,
// in elements of 4 bytes where a row's stage is at most 256 of them (the box's limit a dimension), else 8
template <int T, int MT>
GQ_HD constexpr int stream_map_elem() {
  return stream_rs<T, MT, false>() <= 4 * 256 ? 4 : 8;
}
// Whether gemv_stream_kernel<...> copies its stages so: the K split (KS, v70 / v71) and dense M = 1's ONE (4 rows a
// unit; v72, v73, v77). Same build, a call's flag (NOTES.md v73), M = 1, us, cp.async -> tensor map: ONE
// 13824 -> 5120 Q4_K 16.25 -> 14.8, Q5_K 20.5 -> 19.1, Q6_K (14336 -> 4096) 17.95 -> 16.45, MXFP4 17.7 -> 16.05,
// IQ4_XS 22.1 -> 20.55; the row pairs (Q4_0, Q4_K, Q5_K) -0.2 to +0.25 (Q4_0 4096 -> 4096 4.5 -> 4.7). Q8_0's ONE
// lost with the maps' 256-byte L2 promotion (4096 -> 14336 17.0 -> 18.1) and gains with 128 bytes' (v77: 17.15 ->
// 16.7, 8192 -> 8192 19.6 -> 19.0). v108: the plain dense MT = 2, 4, 8 launches too (their generic cp.async form spent
// 6-27% of the stage loop on per-piece 64-bit addresses: IQ4_XS MT = 4 1132 -> 934 instructions, Q8_0 620 -> 459),
// but MR's MT = 2 (rows that are not 16-byte multiples, whose BULK form is a 1-D copy a row: +24% there)
template <int T, bool MOE, int MT, bool RAG, bool ONE, bool KS, bool MR = false>
GQ_HD constexpr bool stream_bulk() {
  return KS || (!MOE && !RAG && MT == 2 && ONE && stream_rs<T, MT, false>() <= 8 * 256) ||
         (!MOE && !RAG && !ONE && !MR && (MT == 2 || MT == 4 || MT == 8));
}
// MR rows of 16k + 8 bytes, which pair into 16-byte multiples: the K split copies them by boxes of row pairs (v133),
// the kernel's PAIRS and its launch's map alike
GQ_HD constexpr bool mr_pairs(int64_t row_bytes) { return row_bytes % 16 == 8; }
// The shared-memory layout of those forms, which the kernel builds and the launches count: the records' end
// padded to 128 bytes (every stage buffer 128-byte aligned, as the copies ask), and an mbarrier a stage buffer
GQ_HD constexpr size_t stream_recs_end(size_t rec_bytes, bool bulk) {
  return bulk ? (rec_bytes + 127) / 128 * 128 : rec_bytes;
}
constexpr size_t kStageBarBytes = 8;

// v109 (IBLK): a lane's NV kept products of one 256-element block of an int8 type (records in the block form: one
// sigma a block), summed as integers, D (ls - 32) per plane (|.| under 2^29: 8 groups of |D_hi| <= 32 x 127 x 128 and
// |D_lo| <= 32 x 127 x 255, ls - 32 in [-32, 31]), then converted once a block: 256 D_hi + D_lo as float
template <int NV>
struct BlockSums {
  int h[NV] = {}, l[NV] = {};
  __device__ __forceinline__ void add(int i, int dh, int dl, int ls) {
    h[i] += dh * ls;
    l[i] += dl * ls;
  }
  __device__ __forceinline__ float take(int i) {  // (and zero for the next block)
    const float v = fmaf(256.f, group_f(h[i]), group_f(l[i]));
    h[i] = l[i] = 0;
    return v;
  }
  // i1's where `second`, else i0's (both zeroed): the lane's kept one picked once a block, not each group
  __device__ __forceinline__ float take(int i0, int i1, bool second) {
    h[i0] = second ? h[i1] : h[i0];
    l[i0] = second ? l[i1] : l[i0];
    h[i1] = l[i1] = 0;
    return take(i0);
  }
};

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

// One kept product v of group G (ONE, FLAT), scaled by its own row's scale from that row's chunk header
// in the stage (ch) and by the group's records at sp: acc += s (sigma v - beta) [+ o S].
template <class L>
__device__ __forceinline__ void kept_group(const uint8_t* ch, const uint8_t* sp, int G, int GR, float v, float& acc) {
  float sg, og;
  L::scale(ch, G, sg, og);
  const float2 sb = *reinterpret_cast<const float2*>(sp + G * GR);
  acc = fmaf(sg, fmaf(sb.x, v, sb.y), acc);
  if constexpr (L::HAS_MIN) acc = fmaf(og, *reinterpret_cast<const float*>(sp + G * GR + 16), acc);
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
// MoE's flat items (MOE && ONE, v41): 160 ragged (gpt-oss at T = 1; 157 uncapped, and 12 warps an SM fit),
// 128 otherwise (Q4_K 128 uncapped, Q6_K 117; 16 warps fit): at 128 and 96 the cap bound, and their 11
// warps an SM at T = 1, each a chain of 3 stages waiting on its own decode, are as many at the new cap.
// Dense M = 1 of MXFP4 and IQ4_XS (row pairs, ONE1; v42): 128, where the row pairs spilled 8 bytes (MXFP4)
// and both bound at 96 (uncapped 116-128): MXFP4 4096 -> 1024 -9%, IQ4_XS -3..6%, their other M = 1 rows
// equal. The other types at 128 lost 12-15% where the launch took 19 warps (16 fit at 128) and gained at
// most 2% elsewhere; the K split at 144 lost 10% where it took 14 (NOTES.md v42).
// IQ4_XS's MoE 4-row form (MOE && ONE && MT = 2, v117): 160, where its block sums as integers (IBLK) and both table
// words in registers fit in 146 (at 128 they spilled 66-90 bytes): 1037 -> 770 instructions a stage, 13 warps an SM.
template <int T, bool MOE, int MT, bool RAG, bool ONE>
constexpr int stream_reg_cap() {
  if (MOE && ONE) return RAG || (MT == 2 && T == IQ4_XS) ? 160 : 128;
  if (!MOE && MT == 1 && (T == MXFP4 || T == IQ4_XS)) return 128;
  return RAG || MT == 8 || (MOE && MT == 2) || ((MT == 2 || MT == 4) && (T == MXFP4 || T == IQ4_XS || T == Q6_K)) ? 128
                                                                                                                : 96;
}
// The ragged flat items' slots a lane copies a stage, copy_slot(j, pc0, npc) taking A row j's pieces pc0, pc0 + 2,
// .. (npc of them). v143: MXFP4's 288-byte slots (16 pieces or more) as v142's MT = 8 copy, pieces 0..15 of slots 2i,
// 2i + 1 by 16 lanes each (256 contiguous bytes), those from 16 on by lane pairs; IQ4_XS's 160-byte slots lanes 2j,
// 2j + 1 slot j's even and odd pieces
template <int FSB, class F>
__device__ __forceinline__ void flat_rag_slots(int lane, const F& copy_slot) {
  constexpr int NPS = FSB / 16;  // pieces a slot
  if constexpr (NPS >= 16) {
#pragma unroll
    for (int i = 0; i < 8; ++i) copy_slot(2 * i + (lane >> 4), lane & 15, 1);
    copy_slot(lane >> 1, 16 + (lane & 1), (NPS - 16 + 1) / 2);
  } else {
    copy_slot(lane >> 1, lane & 1, (NPS + 1) / 2);
  }
}
// The copy of a ragged flat unit's stage whose pieces may reach past the weights' end `wend` (v146): each piece
// through cp16_slot_piece, which copies those byte by byte. Out of line, so that the stage loop's own copy stays
// branch-free
template <class FL, int IB, int FSB>
__device__ __noinline__ void flat_rag_copy_near(uint8_t* d, const uint8_t* iw, int is, int lane, int fn, uint32_t frcp,
                                                int64_t row_bytes, uintptr_t wend) {
  flat_rag_slots<FSB>(lane, [&](int j, int pc0, int npc) {
    int r, k;
    FL::slot(is, j, fn, frcp, r, k);
    const uint8_t* src = iw + (int64_t)r * row_bytes + k * IB;
    const int nb = (int)min((int64_t)IB, row_bytes - k * IB);  // the item's bytes
#pragma unroll
    for (int q = 0; q < npc; ++q) cp16_slot_piece(d + j * FSB, src, IB, nb, pc0 + 2 * q, wend);
  });
}
template <int T, typename XT, bool MOE, int MT, bool RAG, bool ONE = false, bool KS = false, bool GZ = false,
          bool GU = false, bool MR = false>
__global__ void __maxnreg__((stream_reg_cap<T, MOE, MT, RAG, ONE>()))
    gemv_stream_kernel(const FastArgs a,
                       const __grid_constant__ WeightMap<stream_bulk<T, MOE, MT, RAG, ONE, KS, MR>()> wm) {
  using L = FT<T>;
  using R = StreamRecs<T>;
  static_assert(MT == 1 || (MT == 2 && !RAG) || ((MT == 4 || MT == 8) && !MOE && !RAG) || (MT == 8 && MOE && RAG),
                "MT tokens: 1, 2, 4 or 8; MoE with 1 or 2, or 8 over hit experts; ragged rows with 1 (MoE: 8)");
  // MoE over hit experts (EXP): a unit is 16 rows of one expert that the pairs hit, times all the
  // (at most 8) tokens, stored to the pairs that chose it
  constexpr bool EXP = MOE && MT == 8;
  static_assert(!ONE || ((MT == 2 || MT == 1) && (!RAG || (MOE && MT == 1))),
                "one kept value a lane: one x row a unit on the MT = 2 geometry, dense row pairs or MoE flat items (MT = 1)");
  // ONE on row pairs (ONE1, NOTES.md v32): A's rows g + 8 hold row 1's chunk g ^ 2 and B's column j
  // chunk j ^ 4 in odd groups, so that lane (g, c) keeps one product a pair of groups (role c ^ (g >> 1))
  constexpr bool ONE1 = ONE && MT == 1 && !MOE;
  // ONE on flat items (FLAT, MoE pairs with K of at most 4 chunks, NOTES.md v35): a unit is the fewest
  // rows R whose chunks fill whole stages of 16 (flat_rows), its (row, chunk) items in memory order;
  // A row a of stage s holds item 16 s + a, B column n chunk (n & 3) % nch, so A row g's item is kept
  // by lane c = chunk >> 1 (element chunk & 1) and A row g + 8's by lane c = 2 + (chunk >> 1): every
  // product slot decodes a chunk of K, where the 4-row form leaves a quarter idle at 3 chunks
  // Q6_K (MIS): the items are its super-blocks (210 bytes, rows of 630 at K = 768), A row g item 2g and
  // A row g + 8 item 2g + 1, so that every lane reads its rows 0 and 2 bytes past 4-byte alignment
  // RAG (MXFP4 rows of 4k + 2 bytes, NOTES.md v37): items are chunks (the last one short), A rows g, g + 8
  // the even and odd rows of two (row pair, item) slots (FlatLane), each item at its own offset in a slot;
  // IQ4_XS's (v112): items of one block (flat_blocks)
  // MR on flat items (BR, v113): IQ4_XS's ragged rows whose unit of 16 rows is one 16-byte aligned run, of at most 4
  // one-block items a row (K = 256, 768), on the aligned form: a stage one contiguous copy (as Q6_K's)
  constexpr bool FLAT = stream_flat(MOE, MT, ONE), BR = FLAT && MR;
  constexpr int IB = flat_item_bytes<T, RAG, BR>(), FSB = flat_slot_bytes<T, RAG, BR>();  // FLAT: bytes an item, a slot
  using FL = FlatLane<T, RAG && FLAT, BR>;
  static_assert(!KS || (MT == 8 && !MOE && !RAG), "K split over a cluster: dense MT = 8");
  static_assert(!GZ || KS, "GZ: the K split over a plain grid");
  // GU (NOTES.md v86): the grid's warps read several units each (units gw, gw + GW, ...), where one a warp
  // needs more warps than a wave holds (Llama-70B's 28672 -> 8192 and 8192 -> 28672): each unit's slice sums
  // go to the meeting buffer at the unit's end, and rank 0 adds and stores them all after the barrier
  static_assert(!GU || GZ, "GU: the grid's K split, several units a warp");
  // MR: Q6_K rows that are not 16-byte multiples (rows_mis: 4-byte, K = 5120 or 17408 for Qwen3-14B) in the MT = 2
  // forms (ONE at M = 1, the plain launch at M = 2) and the K split, their own instantiations (in the others' code
  // the per-row offsets cost M = 2 5% on 16-byte rows): row r of a unit starts (r x row_bytes) & 15 past the first's
  // alignment, and each row's stage is copied from the 16-byte boundary below its own start (the BULK forms: a 1-D
  // bulk copy a row, which no tensor map spans), so its chunks sit at its own offset in its slot
  static_assert(!MR || (FT<T>::MIS && !MOE && !RAG && !FLAT && (KS || MT == 2)) || (T == IQ4_XS && FLAT && !RAG),
                "MR: dense Q6_K, MT = 2 or the K split; or IQ4_XS's flat items as one run (BR)");
  // IBLK (NOTES.md v109): an int8 type's forms add each block's kept products as integers, on records in the block
  // form (StreamRecs::group_blk: one sigma a 256-element block); MoE's ONE too since v117 (at 128 registers its
  // integer pick had spilled 114-158 bytes: stream_reg_cap)
  constexpr bool IBLK = fast_i8<T>();
  constexpr int STEPS = L::STEPS, CPS = 8 / MT, RPU = 2 * MT, GPC = L::CE / L::GS;
  const int RS = stream_rs<T, MT, RAG>(), STAGE = FLAT ? 16 * FSB : RPU * RS;
  const int GR = Prep<T>::gr(1);
  extern __shared__ __align__(16) uint8_t smem[];

  grid_dep_launch();  // the next kernel, launched as a dependent, may place its CTAs as these leave
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, WPC = blockDim.x >> 5;
  const int g = lane >> 2, c = lane & 3;
  const int rho = g / CPS, kap = g % CPS;  // lane's A rows (rho, rho + MT) and chunk; its B token rho
  // MR: those rows' starts past the unit's 16-byte alignment
  const int dr = MR ? (int)((rho * a.row_bytes) & 15) : 0, dr8 = MR ? (int)(((rho + MT) * a.row_bytes) & 15) : 0;
  // MR's K split on rows of 16k + 8 bytes (PAIRS, v133): a stage by two tensor-map boxes over row pairs (32-byte
  // multiples), the even rows' then the odd rows', so row r of the unit sits in slot (r & 1) x 8 + r / 2; rows of
  // 16k + 4 or + 12 bytes keep a 1-D copy a row (four rows' boxes would start 64 bytes off the 128 they ask)
  const bool PAIRS = MR && KS && mr_pairs(a.row_bytes);  // (KS: by tensor map, stream_bulk)
  const int sl = PAIRS ? ((rho & 1) << 3) + (rho >> 1) : rho, sl8 = PAIRS ? ((rho & 1) << 3) + ((rho + MT) >> 1) : rho + MT;
  // GZ's slices (NOTES.md v90): a.K (the larger slice, which lays out every CTA's shared memory alike), ranks (CTA b:
  // b % a.gz) from a.kx on one chunk fewer, where K's chunks do not split equally (25600 = 50 chunks of 512 into 4)
  const int N = a.N, K = GZ && (int)blockIdx.x % a.gz >= a.kx ? a.K - L::CE : a.K, S = a.S;
  const int nch = R::chunks(K);
  const int fn = FLAT ? flat_row_items<T, RAG, BR>(K) : 0;  // FLAT: items a row
  const uint32_t frcp = FLAT && RAG ? FL::slot_rcp(fn) : 0;  // FLAT && RAG: FL::slot's f / fn as a multiply
  const int nst = stream_unit_stages<T, MOE, MT, RAG, ONE, BR>(K);
  const int RU = stream_unit_rows<T, MOE, MT, RAG, ONE, BR>(K);  // rows a unit
  const size_t RB = stream_rec_stride<T, MT>(GZ ? a.K : K);  // one x row's records
  const int nx = MOE ? a.nx : ONE ? 1 : MT;
  const auto rec_off = [&](int xr) { return stream_rec_off(xr, RB, MT); };
  uint8_t* recs = smem;
  // BULK (the K split, grid (NOTES.md v70) and clusters (v71); dense M = 1 ONE, v72): its stages copied by tensor
  // map, each buffer 128-byte aligned
  constexpr bool BULK = stream_bulk<T, MOE, MT, RAG, ONE, KS, MR>();
  const size_t rend = stream_recs_end(nx * RB, BULK);  // the records' end
  uint8_t* buf = recs + rend + (size_t)warp * S * STAGE;
  // FLAT: each warp's item sums of a unit (flat_sum_bytes), then the MoE tables
  constexpr int FIB = flat_sum_bytes<T, RAG>();
  float* itm = reinterpret_cast<float*>(recs + rend + (size_t)WPC * S * STAGE) + warp * (FIB / 4);
  int* sid = reinterpret_cast<int*>(recs + rend + (size_t)WPC * (S * STAGE + (FLAT ? FIB : 0)));  // MOE: experts
  // EXP: the tables of exp_table_ints after the pairs' experts
  int* first_of = sid + exp_sid_ints(a.P);
  int* hexp = first_of + exp_first_of_ints(a.n_experts);
  int* hid = hexp + 64;
  uint32_t* hmask = reinterpret_cast<uint32_t*>(hid + 64);
  int* nhit = reinterpret_cast<int*>(hmask + 64 * 8);
  // a.split (dense only, so after the stages, and after their barriers where BULK): per unit of the CTA, the {RPU
  // rows x MT tokens} sums of the warps that each read part of it, then the count of its stages added
  constexpr int SLOT = split_slot(MT);
  float* sums = reinterpret_cast<float*>(sid) + (BULK ? WPC * S * kStageBarBytes / sizeof(float) : 0);

  const int hN = (N + RU - 1) / RU;
  int units = MOE ? a.P * hN : hN;  // EXP: set once the hit experts are known
  // the weights' end (RAG: cp16_part copies a piece past it byte by byte)
  const uintptr_t wend = reinterpret_cast<uintptr_t>(a.w) + (MOE ? a.n_experts * a.expert_bytes : N * a.row_bytes);
  // KS: the CTAs of a cluster read the same units, rank r the r-th of its equal slices of K (a.K is the
  // slice; GZ: the larger of two sizes, above), and meet in rank 0's shared memory at the end (one unit a warp
  // at most). With a.split = H > 1, H adjacent warps share a unit, warp h of them reading the h-th of H equal runs
  // of the slice's stages, and add into the first before the meeting (clusters of 2 whose CTAs have 8 warps at
  // K / 4 each, where clusters of 4 leave SMs idle: NOTES.md v48). Units are warp-major, so that the warps left without one
  // spread over the clusters. a.gz = Z > 0 (NOTES.md v53): the same over a plain grid, CTAs [cZ, cZ + Z)
  // standing for cluster c, meeting at the grid barrier of a cooperative launch (ks_meet_grid, v55), so
  // that no GPC leaves SMs idle (GZ).
  const int gz = GZ ? a.gz : 0;  // (its own instantiation: the clusters' code stays as it was, v56)
  const int rank = !KS ? 0 : gz ? (int)blockIdx.x % gz : (int)cluster_reg_rank();
  // the slice's first chunk (GZ: the first a.kx ranks hold one chunk more than the rest), and its offset in a row of
  // B bytes a chunk (the clusters' expressions as before v90: a no-op edit moves their schedules)
  const int cs = GZ ? rank * R::chunks(a.K) - max(rank - a.kx, 0) : rank * nch;
  const auto slice_off = [&](int B) { return GZ ? (int64_t)cs * B : (int64_t)rank * nch * B; };
  const int ncl = !KS ? 0 : gz ? (int)gridDim.x / gz : (int)cluster_reg_count();  // clusters of the grid
  const int H = KS ? a.split : 1, hw = KS ? warp % H : 0;
  const int gw = KS ? warp / H * ncl + (gz ? (int)blockIdx.x / gz : (int)cluster_reg_id())
                 : stream_may_spread(MOE, MT, ONE) && a.spread ? warp * (int)gridDim.x + (int)blockIdx.x  // v120
                                                               : (int)blockIdx.x * WPC + warp;
  const int GW = (KS ? ncl : (int)gridDim.x) * WPC / H;
  const auto wbase = [&]() { return KS ? a.w + slice_off(L::CB) : a.w; };  // rows' first byte of the slice
  // Q6_K (MIS) slices start 4-byte aligned (420-byte chunks): how far past a 16-byte boundary, which
  // every stage's copy start (mis) adds to its offset in the slice
  const int kph = KS && L::MIS ? (int)(slice_off(L::CB) & 15) : 0;
  // KS: the meeting's slots (ranks 1.., a warp's 32 x 4 sums each) and rank 0's barriers, after the stages
  float* slots = reinterpret_cast<float*>(recs + rend + (size_t)WPC * S * STAGE);
  uint64_t* mbar = reinterpret_cast<uint64_t*>(slots + (KS ? ((int)cluster_reg_size() - 1) * WPC * kKsSums : 0));
  if (KS && !gz) {
    if (rank == 0 && lane == 0) mbar_init_n(mbar + warp, 1);
    cluster_arrive_relaxed();  // (waited on before the first store into rank 0)
  }
  // BULK: buffer b's barrier (after the stages; the clusters: after their meeting's), one arrival (lane 0,
  // with the stage's bytes) a phase, in place of cp.async's groups
  uint64_t* sbar = mbar + (KS && !GZ ? WPC : 0) + warp * S;
  if constexpr (BULK) {
    if (lane == 0) {
      for (int b = 0; b < S; ++b) mbar_init_n(sbar + b, 1);
    }
    __syncwarp();
  }
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
  // split: the warp's first stage over the CTA's units; KS: its unit's stages [j0, sh1), its run of them
  const int j0 = split ? u0 * nst + (int)((int64_t)warp * (u1 - u0) * nst / WPC) : hw * nst / H;
  const int sh1 = (hw + 1) * nst / H;
  int total = split ? u0 * nst + (int)((int64_t)(warp + 1) * (u1 - u0) * nst / WPC) - j0
                    : (ufirst < u1 ? (u1 - 1 - ufirst) / ustep + 1 : 0) * (KS ? sh1 - j0 : nst);  // stages this warp reads
  const XT* x = reinterpret_cast<const XT*>(a.x) + (KS ? (GZ ? cs * L::CE : rank * K) : 0) + (int64_t)xr0 * a.x_stride;
  const int nG = K / L::GS, nGp = nch * GPC;  // groups of K; with a short last chunk's padding (RAG)
  // G / nGp by a multiply-high and one correction (gmag = (2^32 - 1) / nGp: the quotient is exact or one
  // short for G < 2^31), where the division of a run-time divisor took ~18 instructions each time (v66)
  const uint32_t gmag = 0xFFFFFFFFu / (uint32_t)nGp;
  const auto split_group = [&](int G, int& xr, int& Gl) {
    xr = (int)__umulhi((uint32_t)G, gmag);
    Gl = G - xr * nGp;
    if (Gl >= nGp) { ++xr; Gl -= nGp; }
  };
  // group G of the x rows' padded groups: its first 16-byte piece, and whether it is there (else zeros: a
  // token past M, M = 3 on MT = 4, never stored, and the padding); x-independent, so the M = 1 forms
  // compute the first group's before the wait (NOTES.md v59c)
  const auto x_src = [&](int G, bool& in) {
    int xr, Gl;
    split_group(G, xr, Gl);
    in = (MOE || xr < a.M) && Gl < nG && (!IBLK || G < nxl * nGp);  // (IBLK: whole warps past the last row's group)
    return reinterpret_cast<const uint4*>(x + xr * a.x_stride + (int64_t)Gl * L::GS);
  };
  const auto load_from = [&](const uint4* p, bool in, uint4 (&r)[L::GS / 8]) {
#pragma unroll
    for (int i = 0; i < L::GS / 8; ++i) r[i] = in ? p[i] : make_uint4(0, 0, 0, 0);
  };
  const auto load_raw = [&](int G, uint4 (&r)[L::GS / 8]) {
    bool in;
    const uint4* p = x_src(G, in);
    load_from(p, in, r);
  };
  const auto raw_floats = [&](const uint4 (&r)[L::GS / 8], float (&v)[L::GS]) {
#pragma unroll
    for (int i = 0; i < L::GS / 8; ++i) piece_floats<XT>(r[i], v + 8 * i);
  };
  // IBLK: group G's records in the block form, its block's largest |x| over the block's 8 groups on 8 adjacent
  // threads (blockDim and a row's padded groups both multiples of 8; the loops run whole warps, G past the last
  // storing nothing)
  const auto block_group = [&](const float (&v)[L::GS], int G, int Gl, uint8_t* xrecs) {
    if constexpr (IBLK) {  // (its body instantiated for every type)
      float am = Prep<T>::group_amax(v);
#pragma unroll
      for (int o = 1; o < 8; o <<= 1) am = fmaxf(am, __shfl_xor_sync(0xFFFFFFFFu, am, o));
      if (G < nxl * nGp) R::group_blk(v, am, Gl, K, xrecs);
    }
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
    return w + (int64_t)(RU * rp) * a.row_bytes;
  };

  // the warp's stages in order (unit gw + j * GW, chunks CPS * s ...; split: from stage j0 on), the
  // next one into buffer `st`: each warp-wide cp.async covers 512 contiguous bytes of one row
  int is = split ? j0 % nst : KS ? j0 : 0, ip = split ? j0 / nst : ufirst, ii = 0;
  const uint8_t* iw = wbase();
  int ilast = 0;  // last row of the unit that exists, counted from its first
  const uint8_t* irow = iw;  // the row the lane copies: the MT = 2 form (not ONE), BULK MR's lanes
  int irm = 0;  // MR, the MT = 2 form: that row's start past the unit's 16-byte alignment
  // EXP (RAG, MT = 8): the rows the lane copies, in bytes from the unit's first (at most 15 rows of a ragged row: 32
  // bits): slots 2i + lane / 16 (i < 8), then slot lane / 2 (the pieces from 16 on)
  int roff[RAG && MT == 8 ? 9 : 1];
  // RAG, FLAT or MT = 8: whether a piece of the unit's stages may reach past the weights' end (a piece's source ends
  // at most (RU - 1) row_bytes + a stage's offset (< row_bytes) + the span (IB or CB) + 31 past iw): then v143's copy
  // (v146, v147)
  bool inear = false;
  const auto start_unit = [&]() {
    iw = rows_of(ip);
    ilast = min(RU - 1, N - 1 - RU * (MOE ? ip % hN : ip));  // dense: ip < units = hN
    if constexpr (RAG && (FLAT || MT == 8))
      inear = wend - reinterpret_cast<uintptr_t>(iw) < (uintptr_t)(RU * a.row_bytes + (FLAT ? IB : L::CB) + 32);
    if constexpr (RAG && MT == 8) {
#pragma unroll
      for (int i = 0; i < 8; ++i) roff[i] = slot_row(2 * i + (lane >> 4), ilast) * (int)a.row_bytes;
      roff[8] = slot_row(lane >> 1, ilast) * (int)a.row_bytes;
    } else if constexpr (BULK && MR) irow = iw + (int64_t)min(lane, ilast) * a.row_bytes;  // lanes < RPU: a row each
    else if constexpr (!RAG && MT == 2 && !ONE) irow = iw + (int64_t)min(lane >> 3, ilast) * a.row_bytes;
    if constexpr (MR && MT == 2 && !ONE) irm = (int)(((int64_t)min(lane >> 3, ilast) * a.row_bytes) & 15);
  };
  // EARLY: the first unit's rows, and the generic copy form's (row, piece) of each copy, computed before the
  // wait (NOTES.md v64); not in the grid K split of Q5_K, MXFP4 and IQ4_XS, 0.7-1.9 us slower with it there
  constexpr bool EARLY = !(GZ && (T == Q5_K || T == MXFP4 || T == IQ4_XS));
  // the generic copy form (MT = 4, 8 on whole-piece rows, but the K split's tensor-map copies, so EARLY holds
  // wherever it is taken): each lane's (row, piece) of its copies k, the same every stage
  constexpr bool GEN = !BULK && !RAG && !FLAT && (MT == 4 || MT == 8) && !ONE;
  constexpr int NPF = stream_rs<T, MT, RAG>() / 16;  // pieces per row of a full stage: a fixed trip count
  constexpr int KN = (RPU * NPF + 31) / 32;
  int cr[KN], cpc[KN];
  auto issue = [&](int st) {
    if (ii < total) {
      if (ii == 0 ? MOE || !EARLY : is == 0) start_unit();  // EARLY dense: the first unit's set before the wait
      // FLAT: items 16 is .. 16 is + 15 of the unit, all there (the launch takes N a multiple of R), a
      // 16-byte aligned run
      const int b0 = FLAT ? 16 * is * IB : CPS * is * L::CB, mis = L::MIS && !FLAT ? (kph + b0) & 15 : 0;
      const int nc = FLAT ? 8 : min(CPS, nch - CPS * is);
      const int nP = L::MIS ? (mis + nc * L::CB + 15) / 16 : nc * (L::CB / 16);  // 16-byte pieces per row
      const uint8_t* s0 = iw + (b0 - mis);
      uint8_t* d = buf + st * STAGE;
      if constexpr (FLAT && RAG) {  // A row j's (row, item) from the 16-byte boundary below it, up to the
                                    // row's end (zeros past it)
        // v146: offsets from iw in 32 bits (a unit's rows), and each piece one zero-filling cp.async of its bytes of
        // the row (0..16; none: zeros, from a source inside the weights) with no branch, where no piece of the unit
        // reaches past the weights' end (else flat_rag_copy_near: v143's copy, out of line)
        const int rb = (int)a.row_bytes, iwm = (int)(reinterpret_cast<uintptr_t>(iw) & 15);
        const uint8_t* iw0 = iw - iwm;  // the 16-byte boundary below the unit
        const auto copy_slot = [&](int j, int pc0, int npc) {
          int r, k;
          FL::slot(is, j, fn, frcp, r, k);
          const int kb = k * IB, o = iwm + r * rb + kb;  // the item's first byte past iw0
          const int m = o & 15, mnb = m + min(IB, rb - kb);  // m + the item's bytes
          const uint8_t* base = iw0 + (uint32_t)(o & ~15);  // the 16-byte boundary below the item
#pragma unroll
          for (int q = 0; q < npc; ++q) {
            const int pc = pc0 + 2 * q;
            if (pc < (m + IB + 15) >> 4) cp16_clamped(d + j * FSB + 16 * pc, base + 16 * pc, mnb - 16 * pc);
          }
        };
        if (inear)
          flat_rag_copy_near<FL, IB, FSB>(d, iw, is, lane, fn, frcp, a.row_bytes, wend);
        else
          flat_rag_slots<FSB>(lane, copy_slot);
      } else if constexpr (RAG && MT == 8) {  // 16 rows in slot_row's order, a stage one chunk, each slot from the
                                       // 16-byte boundary below its row's stage: its pieces 0..15 by 16 lanes (two
                                       // slots a copy instruction, 256 contiguous bytes each), those from 16 on by
                                       // lane pairs as before (v142: lane pairs a slot for all of them landed 16
                                       // runs of 32 bytes a copy, ~24 shared wavefronts each by ncu; NOTES.md)
        constexpr int NPR = (L::CB + 30) / 16;  // pieces a row's stage spans from the 16-byte boundary below it
        static_assert(NPR >= 16, "a slot holds the 16 pieces its lanes copy");
        static_assert(NPF > NPR, "v145's 16-byte shift takes a spare piece a slot");
        const int nb = (int)min((int64_t)L::CB, a.row_bytes - b0);  // the row's bytes in the stage
        // v145: a slot's pieces 16 bytes on where that keeps each piece at its source's address mod 32 (the slot's
        // spare piece, v144), so that a copy's 32-byte sectors land whole; the consumer's rg finds it so
        const auto shifted = [&](uint8_t* sd, const uint8_t* sr) {
          return sd + (((uint32_t)(uintptr_t)sr - (uint32_t)(uintptr_t)sd) & 16);
        };
        const auto slots = [&](const auto& piece) {  // piece(ro, slot, pc): piece pc of the slot whose row is ro past iw
#pragma unroll
          for (int i = 0; i < 8; ++i) piece(roff[i], 2 * i + (lane >> 4), lane & 15);
#pragma unroll
          for (int k = 0; k < (NPR - 16 + 1) / 2; ++k) piece(roff[8], lane >> 1, 16 + 2 * k + (lane & 1));
        };
        if (inear) {
          slots([&](int ro, int slot, int pc) {
            const uint8_t* sr = iw + ro + b0;
            cp16_slot_piece(shifted(d + slot * RS, sr), sr, L::CB, nb, pc, wend);
          });
        } else {  // v147, as v146: offsets in 32 bits from the 16-byte boundary below the unit, each piece one
                  // zero-filling cp.async of its bytes of the row (0..16) with no branch
          const int iwm = (int)(reinterpret_cast<uintptr_t>(iw) & 15);
          const uint8_t* iw0 = iw - iwm;
          slots([&](int ro, int slot, int pc) {
            const int o = iwm + ro + b0, m = o & 15;  // the row's stage past iw0
            const uint8_t* base = iw0 + (uint32_t)(o & ~15);
            if (pc < (m + L::CB + 15) >> 4)
              cp16_clamped(shifted(d + slot * RS, base) + 16 * pc, base + 16 * pc, m + nb - 16 * pc);
          });
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
          if (pc < (m0 + nc * L::CB + 15) >> 4) cp16_part(d + 16 * pc, p0, 16 * pc, v0, wend);
          if (pc < (m1 + nc * L::CB + 15) >> 4) cp16_part(d + RS + 16 * pc, p1, 16 * pc, v1, wend);
        }
      } else if constexpr (BULK && MR) {  // a 1-D copy a row, lane r row r's (rows past N read the last), from the
                                          // 16-byte boundary below its stage up to the one above its end (the
                                          // weights end on one); each lane announces its own bytes, lane 0 arrives
                                          // once all have (v102: lane 0 alone took ~35 issue slots a row, NOTES.md)
                                          // PAIRS: lane j < 2 the box of the unit's 8 rows 2i + j (rows past N:
                                          // the map's zeros), from the 16-byte boundary below row j's stage: a
                                          // bulk copy from each lane's own addresses runs as a loop over the lanes
                                          // (ELECT, R2UR, UBLKCP a lane: NOTES.md v132, v133)
        if (PAIRS) {
          if (lane < 2) {
            constexpr int E = stream_map_elem<T, MT>();
            mbar_expect_tx(sbar + st, (uint32_t)(RPU / 2 * RS));
            const int x = (int)(((int64_t)lane * a.row_bytes + slice_off(L::CB) + b0) & ~(int64_t)15);
            tensor_copy_2d((uint32_t)__cvta_generic_to_shared(d + lane * (RPU / 2) * RS), &wm.map, x / E, (RU * ip) >> 1,
                           sbar + st);
          }
        } else if (lane < RPU) {
          const uint8_t* sr = irow + b0;
          const int m = (int)(reinterpret_cast<uintptr_t>(sr) & 15);
          const uint32_t n = (uint32_t)(m + nc * L::CB + 15) & ~15u;
          mbar_expect_tx(sbar + st, n);
          bulk_copy_1d((uint32_t)__cvta_generic_to_shared(d + lane * RS), sr - m, n, sbar + st);
        }
        __syncwarp();
        if (lane == 0) mbar_arrive(sbar + st);
      } else if constexpr (BULK) {  // the unit's RPU rows by NPF pieces from the stage's first (rows past N: zeros)
        if (lane == 0) {
          constexpr int E = stream_map_elem<T, MT>();
          mbar_expect_bytes(sbar + st, 16u * NPF * RPU);
          const int x0 = (GZ ? cs : rank * nch) * L::CB + b0 - mis;  // the stage's first byte in a row
          tensor_copy_2d((uint32_t)__cvta_generic_to_shared(d), &wm.map, x0 / E, RU * ip, sbar + st);
        }
      } else if constexpr (FLAT && flat_half<T, RAG, BR>()) {  // one contiguous run of half-chunk items (Q6_K, BR; the
                                                               // other types: the M = 1 form's two)
#pragma unroll
        for (int k = 0; k < (IB + 31) / 32; ++k) {
          const int pc = lane + 32 * k;
          if (pc < IB) cp_async16(d + 16 * pc, s0 + 16 * pc);
        }
      } else if constexpr (MT == 1) {  // the measured M = 1 form (NOTES.md v7): two cp.async per piece, no row index
        const uint8_t* s1 = s0 + (FLAT ? 8 * L::CB : ilast > 0 ? a.row_bytes : 0);  // FLAT: items 8.. of the stage
#pragma unroll
        for (int k = 0; k < (NPF + 31) / 32; ++k) {
          const int pc = lane + 32 * k;
          if (pc < nP) {
            cp_async16(d + 16 * pc, s0 + 16 * pc);
            cp_async16(d + RS + 16 * pc, s1 + 16 * pc);
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
            for (int r = 0; r < 4; ++r) cp_async16(d + r * RS + 16 * pc, sr[r] + 16 * pc);
          }
        }
      } else if constexpr (MT == 2) {  // 8 lanes a row (its pointer set once a unit), lane h of them pieces
                                       // h, h + 8, ...: M = 2 -4..-8% against the form below (NOTES.md v19),
                                       // which MT = 4 and 8 keep (their 2-4 lanes a row lost up to 47%)
        const int h = lane & 7;
        const int mr = MR ? (mis + irm) & 15 : mis, nPr = MR ? (mr + nc * L::CB + 15) / 16 : nP;  // MR: the row's own
        const uint8_t* src = irow + (b0 - mr) + 16 * h;
        uint8_t* dst = d + (lane >> 3) * RS + 16 * h;
#pragma unroll
        for (int k = 0; k < (NPF + 7) / 8; ++k)
          if (h + 8 * k < nPr) cp_async16(dst + 128 * k, src + 128 * k);
      } else {
#pragma unroll
        for (int k = 0; k < KN; ++k) {
          const int q = lane + 32 * k, r = GEN ? cr[k] : q / NPF, pc = GEN ? cpc[k] : q - r * NPF;
          if (r < RPU && pc < nP) cp_async16(d + r * RS + 16 * pc, s0 + (int64_t)min(r, ilast) * a.row_bytes + 16 * pc);
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
  // slower matmul after matmul, where the previous kernel's tail still uses the bandwidth). The M = 1
  // forms compute their first x group's address before it (v59c).
  // the thread's first group (IBLK: every thread, a group past the last read as zeros, for the shuffles)
  const bool has0 = IBLK || threadIdx.x < nxl * nGp;
  bool in0 = false;
  const uint4* p0 = nullptr;
  if constexpr (MT == 1) {
    if (has0) p0 = x_src(threadIdx.x, in0);
  }
  // EARLY: the copies' (row, piece) and (dense) the first unit's rows before the wait too, fed to the same
  // predicated store (else the compiler computes them where used, 100-170 instructions after the wait at MT = 8)
  uint64_t t = gmag;
  if constexpr (GEN) {
#pragma unroll
    for (int k = 0; k < KN; ++k) {
      const int q = lane + 32 * k;
      cr[k] = q / NPF;
      cpc[k] = q - cr[k] * NPF;
      t ^= ((uint64_t)cr[k] << 32) ^ cpc[k];
    }
  }
  if constexpr (!MOE && EARLY) {
    start_unit();
    touch_args(a, t ^ reinterpret_cast<uintptr_t>(iw) ^ ilast);  // (MoE reads its ids' fields there already)
  } else if constexpr (!MOE) {
    touch_args(a, gmag);
  } else {
    keep_before(t, a.S);  // (else computed after the wait, where first used)
  }
  grid_dep_wait();
  // that group, requested before the expert ids are waited for and kept as 16-byte pieces until the first
  // stages are asked for: converted at once, the warp would wait on x before it asks for its weights
  // (NOTES.md v60)
  uint4 r0[L::GS / 8];
  if (has0) {
    if constexpr (MT != 1) p0 = x_src(threadIdx.x, in0);
    load_from(p0, in0, r0);
  }
  // Q6_K's dense row pairs on a full SM (16 warps and more) still convert it first, waiting on x before
  // their stages: their stage decodes longest, and with x late behind 16 warps' stages every warp's
  // records, so its decode, started late (4096 -> 4096 at M = 1: +0.8 us converted late, +0.1 first;
  // NOTES.md v62)
  const bool x_now = T == Q6_K && MT == 1 && !MOE && WPC >= 16;
  // dense M = 1 (row pairs, ONE): the thread's next XB groups asked for with the first (v123). Each load in the
  // records' loop waits on the one before, an L2 round trip each behind the SM's first stages: Q6_K 14336 -> 4096
  // on ONE's 8 warps converts 3.5 groups a thread, Q6_K 4096 -> 1024 on 4 warps 2, MXFP4 / IQ4_XS 14336 -> 4096 2.
  // XB x GS / 2 registers, held until the records are built (24 for Q6_K's 16-element groups, 16 for the others').
  // Not at M = 2..4 (H100: Q8_0 4096 -> 1024 at M = 2 +8%, Q4_K +3%) nor MoE (its MXFP4 row pairs spilled 44
  // bytes more); nor where x_now converts the first group before the stages (Q6_K 4096 -> 4096 +4%).
  constexpr int XB = MOE || KS || !(MT == 1 || (MT == 2 && ONE)) ? 0 : L::GS == 16 ? 3 : 1;
  uint4 rx[XB > 0 ? XB : 1][L::GS / 8];
  if (!x_now) {
#pragma unroll
    for (int i = 0; i < XB; ++i) {
      const int G = threadIdx.x + (i + 1) * blockDim.x;
      if ((IBLK ? G - lane : G) < nxl * nGp) load_raw(G, rx[i]);  // as the records' loop below
    }
  }
  // every warp's x request ahead of any warp's weights, as when each waited on its x: else the last warps'
  // x queues behind the first warps' stages, and the records with it (MoE: the ids' barrier below does it)
  if constexpr (!MOE && MT < 8) __syncthreads();
  float v0[L::GS];
  if (x_now && has0) raw_floats(r0, v0);
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
  for (int s = 0; s < S - 1; ++s) {
    issue(s);
    if constexpr (!BULK) cp_async_commit();
  }
  if constexpr (MT == 8) {
    // 8 tokens' records, about 5 groups a thread at 7 warps: each group's x asked for an iteration
    // ahead (M = 8 4096 -> 14336: -2..-3%, NOTES.md v13)
    // (IBLK: whole warps, as below)
    for (int G = threadIdx.x; (IBLK ? G - lane : G) < nxl * nGp; G += blockDim.x) {
      uint4 rn[L::GS / 8];
      if (IBLK || G + (int)blockDim.x < nxl * nGp) load_raw(G + blockDim.x, rn);
      float v[L::GS];
      raw_floats(r0, v);
      int xr, Gl;
      split_group(G, xr, Gl);
      if constexpr (IBLK) block_group(v, G, Gl, recs + rec_off(xr));
      else R::template group<R::SWZ8>(v, Gl, K, recs + rec_off(xr));
#pragma unroll
      for (int i = 0; i < L::GS / 8; ++i) r0[i] = rn[i];
    }
  } else {
    // (IBLK: whole warps, for the shuffles below; a group past the last reads zeros and stores nothing)
    for (int G = threadIdx.x; (IBLK ? G - lane : G) < nxl * nGp; G += blockDim.x) {
      int xr, Gl;
      split_group(G, xr, Gl);
      float v[L::GS];
      if (x_now && G == threadIdx.x) {
#pragma unroll
        for (int e = 0; e < L::GS; ++e) v[e] = v0[e];
      } else {
        if (XB == 0 ? G != threadIdx.x : x_now || G >= (int)threadIdx.x + (XB + 1) * (int)blockDim.x)
          load_raw(G, r0);
#pragma unroll
        for (int i = 0; i < XB; ++i)  // the groups loaded with the first
          if (!x_now && G == (int)threadIdx.x + (i + 1) * (int)blockDim.x)
#pragma unroll
            for (int j = 0; j < L::GS / 8; ++j) r0[j] = rx[i][j];
        raw_floats(r0, v);
      }
      if constexpr (IBLK) block_group(v, G, Gl, recs + rec_off(xr));
      else R::group(v, Gl, K, recs + rec_off(xr));
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
  int cur = 0, s = split ? j0 % nst : KS ? j0 : 0, p = split ? j0 / nst : ufirst;  // buffer, stage of the unit, unit of stage i
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
      row0 = RU * (u - q * hN);
      zero = sid[q] < 0;
    } else {
      row0 = RPU * u;
    }
  };
  if (total > 0 || (KS && p < units)) unit_io(p);  // (KS: a first run of a unit may be empty, nst < H)
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
  uint32_t ph = 0;  // BULK: buffer cur's phase (its uses so far, mod 2)
  for (int i = 0; i < total; ++i) {
    if constexpr (BULK) mbar_wait_cluster(sbar + cur, ph);
    else wait_stages(S);
    __syncwarp();
    issue(cur == 0 ? S - 1 : cur - 1);
    if constexpr (!BULK) cp_async_commit();
    const int c0 = CPS * s;
    // lanes whose chunk is past K (a short last stage) decode the stage's first chunk: their
    // products are not kept
    const bool live = kap < nch - c0;
    const int ch = c0 + (live ? kap : 0);
    const int mis = L::MIS ? (kph + c0 * L::CB) & 15 : 0;  // where the stage's copy starts before its first chunk
    const uint8_t* rg = buf + cur * STAGE + sl * RS + (MR ? (mis + dr) & 15 : mis) + (ch - c0) * L::CB;
    const uint8_t* rg8 = rg + (sl8 - sl) * RS + (MR ? ((mis + dr8) & 15) - ((mis + dr) & 15) : 0);
    if constexpr (FLAT && RAG) {  // A rows g, g + 8 at their items' own offsets
      int r, k, r8, k8;
      FL::slot(s, g, fn, frcp, r, k);
      FL::slot(s, g + 8, fn, frcp, r8, k8);
      rg = buf + cur * STAGE + g * FSB + (((uintptr_t)wrow + (int64_t)r * a.row_bytes + k * IB) & 15);
      rg8 = buf + cur * STAGE + (g + 8) * FSB + (((uintptr_t)wrow + (int64_t)r8 * a.row_bytes + k8 * IB) & 15);
    } else if constexpr (FLAT) {  // items g, g + 8 (MIS: 2g, 2g + 1)
      rg = buf + cur * STAGE + (L::MIS ? 2 * IB : IB) * g;
      rg8 = rg + (L::MIS ? IB : 8 * IB);
    }
    const bool live8 = ONE1 ? (kap ^ 2) < nch - c0 : live;  // ONE1: row 1's chunk kap ^ 2
    const int ch8 = ONE1 ? c0 + (live8 ? kap ^ 2 : 0) : ch;
    if constexpr (ONE1) rg8 = buf + cur * STAGE + (rho + 1) * RS + mis + (ch8 - c0) * L::CB;
    if constexpr (RAG && MT == 8) {  // rows at their own offsets, in slot_row's order
      const uint8_t *sa = buf + cur * STAGE + g * RS, *sb = sa + 8 * RS;  // v145: the copy's 16-byte shift
      // (the copy's slot + 16-byte shift, then the row's offset past its 16-byte boundary: one AND of 31)
      rg = sa + (((uint32_t)((uintptr_t)wa + c0 * L::CB) - (uint32_t)(uintptr_t)sa) & 31);
      rg8 = sb + (((uint32_t)((uintptr_t)wb + c0 * L::CB) - (uint32_t)(uintptr_t)sb) & 31);
    } else if constexpr (RAG && !FLAT) {  // rows at their own offsets
      const uintptr_t a0 = (uintptr_t)wrow + c0 * L::CB, a1 = a0 + (row0 + 1 < N ? a.row_bytes : -a.row_bytes);
      rg = buf + cur * STAGE + (a0 & 15) + (ch - c0) * L::CB;
      rg8 = buf + cur * STAGE + RS + (a1 & 15) + (ch - c0) * L::CB;
    }
    const FL fl(s, g, c, FLAT ? fn : 1, frcp);  // FLAT: the lane's roles
    const uint8_t* Bp = xrec + (MOE && !EXP ? 0 : rec_off(MT == 8 ? tb : rho)) +
                        (FLAT ? FL::rec(FL::col(s, g, fn, frcp), R::bstride(), R::BREC) : (size_t)ch * R::bstride()) +
                        c * (8 * STEPS);
    const uint8_t* Bo = Bp;  // ONE: column g of odd groups
    if constexpr (ONE && !FLAT) {  // column g holds chunk (g >> 1) ^ (g & 1) in even groups, that ^ 2 in odd ones
                          // (ONE1: chunk g, and g ^ 4)
      const int ne = ONE1 ? g : (g >> 1) ^ (g & 1), no = ne ^ (ONE1 ? 4 : 2);
      Bp = xrec + (size_t)(c0 + (ne < nch - c0 ? ne : 0)) * R::bstride() + c * (8 * STEPS);
      Bo = xrec + (size_t)(c0 + (no < nch - c0 ? no : 0)) * R::bstride() + c * (8 * STEPS);
    }
    const uint8_t* Sp = xrec + ((MOE && !EXP) || ONE ? 0 : rec_off(MT == 8 ? t0 : tok)) + (size_t)nch * R::bstride() +
                        (FLAT ? FL::rec(fl.k, R::sstride(), GR) : (size_t)(ONE1 && (one_t & 1) ? ch8 : ch) * R::sstride());
    const auto brecs = [&](int q, uint32_t (&b)[4]) {  // group q's B record words of the lane
      b[0] = b[1] = b[2] = b[3] = 0u;
      const uint8_t* Bq = (ONE && (q & 1) ? Bo : Bp) + q * R::BREC;
      if constexpr (STEPS == 2) {
        const uint4 r = *reinterpret_cast<const uint4*>(Bq);
        b[0] = r.x; b[1] = r.y; b[2] = r.z; b[3] = r.w;
      } else {
        const uint2 r = *reinterpret_cast<const uint2*>(Bq);
        b[0] = r.x; b[1] = r.y;
      }
    };
    const auto product = [&](int q, const uint32_t (&A)[2][4], auto& D) {  // D: float[4] or GroupD<T>[4]
      uint32_t b[4];
      brecs(q, b);
      group_mma<T>(D, A, b);
    };
    const auto iproducts = [&](int q, const uint32_t (&A)[2][4], int (&dh)[4], int (&dl)[4]) {  // int8: D's planes
      uint32_t b[4];
      brecs(q, b);
      group_imma(dh, dl, A, b);
    };
    if constexpr (IBLK && !ONE) {  // v109, MT = 1, 2, 4, 8: a block's products as integers (BlockSums), scaled once a
                                   // block; MT < 8 keeps element g & 1 of each row (token (2c + (g & 1)) / CPS), picked
                                   // once a block
      BlockSums<4> bs;
      uint32_t lg[2], lg8[2];  // rows g, g + 8 (MT < 8: rho, rho + MT): the block's scales, even and odd sub-blocks
      const uint8_t* Sp1 = Sp + (rec_off(t1) - rec_off(t0));  // MT = 8: token tok + 1's
      const auto blk = [&](int q, const uint32_t (&A)[2][4], float, float, float, float) {
        int dh[4], dl[4];
        iproducts(q, A, dh, dl);
        const int j = q % L::BG, bo = L::BB * (q / L::BG);
        if (j == 0) {
          L::sub_scales_s8(rg + bo, lg);
          L::sub_scales_s8(rg8 + bo, lg8);
        }
        const int ls = L::sub_scale_int(lg[j & 1], j >> 1), ls8 = L::sub_scale_int(lg8[j & 1], j >> 1);
#pragma unroll
        for (int i = 0; i < 4; ++i) bs.add(i, dh[i], dl[i], i < 2 ? ls : ls8);
        if (j == L::BG - 1) {
          // the rows' d times the block's sigma (token tok; MT = 8 also tok + 1)
          const auto ds = [&](const uint8_t* row, const uint8_t* sp) {
            return f16v(row + bo) * *reinterpret_cast<const float*>(sp + (q - j) * GR);
          };
          if constexpr (MT == 8) {
            const float sc[4] = {ds(rg, Sp), ds(rg, Sp1), ds(rg8, Sp), ds(rg8, Sp1)};
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[i] = fmaf(sc[i], bs.take(i), acc[i]);
          } else {
            const float v0 = bs.take(0, 1, g & 1), v1 = bs.take(2, 3, g & 1);
            if (keep && live) {
              acc[0] = fmaf(ds(rg, Sp), v0, acc[0]);
              acc[1] = fmaf(ds(rg8, Sp), v1, acc[1]);
            }
          }
        }
      };
      if constexpr (RAG) chunk_ragged<T>(rg, rg8, c, blk);
      else L::chunk(rg, rg8, c, blk);
    } else if constexpr (MT == 8) {  // every product kept, the epilogue right after it (registers)
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
    } else if constexpr (FLAT && IBLK) {  // v109: the lane's one kept product a group (element fl.elem of its A row's
                                          // item) as integers a block (BlockSums), scaled once a block
      static_assert(!L::MIS, "flat items of whole chunks, or RAG's and BR's of one block (v112, v113)");
      const uint8_t* myc = fl.hi ? rg8 : rg;
      const int fe = fl.elem;
      BlockSums<1> bs;
      uint32_t lg[2];  // the kept row's scales of the block, even and odd sub-blocks
      const auto each = [&](int q, const uint32_t (&A)[2][4], float, float, float, float) {
        int dh[4], dl[4];
        iproducts(q, A, dh, dl);
        const int j = q % L::BG, bo = L::BB * (q / L::BG);
        if (j == 0) L::sub_scales_s8(myc + bo, lg);
        const auto kept = [&](const int (&D)[4]) { return (fe & 2) ? ((fe & 1) ? D[3] : D[2]) : ((fe & 1) ? D[1] : D[0]); };
        bs.add(0, kept(dh), kept(dl), L::sub_scale_int(lg[j & 1], j >> 1));
        if (j == L::BG - 1) {
          const float v = bs.take(0);
          if (fl.kept) acc[0] = fmaf(f16v(myc + bo) * *reinterpret_cast<const float*>(Sp + (q - j) * GR), v, acc[0]);
        }
      };
      if constexpr (flat_blocks<T, RAG, BR>()) L::template chunk<true, 1>(rg, rg8, c, each);  // a block of each A row
      else if constexpr (RAG) chunk_ragged<T>(rg, rg8, c, each);
      else L::chunk(rg, rg8, c, each);
      if (fl.kept) itm[fl.item] = acc[0];  // the item's sum (each item is kept by one lane)
      acc[0] = 0.f;
    } else if constexpr (FLAT) {  // every group's product, then the kept lanes' epilogue of each run of DEF
                                  // groups (as ONE below), from the scales of the lane's own A row
      constexpr int DEF = GPC > 16 ? 8 : GPC;
      float ev[DEF];
      const uint8_t* myc = fl.hi ? rg8 : rg;
      const int fe = fl.elem;
      const auto each = [&](int q, const uint32_t (&A)[2][4], float, float, float, float) {
        GroupD<T> D[4];
        product(q, A, D);
        ev[q % DEF] = group_f((fe & 2) ? ((fe & 1) ? D[3] : D[2]) : ((fe & 1) ? D[1] : D[0]));  // the kept one only
        if (q % DEF == DEF - 1 && fl.kept) {
#pragma unroll
          for (int j = 0; j < DEF; ++j) kept_group<L>(myc, Sp, q - (DEF - 1) + j, GR, ev[j], acc[0]);
        }
      };
      if constexpr (RAG) chunk_ragged<T>(rg, rg8, c, each);
      else if constexpr (L::MIS) L::template sb<0, 2>(rg, rg8, c, 0, each);
      else L::chunk(rg, rg8, c, each);
      if (fl.kept) itm[fl.item] = acc[0];  // the item's sum (each item is kept by one lane)
      acc[0] = 0.f;
    } else if constexpr (ONE) {  // each pair of groups' products, then the lane's one kept value of each
                                 // pair: role t = c ^ kap, D[0] (row rho) or D[3] (row rho + 2) of the
                                 // even group (t < 2) or the odd one; its scale read by the lane itself
      // in runs of DEF groups as below (Q6_K's 32 a chunk: 8), which L::chunk gives in any order within
      // a run (Q6_K: its even groups first) but each run before the next; the last one's index ends it
      constexpr int DEF = GPC > 16 ? 8 : GPC;
      const uint8_t* myc = (one_t & 1) ? rg8 : rg;
      const bool mylive = (one_t & 1) ? live8 : live;
      // ONE1: D[2 (t & 1) + (g & 1)] (row t & 1, column g or g ^ 2, whose chunk is that row's)
      const auto pick = [&](const auto (&D)[4]) {
        return ONE1 ? ((one_t & 1) ? ((g & 1) ? D[3] : D[2]) : ((g & 1) ? D[1] : D[0])) : (one_t & 1) ? D[3] : D[0];
      };
      if constexpr (IBLK) {  // v109: a block's (run's) kept products as integers (BlockSums), scaled once a block
        // (runs of a block's L::BG groups, not DEF's: a chunk of IQ4_XS is two blocks)
        const int par = one_t >> 1;  // the lane keeps the odd group of each pair, or the even one
        BlockSums<1> bs;
        uint32_t lsp = 0;  // the kept row's scales of the block's groups of the lane's parity
        L::chunk(rg, rg8, c, [&](int q, const uint32_t (&A)[2][4], float, float, float, float) {
          int dh[4], dl[4];
          iproducts(q, A, dh, dl);
          const int j = q % L::BG, bo = L::BB * (q / L::BG);
          if (j == 0) lsp = L::sub_scales_of(myc + bo, par);
          bs.add(0, pick(dh), pick(dl), (q & 1) == par ? L::sub_scale_raw(lsp, j >> 1) : 0);  // (the other adds 0)
          if (j == L::BG - 1) {
            const float v = bs.take(0);
            if (mylive) {
              const float sig = *reinterpret_cast<const float*>(Sp + (q - j) * GR);  // the block's sigma
              acc[0] = fmaf(f16v(myc + bo) * sig, v, acc[0]);
            }
          }
        });
      } else {
        float ev[DEF / 2];
        L::chunk(rg, rg8, c, [&](int q, const uint32_t (&A)[2][4], float, float, float, float) {
          float D[4];
          product(q, A, D);
          if ((q & 1) == (one_t >> 1)) ev[(q % DEF) >> 1] = pick(D);
          if (q % DEF == DEF - 1 && mylive) {
#pragma unroll
            for (int j = 0; j < DEF / 2; ++j)
              kept_group<L>(myc, Sp, q - (DEF - 1) + 2 * j + (one_t >> 1), GR, ev[j], acc[0]);
          }
        });
      }
    } else {  // a run of DEF groups' products first, then the kept ones' epilogue (L::chunk produces the
              // groups of each run before the next run's; Q6_K's 32 groups a chunk go in runs of 8: with
              // runs of 16 its MT = 2 and 4 kernels spill ~50 bytes, with 32 the D values do not fit at all)
      constexpr int DEF = GPC > 16 ? 8 : GPC;
      float e0[DEF], e1[DEF], f0[DEF], f1[DEF], h0[DEF], h1[DEF];
      const auto run = [&](int q, const uint32_t (&A)[2][4], float sg, float sg8, float og, float og8) {
        GroupD<T> D[4];
        product(q, A, D);
        const int j = q % DEF;
        e0[j] = group_f((g & 1) ? D[1] : D[0]);  // the kept two only, converted at once (held as ints over the
        e1[j] = group_f((g & 1) ? D[3] : D[2]);  // run, their products' registers stayed live: 196 bytes spilled)
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
    if constexpr (BULK) ph ^= cur == 0;
    const bool unit_end = ++s == nst;
    if (unit_end || (split && i == total - 1)) {  // the unit's last stage (or the warp's): sum over the
                                                  // lanes of one (row, token): chunks kap, and columns c
                                                  // of the same token
      constexpr int RED = MT == 8 ? 0 : ((CPS - 1) << 2) | (CPS / 2 - 1);
      if constexpr (FLAT) {  // row r's items r fn .. r fn + fn - 1, summed by lane r (after the __syncwarp
                             // above; the next unit writes after the one at its first stage)
        if (lane < RU) {
          float v = 0.f;
          for (int j = 0; j < fn; ++j) v += itm[lane * fn + j];
          const int r = row0 + lane;
          if (r < N) store_out(a, obase + r, zero ? 0.f : v);
        }
      } else if constexpr (ONE1) {  // a row's 16 lanes: lane bit 0 ^ bit 3 fixed (row 1 where it is set)
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
      if constexpr (GU) {  // (rank 0's too: its warps store other units after the barrier)
        reinterpret_cast<float4*>(a.part + (size_t)p * gz * kKsSums)[rank * 32 + lane] =
            make_float4(acc[0], acc[1], acc[2], acc[3]);
      }
      if constexpr (!KS || GU) {
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
    const int Z = gz ? gz : (int)cluster_reg_size();
    if (H > 1) {  // warps h > 0 of a unit leave their sums in their own stage buffers (read to the end), for h = 0
      float4* mine = reinterpret_cast<float4*>(buf) + lane;
      if (hw > 0) *mine = make_float4(acc[0], acc[1], acc[2], acc[3]);
      __syncthreads();
      if (hw == 0) {
        for (int h = 1; h < H; ++h) {
          const float4 v = mine[h * S * STAGE / 16];
          acc[0] += v.x; acc[1] += v.y; acc[2] += v.z; acc[3] += v.w;
        }
      }
    }
    if constexpr (GU) {  // rank 0's warps add and store their units, after the grid barrier
      cooperative_groups::this_grid().sync();
      if (rank == 0) {
        for (int u = gw; u < units; u += GW) {
          ks_unit_sums(a.part + (size_t)u * gz * kKsSums, gz, lane, acc);
          unit_io(u);
          store_unit();
        }
      }
      cp_async_wait<0>();
      return;
    }
    const bool has_unit = gw < units && hw == 0;
    if (gz) {  // rank 0 adds and stores, after the grid barrier (every warp of the grid reaches it)
      if (ks_meet_grid(a.part + (size_t)min(gw, units - 1) * Z * kKsSums, Z, rank, lane, has_unit, acc)) store_unit();
      cp_async_wait<0>();
      return;
    }
    cluster_wait_acquire();  // every CTA of the cluster has started, rank 0's barriers set (the arrive at the top)
    if (rank > 0 && has_unit) st_async_rank0_v4(slots + ((size_t)(rank - 1) * WPC + warp) * kKsSums + lane * 4, mbar + warp, acc);
    if (rank == 0 && has_unit) {
      if (lane == 0) mbar_expect_bytes(mbar + warp, (uint32_t)(Z - 1) * kKsSums * 4u);
      mbar_wait_cluster(mbar + warp, 0);
      for (int r = 1; r < Z; ++r) {
        const float4 v = *reinterpret_cast<const float4*>(slots + ((size_t)(r - 1) * WPC + warp) * kKsSums + lane * 4);
        acc[0] += v.x; acc[1] += v.y; acc[2] += v.z; acc[3] += v.w;
      }
      store_unit();
    }
  }
  cp_async_wait<0>();
}
}  // namespace fast
}  // namespace gq
