// The fast small-M matmul's data path (csrc/gemv_fast.cuh: prep records, chunk decoders, epilogue)
// run on the host, with the chunk laid out as the kernel's shared-memory stage and a software model
// of mma.m16n8k16 (f16 x f16 -> f32) fragments. Built with `nvcc -shared` and driven from Python
// (fast_host_check.py) against gguf-py's dequantizer.
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "../csrc/gemv_fast.cuh"

namespace gq { namespace fast {
// as in gemv_fast_kernel.cuh (kept in step by hand; the kernel file needs the CUDA runtime)
template <int T> int rs_bytes(int U) { using L = FT<T>; int n = (U * L::CB + (L::MIS ? 12 : 0) + 15) / 16; return 16 * (n | 1); }
} }

using namespace gq;
using namespace gq::fast;

static float h2f(uint32_t bits16) { return __half2float(__ushort_as_half((unsigned short)(bits16 & 0xFFFF))); }

// D[lane][4] += A (fragments of 32 lanes) x B (fragments), PTX m16n8k16 layouts.
static void mma_model(const uint32_t (*A)[4], const uint32_t (*B)[2], float (*D)[4]) {
  float a[16][16], b[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, c = lane & 3;
    const int rows[4] = {g, g + 8, g, g + 8}, ks[4] = {2 * c, 2 * c, 2 * c + 8, 2 * c + 8};
    for (int r = 0; r < 4; ++r) {
      a[rows[r]][ks[r]] = h2f(A[lane][r]);
      a[rows[r]][ks[r] + 1] = h2f(A[lane][r] >> 16);
    }
    b[2 * c][g] = h2f(B[lane][0]);
    b[2 * c + 1][g] = h2f(B[lane][0] >> 16);
    b[2 * c + 8][g] = h2f(B[lane][1]);
    b[2 * c + 9][g] = h2f(B[lane][1] >> 16);
  }
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, c = lane & 3;
    for (int e = 0; e < 4; ++e) {
      const int row = g + 8 * (e >> 1), col = 2 * c + (e & 1);
      double s = D[lane][e];
      for (int k = 0; k < 16; ++k) s += (double)a[row][k] * (double)b[k][col];
      D[lane][e] = (float)s;
    }
  }
}

// D[lane][4] += A (s8) x B (s8 when sb, else u8), PTX m16n8k32 layouts: A registers 0, 2 row g, 1, 3 row
// g + 8, bytes j at k 4c + j (registers 0, 1) and 16 + 4c + j (2, 3); B registers 0, 1 column g, the same k.
static void imma_model(const uint32_t (*A)[4], const uint32_t (*B)[2], bool sb, int64_t (*D)[4]) {
  int a[16][32], b[32][8];
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, c = lane & 3;
    for (int r = 0; r < 4; ++r)
      for (int j = 0; j < 4; ++j)
        a[g + 8 * (r & 1)][4 * c + 16 * (r >> 1) + j] = (int8_t)((A[lane][r] >> (8 * j)) & 0xFF);
    for (int r = 0; r < 2; ++r)
      for (int j = 0; j < 4; ++j) {
        const int v = (B[lane][r] >> (8 * j)) & 0xFF;
        b[4 * c + 16 * r + j][g] = sb ? (int)(int8_t)v : v;
      }
  }
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, c = lane & 3;
    for (int e = 0; e < 4; ++e) {
      const int row = g + 8 * (e >> 1), col = 2 * c + (e & 1);
      for (int k = 0; k < 32; ++k) D[lane][e] += (int64_t)a[row][k] * b[k][col];
    }
  }
}

// The largest |x| of the 256-element block (8 groups) that holds group G of one token's activations xt, of nG groups:
// an int8 type's block-form records (NOTES.md v109), as the kernels' 8 record builders find it by shuffles.
template <int T>
static float block_amax(const float* xt, int G, int nG) {
  float am = 0.f;
  for (int h = G / 8 * 8; h < G / 8 * 8 + 8 && h < nG; ++h)
    am = std::fmax(am, Prep<T>::group_amax(xt + (size_t)h * FT<T>::GS));
  return am;
}

// One kept product's planes (dh, dl) into a block's integer sums (ah, al), by the scale ls - 32 of sub-block j of the
// block at blk (v109's epilogues, as the kernels' BlockSums); false where a sum would not fit the kernels' int32.
template <int T>
static bool block_add(const uint8_t* blk, int j, int64_t dh, int64_t dl, int64_t& ah, int64_t& al) {
  uint32_t ls[2];
  FT<T>::sub_scales_s8(blk, ls);
  const int sc = FT<T>::sub_scale_int(ls[j & 1], j >> 1);
  ah += dh * sc;
  al += dl * sc;
  if (std::llabs(ah) < (1ll << 31) && std::llabs(al) < (1ll << 31)) return true;
  std::fprintf(stderr, "a block's integer sum past int32\n");
  return false;
}

struct Rec {
  uint32_t A[2][4];
  float sg, sg8, og, og8;
  bool seen;
};

// D += the group's product over its STEPS mma steps: A from the lanes' records (lane l at
// recs[l * stride]), B from brec(g, c), lane (g, c)'s record words (two per step; nullptr: zeros).
// I8 (fast_i8): A[0], A[1] the P and Q fragments of one m16n8k32, B words 0, 1 the activations' high
// bytes and 2, 3 their low ones; D += 256 D_hi + D_lo, as the kernels' group_mma.
// I8's two planes' products, D_hi and D_lo, as the kernels' group_imma leaves them.
template <class BRec>
static void imma_group(const Rec* recs, int stride, int64_t (*Dh)[4], int64_t (*Dl)[4], BRec&& brec) {
  for (int s = 0; s < 2; ++s) {
    uint32_t A[32][4], Bh[32][2], Bl[32][2];
    for (int lane = 0; lane < 32; ++lane) {
      for (int r = 0; r < 4; ++r) A[lane][r] = recs[lane * stride].A[s][r];
      const uint32_t* bp = reinterpret_cast<const uint32_t*>(brec(lane >> 2, lane & 3));
      for (int r = 0; r < 2; ++r) { Bh[lane][r] = bp ? bp[r] : 0u; Bl[lane][r] = bp ? bp[2 + r] : 0u; }
    }
    imma_model(A, Bh, true, Dh);
    imma_model(A, Bl, false, Dl);
  }
}
template <class BRec>
static void mma_group(const Rec* recs, int stride, int STEPS, float (*D)[4], BRec&& brec, bool I8 = false) {
  if (I8) {
    int64_t Dh[32][4] = {}, Dl[32][4] = {};
    imma_group(recs, stride, Dh, Dl, brec);
    for (int lane = 0; lane < 32; ++lane)
      for (int e = 0; e < 4; ++e) D[lane][e] += fmaf(256.f, (float)Dh[lane][e], (float)Dl[lane][e]);
    return;
  }
  for (int s = 0; s < STEPS; ++s) {
    uint32_t A[32][4], B[32][2];
    for (int lane = 0; lane < 32; ++lane) {
      for (int r = 0; r < 4; ++r) A[lane][r] = recs[lane * stride].A[s][r];
      const uint32_t* bp = reinterpret_cast<const uint32_t*>(brec(lane >> 2, lane & 3));
      B[lane][0] = bp ? bp[2 * s] : 0u;
      B[lane][1] = bp ? bp[2 * s + 1] : 0u;
    }
    mma_model(A, B, D);
  }
}

// One lane's decode of one chunk of rows rg, rg8: the A fragments and scales of each group, into
// out[0 .. groups of the chunk) (RAG: as gemv_stream_kernel decodes ragged rows, chunk_ragged; ITEM: a
// flat item, which for Q6_K is one super-block of each, rg8 2 bytes past 4-byte alignment, and for IQ4_XS's
// ragged rows one block of each, flat_blocks; BR: the same on the aligned form, v113).
template <int T, bool RAG = false, bool ITEM = false, bool I8 = fast_i8<T>(), bool BR = false>
static void decode_chunk(const uint8_t* rg, const uint8_t* rg8, int c, Rec* out) {
  const auto f = [&](int q, const uint32_t (&A)[2][4], float sg, float sg8, float og, float og8) {
    Rec& rc = out[q];
    std::memcpy(rc.A, A, sizeof(rc.A));
    rc.sg = sg; rc.sg8 = sg8; rc.og = og; rc.og8 = og8;
    rc.seen = true;
  };
  if constexpr (ITEM && flat_blocks<T, RAG, BR>()) FT<T>::template chunk<I8, 1>(rg, rg8, c, f);
  else if constexpr (RAG) chunk_ragged<T>(rg, rg8, c, f);
  else if constexpr (ITEM && FT<T>::MIS) FT<T>::template sb<0, 2>(rg, rg8, c, 0, f);
  else chunk_as<T, I8>(rg, rg8, c, f);
#if !defined(__CUDA_ARCH__)  // (nvcc's device pass parses this too)
  if (host_misaligned) {
    std::fprintf(stderr, "a word load the GPU would fault on (alignment)\n");
    std::exit(5);
  }
#endif
}

// I8 = false: the fp16 records and decode of a fast_i8 type, as the tile kernel takes them.
template <int T, bool I8 = fast_i8<T>()>
static int run(const uint8_t* w, int R, int64_t rb, int K, const float* x, int M, float* out, int U) {
  using L = FT<T>;
  const int GPC = U * (L::CE / L::GS), STEPS = L::STEPS, RS = rs_bytes<T>(U), UCB = U * L::CB;
  if (K % (U * L::CE) || rb % 16 || rb != (int64_t)K / Traits<T>::BLOCK * Traits<T>::BYTES) return 2;
  const int nG = K / L::GS, TP2 = (M + 1) / 2, GR = Prep<T>::gr(M);
  std::vector<uint8_t> scratch(Prep<T>::bytes(K, M) + 64, 0xCD);
  uint8_t* xb = scratch.data();
  uint8_t* xs = xb + Prep<T>::b_bytes(K, M);
  for (int G = 0; G < nG; ++G)
    for (int t = 0; t < M; ++t) Prep<T>::template group<false, I8>(x + (size_t)t * K + (size_t)G * L::GS, G, t, M, xb, xs);

  const int SW = 16 * RS, SBB = GPC * M * 32 * STEPS, SSB = GPC * GR;
  std::vector<uint8_t> stage_mem(SW + SBB + SSB + 64 + 16, 0);
  uint8_t* st = reinterpret_cast<uint8_t*>(((uintptr_t)stage_mem.data() + 15) & ~(uintptr_t)15);
  const int nch = K / (U * L::CE);
  for (int n0 = 0; n0 < R; n0 += 16) {
    float acc[32][4] = {};
    for (int ch = 0; ch < nch; ++ch) {
      const int64_t off = L::MIS ? (((int64_t)ch * UCB) & ~(int64_t)15) : (int64_t)ch * UCB;
      const int P = L::MIS ? (int)((((int64_t)ch * UCB) & 15) + UCB + 15) / 16 : UCB / 16;
      if (off + 16 * P > rb) { std::fprintf(stderr, "copy past the row end\n"); return 4; }
      for (int r = 0; r < 16; ++r) {
        const int row = n0 + r < R ? n0 + r : R - 1;
        const int64_t n = 16 * P;
        std::memset(st + r * RS, 0xEE, RS);
        std::memcpy(st + r * RS, w + (size_t)row * rb + off, (size_t)n);
      }
      std::memcpy(st + SW, xb + (size_t)ch * SBB, SBB);
      std::memcpy(st + SW + SBB, xs + (size_t)ch * SSB, SSB);
      const int mis = L::MIS ? (int)(((int64_t)ch * UCB) & 15) : 0;
      std::vector<Rec> recs(32 * GPC);
      for (auto& r : recs) r.seen = false;
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane >> 2, c = lane & 3;
        for (int u = 0; u < U; ++u) {
        const uint8_t* rg = st + g * RS + mis + u * L::CB;
        const uint8_t* rg8 = st + (g + 8) * RS + mis + u * L::CB;
        decode_chunk<T, false, false, I8>(rg, rg8, c, &recs[lane * GPC + u * (L::CE / L::GS)]);
        }
      }
      for (int q = 0; q < GPC; ++q) {
        for (int lane = 0; lane < 32; ++lane)
          if (!recs[lane * GPC + q].seen) { std::fprintf(stderr, "group %d not produced\n", q); return 3; }
        float D[32][4] = {};
        // token g's records, in lane c's slots
        mma_group(&recs[q], GPC, STEPS, D, [&](int g, int c) -> const uint8_t* {
          return g < M ? st + SW + (size_t)q * M * 32 * STEPS + (g * 4 + c) * (8 * STEPS) : nullptr;
        }, I8);
        for (int lane = 0; lane < 32; ++lane) {
          const int c = lane & 3;
          const Rec& rc = recs[lane * GPC + q];
          float sb[4] = {0, 0, 0, 0}, Sv[2] = {0, 0};
          if (c < TP2) {
            const float* p = reinterpret_cast<const float*>(st + SW + SBB + (size_t)q * GR + c * 16);
            for (int i = 0; i < 4; ++i) sb[i] = p[i];
            if (L::HAS_MIN) {
              const float* ps = reinterpret_cast<const float*>(st + SW + SBB + (size_t)q * GR + TP2 * 16 + c * 8);
              Sv[0] = ps[0]; Sv[1] = ps[1];
            }
          }
          epilogue(D[lane], sb, rc.sg, rc.sg8, acc[lane]);
          if (L::HAS_MIN) epilogue_min(Sv, rc.og, rc.og8, acc[lane]);
        }
      }
    }
    for (int lane = 0; lane < 32; ++lane) {
      const int g = lane >> 2, c = lane & 3;
      for (int e = 0; e < 4; ++e) {
        const int tok = 2 * c + (e & 1), row = n0 + g + 8 * (e >> 1);
        if (tok < M && row < R) out[(size_t)tok * R + row] = acc[lane][e];
      }
    }
  }
  return 0;
}

// gemv_stream_kernel's dense path (gemv_stream_kernel.cuh, kept in step by hand): MT = 1, 2, 4, 8 tokens
// for M = 1, 2, 3..4, 5..8; a unit is RPU = 2 MT rows, a stage CPS = 8 / MT chunks of each. Lane (g, c),
// rho = g / CPS, kap = g % CPS, decodes rows rho, rho + MT at chunk kap; B column g is token rho's
// chunk kap; the products where the chunks agree are kept and summed over the lanes of one (row, token).
// Records: StreamRecs per token, stream_rec_stride apart (a short last chunk's padding: zeros; tokens >=
// M: none, NaN bytes). Lanes past a short last stage decode its first chunk and keep nothing; rows past R are read
// as row R - 1 and not stored. Stages as the kernel's copies leave them, the rows' base taken 16-byte
// aligned: Q6_K's from the 16-byte boundary below the stage; ragged rows (M = 1, rows_rag) each at its
// own offset, zero-filled past the row's end to the end of the stage's chunks; bytes no copy writes
// hold 0xFF (NaN as an fp16 scale), so a decode that reaches them shows.
// ctas > 0 (MT = 2, 4): the kernel's split launch (a.split) with `ctas` CTAs of `wpc` warps: CTA b owns
// units [b U / ctas, (b + 1) U / ctas), its warps equal runs of their stages; a warp's part of a unit
// cut between warps is lane-summed and added into the unit's slots with its count of stages, and the
// warp that completes the count stores the slots. The warps of a CTA run here one after another, in
// reverse order for odd b, so that the completing warp is sometimes the first. Each output must be
// stored exactly once.
// exp8: the MT = 8 form whatever M, as the MoE units over hit experts (EXP) run it on one expert whose
// rows may be ragged: stage slot j < 8 holds the unit's row 2j, slot 8 + j row 2j + 1 (slot_row: a row
// past the unit's last read as its first, or the row before it), so D rows g, g + 8 are rows 2g, 2g + 1.
// An int8 type (IBLK, NOTES.md v109): records in the block form, each kept (row, token)'s products of a block summed
// as integers, D (ls - 32) per plane, then converted and scaled by d sigma once; a sum that would not fit the
// kernel's int32 fails the run.
template <int T>
static int run_stream(const uint8_t* w, int R, int64_t rb, int K, const float* x, int M, float* out, int ctas = 0,
                      int wpc = 0, bool exp8 = false) {
  using L = FT<T>;
  using SR = StreamRecs<T>;
  const int GPC = L::CE / L::GS, STEPS = L::STEPS, BREC = Prep<T>::BREC, GR = Prep<T>::gr(1);
  if (M < 1 || M > 8 || K % Traits<T>::BLOCK || rb != (int64_t)K / Traits<T>::BLOCK * Traits<T>::BYTES) return 2;
  const bool rag = K % L::CE || rb % 16;
  if (rag && ((M > 1 && !exp8) || R < 2 || rb % 4 != (T == MXFP4 ? 2 : 0) || Traits<T>::BYTES % 16 == 0)) return 2;
  const int MT = exp8 || M > 4 ? 8 : M == 1 ? 1 : M == 2 ? 2 : 4;
  if (ctas > 0 && (MT == 1 || MT == 8 || rag || wpc < 1)) return 2;
  const bool slots2 = rag && MT == 8;  // exp8's slot order
  const int CPS = 8 / MT, RPU = 2 * MT, RS = (CPS * L::CB + 15 + 15) / 16 * 16;
  const int nG = K / L::GS, nch = SR::chunks(K), nst = (nch + CPS - 1) / CPS;
  const size_t RB = MT == 8 ? stream_rec_stride<T, 8>(K) : stream_rec_stride<T, 1>(K);
  const bool iblk = fast_i8<T>();
  // tokens past M have no records at all (the kernel builds none for them; their columns are never
  // stored): 0xFF, NaN as fp16 and fp32, so that a read of them reaching an output shows
  std::vector<uint8_t> recs(MT * RB, 0xFF);
  const std::vector<float> zeros(L::GS, 0.f);
  for (int t = 0; t < M; ++t)
    for (int G = 0; G < nch * GPC; ++G) {
      const float* xg = G < nG ? x + (size_t)t * K + (size_t)G * L::GS : zeros.data();
      uint8_t* rt = recs.data() + stream_rec_off(t, RB, MT);
      if constexpr (fast_i8<T>()) {
        if (iblk) {
          SR::group_blk(xg, block_amax<T>(x + (size_t)t * K, G, nG), G, K, rt);
          continue;
        }
      }
      if (MT == 8) {
        SR::template group<SR::SWZ8>(xg, G, K, rt);  // as the kernel (SWZ8 types: the stores in the rotated order)
      } else {
        SR::group(xg, G, K, rt);
      }
    }
  const uint8_t* srecs = recs.data() + (size_t)nch * SR::bstride();  // token 0's {sigma, -beta, ., ., S}
  std::vector<uint8_t> stage_mem(RPU * RS + 16);
  uint8_t* st = reinterpret_cast<uint8_t*>(((uintptr_t)stage_mem.data() + 15) & ~(uintptr_t)15);
  std::vector<int> mis(RPU);  // where each row's stage starts in its buffer
  const int RED = MT == 8 ? 0 : ((CPS - 1) << 2) | (CPS / 2 - 1);
  float acc[32][4];  // MT < 8: (row rho, row rho + MT) x tok; MT = 8: x (2c, 2c + 1)
  // stage s of the unit at row0, into acc (false: a stage would overrun its buffer)
  const auto stage = [&](int row0, int s) -> bool {
    const int c0 = CPS * s, nlive = nch - c0 < CPS ? nch - c0 : CPS;
    std::memset(st, 0xFF, (size_t)RPU * RS);
    for (int r = 0; r < RPU; ++r) {
      int row = row0 + r < R ? row0 + r : rag ? row0 - 1 : R - 1;  // (as the kernel: same parity)
      if (slots2) row = row0 + slot_row(r, std::min(RPU - 1, R - 1 - row0));
      const int64_t b0 = (int64_t)c0 * L::CB, start = (int64_t)row * rb + b0;
      const int64_t nb = std::min<int64_t>((int64_t)nlive * L::CB, rb - b0);  // bytes of the row
      mis[r] = rag || L::MIS ? (int)(start & 15) : 0;
      if ((rag || L::MIS) && (mis[r] + nb + 15) / 16 * 16 > RS) { std::fprintf(stderr, "stage past RS\n"); return false; }
      std::memset(st + r * RS + mis[r], 0, (size_t)nlive * L::CB);  // the zero fill (read only past nb)
      std::memcpy(st + r * RS + mis[r], w + start, (size_t)nb);
    }
    const auto chunk_of = [&](int g) { return c0 + (g % CPS < nlive ? g % CPS : 0); };
    std::vector<Rec> rcs(32 * GPC);
    const uint8_t* rgs[32][2];
    for (int lane = 0; lane < 32; ++lane) {
      const int g = lane >> 2, c = lane & 3, r = g / CPS;
      const uint8_t* rg = rgs[lane][0] = st + r * RS + mis[r] + (chunk_of(g) - c0) * L::CB;
      const uint8_t* rg8 = rgs[lane][1] = st + (r + MT) * RS + mis[r + MT] + (chunk_of(g) - c0) * L::CB;
      if (rag) decode_chunk<T, true>(rg, rg8, c, &rcs[lane * GPC]);
      else decode_chunk<T>(rg, rg8, c, &rcs[lane * GPC]);
    }
    int64_t ih[32][4] = {}, il[32][4] = {};  // iblk: a block's integer sums
    for (int q = 0; q < GPC; ++q) {
      float D[32][4] = {};
      const auto brec = [&](int g, int c) -> const uint8_t* {
        return recs.data() + stream_rec_off(g / CPS, RB, MT) + (size_t)chunk_of(g) * SR::bstride() + q * BREC +
               c * (8 * STEPS);
      };
      if constexpr (fast_i8<T>()) {
       if (iblk) {
        int64_t Dh[32][4] = {}, Dl[32][4] = {};
        imma_group(&rcs[q], GPC, Dh, Dl, brec);
        // a lane's kept products: MT = 8 all four (element i: row half i >> 1, token 2c + (i & 1)); else elements
        // g & 1 and 2 + (g & 1) (rows rho, rho + MT), token (2c + (g & 1)) / CPS, where the chunks agree
        const int nv = MT == 8 ? 4 : 2, j = q % L::BG;
        for (int lane = 0; lane < 32; ++lane) {
          const int g = lane >> 2, c = lane & 3, kap = g % CPS;
          const uint8_t* blk[2] = {rgs[lane][0] + L::BB * (q / L::BG), rgs[lane][1] + L::BB * (q / L::BG)};
          for (int v = 0; v < nv; ++v) {
            const int e = MT == 8 ? v : 2 * v + (g & 1);
            if (!block_add<T>(blk[e >> 1], j, Dh[lane][e], Dl[lane][e], ih[lane][v], il[lane][v])) return false;
          }
          if (j != L::BG - 1) continue;
          const bool kept = MT == 8 || ((2 * c) % CPS == (kap & ~1) && kap < nlive);
          const uint8_t* Sp = srecs + (size_t)chunk_of(g) * SR::sstride() + (q - j) * GR;
          for (int v = 0; v < nv; ++v) {
            const int e = MT == 8 ? v : 2 * v + (g & 1), tok = MT == 8 ? 2 * c + (v & 1) : (2 * c + (g & 1)) / CPS;
            const float sig = *reinterpret_cast<const float*>(Sp + stream_rec_off(tok, RB, MT));
            if (kept)
              acc[lane][v] = std::fmaf(f16v(blk[e >> 1]) * sig,
                                       std::fmaf(256.f, (float)ih[lane][v], (float)il[lane][v]), acc[lane][v]);
            ih[lane][v] = il[lane][v] = 0;
          }
        }
        continue;
       }
      }
      mma_group(&rcs[q], GPC, STEPS, D, brec, fast_i8<T>());
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane >> 2, c = lane & 3, kap = g % CPS;
        const Rec& rc = rcs[lane * GPC + q];
        const uint8_t* Sp = srecs + (size_t)chunk_of(g) * SR::sstride() + q * GR;
        float* a = acc[lane];
        if (MT == 8) {  // every product: rows g, g + 8 x tokens 2c, 2c + 1
          const float* s0 = reinterpret_cast<const float*>(Sp + stream_rec_off(2 * c, RB, MT));
          const float* s1 = reinterpret_cast<const float*>(Sp + stream_rec_off(2 * c + 1, RB, MT));
          a[0] = std::fmaf(rc.sg, std::fmaf(s0[0], D[lane][0], s0[1]), a[0]);
          a[1] = std::fmaf(rc.sg, std::fmaf(s1[0], D[lane][1], s1[1]), a[1]);
          a[2] = std::fmaf(rc.sg8, std::fmaf(s0[0], D[lane][2], s0[1]), a[2]);
          a[3] = std::fmaf(rc.sg8, std::fmaf(s1[0], D[lane][3], s1[1]), a[3]);
          if (L::HAS_MIN) {
            a[0] = std::fmaf(rc.og, s0[4], a[0]);
            a[1] = std::fmaf(rc.og, s1[4], a[1]);
            a[2] = std::fmaf(rc.og8, s0[4], a[2]);
            a[3] = std::fmaf(rc.og8, s1[4], a[3]);
          }
        } else if ((2 * c) % CPS == (kap & ~1) && kap < nlive) {  // element g & 1, token (2c + (g & 1)) / CPS
          const float* sb = reinterpret_cast<const float*>(Sp + stream_rec_off((2 * c + (g & 1)) / CPS, RB, MT));
          a[0] = std::fmaf(rc.sg, std::fmaf(sb[0], D[lane][g & 1], sb[1]), a[0]);
          a[1] = std::fmaf(rc.sg8, std::fmaf(sb[0], D[lane][2 + (g & 1)], sb[1]), a[1]);
          if (L::HAS_MIN) {
            a[0] = std::fmaf(rc.og, sb[4], a[0]);
            a[1] = std::fmaf(rc.og8, sb[4], a[1]);
          }
        }
      }
    }
    return true;
  };
  // the kernel's lane sum: xor shuffles over RED
  const auto lane_sums = [&]() {
    for (int o = 16; o > 0; o >>= 1) {
      if (!(RED & o)) continue;
      float prev[32][4];
      std::memcpy(prev, acc, sizeof(prev));
      for (int lane = 0; lane < 32; ++lane)
        for (int e = 0; e < 4; ++e) acc[lane][e] = prev[lane][e] + prev[lane ^ o][e];
    }
  };
  // f(r0, r1, tok, v0, v1) for the storing lanes ((lane & RED) == 0) and their tokens below M
  const auto each_out = [&](int row0, auto&& f) {
    for (int lane = 0; lane < 32; ++lane) {
      if (lane & RED) continue;
      const int g = lane >> 2, c = lane & 3, r0 = row0 + (slots2 ? 2 * g : g / CPS), r1 = r0 + (slots2 ? 1 : MT);
      const int tok = MT == 8 ? 2 * c : (2 * c + (g & 1)) / CPS;
      for (int e = 0; e < (MT == 8 ? 2 : 1); ++e)
        if (tok + e < M) f(r0, r1, tok + e, MT == 8 ? acc[lane][e] : acc[lane][0], MT == 8 ? acc[lane][2 + e] : acc[lane][1]);
    }
  };
  std::vector<int> stored((size_t)M * R, 0);
  const auto store = [&](int r0, int r1, int tok, float v0, float v1) {
    if (r0 < R) { out[(size_t)tok * R + r0] = v0; ++stored[(size_t)tok * R + r0]; }
    if (r1 < R) { out[(size_t)tok * R + r1] = v1; ++stored[(size_t)tok * R + r1]; }
  };
  const int units = (R + RPU - 1) / RPU;
  if (ctas == 0) {
    for (int u = 0; u < units; ++u) {
      std::memset(acc, 0, sizeof(acc));
      for (int s = 0; s < nst; ++s)
        if (!stage(RPU * u, s)) return 4;
      lane_sums();
      each_out(RPU * u, store);
    }
  } else {
    const int SLOT = split_slot(MT);
    for (int b = 0; b < ctas; ++b) {
      const int u0 = (int)((int64_t)b * units / ctas), u1 = (int)((int64_t)(b + 1) * units / ctas);
      std::vector<float> sums((size_t)SLOT * (u1 - u0), 0.f);
      for (int k = 0; k < wpc; ++k) {
        const int warp = b & 1 ? wpc - 1 - k : k;
        const int j0 = u0 * nst + (int)((int64_t)warp * (u1 - u0) * nst / wpc);
        const int total = u0 * nst + (int)((int64_t)(warp + 1) * (u1 - u0) * nst / wpc) - j0;
        int p = j0 / nst, s = j0 % nst, s_head = s;
        std::memset(acc, 0, sizeof(acc));
        for (int i = 0; i < total; ++i) {
          if (!stage(RPU * p, s)) return 4;
          const bool unit_end = ++s == nst;
          if (!unit_end && i != total - 1) continue;
          lane_sums();
          if (unit_end && s_head == 0) {
            each_out(RPU * p, store);
          } else {  // slots (row rho [+ MT], token): the kernel's at[0], at[1]
            float* us = sums.data() + (size_t)SLOT * (p - u0);
            each_out(RPU * p, [&](int r0, int, int tok, float v0, float v1) {
              const int rho = r0 - RPU * p;
              us[rho * MT + tok] += v0;
              us[(rho + MT) * MT + tok] += v1;
            });
            us[SLOT - 1] += (float)(s - s_head);
            if (us[SLOT - 1] == (float)nst)
              each_out(RPU * p, [&](int r0, int r1, int tok, float, float) {
                const int rho = r0 - RPU * p;
                store(r0, r1, tok, us[rho * MT + tok], us[(rho + MT) * MT + tok]);
              });
          }
          std::memset(acc, 0, sizeof(acc));
          if (unit_end) { s = s_head = 0; ++p; }
        }
      }
    }
  }
  for (int v : stored)
    if (v != 1) { std::fprintf(stderr, "an output stored %d times\n", v); return 5; }
  return 0;
}

// gemv_stream_kernel<..., ONE> (M = 1 on the MT = 2 geometry, kept in step by hand): units of 4 rows, a
// stage 4 chunks of each; lane (g, c) decodes chunk kap = g % 4 of rows g / 4 and g / 4 + 2; B's column
// g holds chunk (g >> 1) ^ (g & 1) in even groups and that ^ 2 in odd ones; role t = c ^ kap keeps
// D[0] (t = 0, 2) or D[3] (t = 1, 3) of the even (t < 2) or odd group of each pair, scaled by
// FT<T>::scale of its own row and group; the lane sums are xor shuffles 2, 8, 5, stored by lanes 0,
// 16, 1, 17 (rows 0..3). Aligned rows only (K a multiple of the chunk, rows of 16-byte pieces).
// An int8 type (IBLK, NOTES.md v109): records in the block form (StreamRecs::group_blk, each block's largest |x|),
// and a lane's 4 kept groups of a block summed as integers, D (ls - 32) per plane, then converted and scaled by d
// sigma once; a sum that would not fit the kernel's int32 fails the run.
template <int T>
static int run_stream_one(const uint8_t* w, int R, int64_t rb, int K, const float* x, float* out) {
  using L = FT<T>;
  using SR = StreamRecs<T>;
  constexpr bool IBLK = fast_i8<T>();
  const int GPC = L::CE / L::GS, STEPS = L::STEPS, BREC = Prep<T>::BREC, GR = Prep<T>::gr(1);
  if (K % L::CE || rb % 16 || rb != (int64_t)K / Traits<T>::BLOCK * Traits<T>::BYTES) return 2;
  const int CPS = 4, RPU = 4, RS = (CPS * L::CB + 12 + 15) / 16 * 16;
  const int nch = SR::chunks(K), nst = (nch + CPS - 1) / CPS;
  std::vector<uint8_t> recs(SR::bytes(K), 0xCD);
  for (int G = 0; G < nch * GPC; ++G) {
    if constexpr (IBLK) {
      SR::group_blk(x + (size_t)G * L::GS, block_amax<T>(x, G, K / L::GS), G, K, recs.data());
    } else {
      SR::group(x + (size_t)G * L::GS, G, K, recs.data());
    }
  }
  const uint8_t* srecs = recs.data() + (size_t)nch * SR::bstride();
  std::vector<uint8_t> stage_mem(RPU * RS + 16);
  uint8_t* st = reinterpret_cast<uint8_t*>(((uintptr_t)stage_mem.data() + 15) & ~(uintptr_t)15);
  std::vector<int> stored(R, 0);
  for (int row0 = 0; row0 < R; row0 += RPU) {
    float acc[32] = {};
    for (int s = 0; s < nst; ++s) {
      const int c0 = CPS * s, nlive = nch - c0 < CPS ? nch - c0 : CPS;
      const int mis = L::MIS ? (int)(((int64_t)c0 * L::CB) & 15) : 0;
      std::memset(st, 0xFF, (size_t)RPU * RS);
      for (int r = 0; r < RPU; ++r) {
        const int row = row0 + r < R ? row0 + r : R - 1;
        std::memcpy(st + r * RS + mis, w + (int64_t)row * rb + (int64_t)c0 * L::CB, (size_t)nlive * L::CB);
      }
      const auto live_chunk = [&](int k) { return c0 + (k < nlive ? k : 0); };
      std::vector<Rec> rcs(32 * GPC);
      const uint8_t* rg[32];
      const uint8_t* rg8[32];
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane >> 2, c = lane & 3, rho = g / 4, kap = g % 4;
        rg[lane] = st + rho * RS + mis + (live_chunk(kap) - c0) * L::CB;
        rg8[lane] = rg[lane] + 2 * RS;
        decode_chunk<T>(rg[lane], rg8[lane], c, &rcs[lane * GPC]);
      }
      std::vector<float> D((size_t)GPC * 32 * 4);
      std::vector<int64_t> Dh((size_t)GPC * 32 * 4), Dl((size_t)GPC * 32 * 4);
      for (int q = 0; q < GPC; ++q) {
        const auto brec = [&](int g, int c) -> const uint8_t* {
          const int ne = (g >> 1) ^ (g & 1), k = q & 1 ? ne ^ 2 : ne;
          return recs.data() + (size_t)live_chunk(k) * SR::bstride() + q * BREC + c * (8 * STEPS);
        };
        if constexpr (IBLK) {
          imma_group(&rcs[q], GPC, reinterpret_cast<int64_t(*)[4]>(&Dh[(size_t)q * 128]),
                     reinterpret_cast<int64_t(*)[4]>(&Dl[(size_t)q * 128]), brec);
        } else {
          float Dq[32][4] = {};
          mma_group(&rcs[q], GPC, STEPS, Dq, brec, fast_i8<T>());
          std::memcpy(&D[(size_t)q * 128], Dq, sizeof(Dq));
        }
      }
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane >> 2, c = lane & 3, kap = g % 4, t = c ^ kap;
        if (kap >= nlive) continue;
        const uint8_t* myc = t & 1 ? rg8[lane] : rg[lane];
        const uint8_t* srow = srecs + (size_t)live_chunk(kap) * SR::sstride();
        if constexpr (IBLK) {
          const int e = t & 1 ? 3 : 0, par = t >> 1;
          for (int b = 0; b < GPC / 8; ++b) {
            const uint32_t lsp = L::sub_scales_of(myc + L::BB * b, par);
            int64_t ah = 0, al = 0;
            for (int j = 0; j < 4; ++j) {
              const int G = 8 * b + 2 * j + par;
              const int ls = L::sub_scale_raw(lsp, j);
              ah += Dh[(size_t)G * 128 + lane * 4 + e] * ls;
              al += Dl[(size_t)G * 128 + lane * 4 + e] * ls;
              if (std::llabs(ah) >= (1ll << 31) || std::llabs(al) >= (1ll << 31)) {
                std::fprintf(stderr, "a block's integer sum past int32\n");
                return 6;
              }
            }
            const float sig = *reinterpret_cast<const float*>(srow + 8 * b * GR);
            acc[lane] = std::fmaf(f16v(myc + L::BB * b) * sig, std::fmaf(256.f, (float)ah, (float)al), acc[lane]);
          }
        } else {
          for (int j = 0; j < GPC / 2; ++j) {
            const int G = 2 * j + (t >> 1);
            const float v = D[(size_t)G * 128 + lane * 4 + (t & 1 ? 3 : 0)];
            float sg, og;
            L::scale(myc, G, sg, og);
            const float* sb = reinterpret_cast<const float*>(srow + G * GR);
            acc[lane] = std::fmaf(sg, std::fmaf(sb[0], v, sb[1]), acc[lane]);
            if (L::HAS_MIN) acc[lane] = std::fmaf(og, sb[4], acc[lane]);
          }
        }
      }
    }
    for (int o : {2, 8, 5}) {
      float prev[32];
      std::memcpy(prev, acc, sizeof(prev));
      for (int lane = 0; lane < 32; ++lane) acc[lane] = prev[lane] + prev[lane ^ o];
    }
    for (int lane : {0, 1, 16, 17}) {
      const int g = lane >> 2, c = lane & 3, r = row0 + (g >> 2) + 2 * ((c ^ g) & 1);
      if (r < R) { out[r] = acc[lane]; ++stored[r]; }
    }
  }
  for (int v : stored)
    if (v != 1) { std::fprintf(stderr, "an output stored %d times\n", v); return 5; }
  return 0;
}

// gemv_stream_kernel's MoE pairs on flat items (FLAT, one pair here: R rows of one expert, one x row):
// units of flat_rows(n) rows whose (row, item) items, in memory order, are streamed as stages of 16
// contiguous items; the lanes' roles from FlatLane (the kernel's own), each kept product scaled from its
// item's header and summed per item, each item's sum written once, a row's items added at the unit's end.
// RAG (MXFP4 rows of 4k + 2 bytes, K any multiple of 32: items are chunks, the last one short; IQ4_XS rows of an
// odd count of blocks, K up to 3840: items of one block, v112); A row a
// of a stage holds FlatLane::slot's (row, item), copied as the kernel does to its own offset in its slot
// (the rows' base taken 16-byte aligned), zero-filled past the row's end; bytes no copy writes hold 0xFF.
// BR (IQ4_XS's ragged rows of at most 4 one-block items, v113: the kernel's MR on flat items): the aligned form's
// stages (one contiguous copy of 16 items, each 16-byte aligned in the rows) with one-block items.
template <int T, bool RAG, bool BR = false>
static int run_stream_flat(const uint8_t* w, int R, int64_t rb, int K, const float* x, float* out) {
  using L = FT<T>;
  using SR = StreamRecs<T>;
  using FL = FlatLane<T, RAG, BR>;
  constexpr int IB = flat_item_bytes<T, RAG, BR>(), FSB = flat_slot_bytes<T, RAG, BR>();
  const int GPI = L::CE / L::GS * IB / L::CB, STEPS = L::STEPS, BREC = Prep<T>::BREC, GR = Prep<T>::gr(1);
  const int n = flat_row_items<T, RAG, BR>(K);
  if (RAG ? (T != MXFP4 && T != IQ4_XS) || K % Traits<T>::BLOCK || rb != (int64_t)K / Traits<T>::BLOCK * Traits<T>::BYTES ||
                rb % 4 != (T == MXFP4 ? 2 : 0) || rb % 16 == 0 ||
                !flat_rag_fits<T>(n)
          : n < 1 || n > 4 || K != n * (L::CE * IB / L::CB) || rb != (int64_t)n * IB || (BR && (T != IQ4_XS || rb % 16 == 0)))
    return 2;
  if (R % flat_rows(n)) return 2;
  const uint32_t rcp = FL::slot_rcp(n);  // RAG: f / n as the kernel takes it
  const int RU = flat_rows(n), nst = flat_stages(n), nch = SR::chunks(K);
  std::vector<float> xp((size_t)nch * L::CE, 0.f);  // x padded with zeros to whole chunks, as load_x
  std::memcpy(xp.data(), x, sizeof(float) * K);
  std::vector<uint8_t> recs(SR::bytes(K), 0xCD);
  for (int G = 0; G < nch * (L::CE / L::GS); ++G) {
    if constexpr (fast_i8<T>())  // the block form (NOTES.md v109)
      SR::group_blk(xp.data() + (size_t)G * L::GS, block_amax<T>(xp.data(), G, nch * (L::CE / L::GS)), G, K, recs.data());
    else
      SR::group(xp.data() + (size_t)G * L::GS, G, K, recs.data());
  }
  const uint8_t* srecs = recs.data() + (size_t)nch * SR::bstride();
  std::vector<uint8_t> stage_mem(16 * FSB + 32);
  uint8_t* st = reinterpret_cast<uint8_t*>(((uintptr_t)stage_mem.data() + 15) & ~(uintptr_t)15);
  for (int row0 = 0; row0 < R; row0 += RU) {
    std::vector<float> itm(RU * n, NAN);
    std::vector<int> kept(RU * n, 0);
    for (int s = 0; s < nst; ++s) {
      int mis[16] = {};  // RAG: where A row a's item starts in its slot
      if constexpr (RAG) {
        std::memset(st, 0xFF, (size_t)16 * FSB);
        for (int a = 0; a < 16; ++a) {
          int r, k;
          FL::slot(s, a, n, rcp, r, k);
          const int64_t start = (int64_t)(row0 + r) * rb + (int64_t)k * IB;
          const int64_t nb = std::min<int64_t>(IB, rb - (int64_t)k * IB);
          mis[a] = (int)(start & 15);
          if ((mis[a] + IB + 15) / 16 * 16 > FSB) { std::fprintf(stderr, "slot past FSB\n"); return 4; }
          std::memset(st + a * FSB + mis[a], 0, IB);
          std::memcpy(st + a * FSB + mis[a], w + start, (size_t)nb);
        }
      } else {  // one run (the kernel's 16-byte pieces: its start 16-byte aligned, BR's too)
        const int64_t start = (int64_t)row0 * rb + (int64_t)16 * s * IB;
        if (start % 16) { std::fprintf(stderr, "a stage's run off 16-byte alignment\n"); return 4; }
        std::memcpy(st, w + start, (size_t)16 * IB);
      }
      std::vector<Rec> rcs(32 * GPI);
      const uint8_t* rg[32];
      const uint8_t* rg8[32];
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane >> 2, c = lane & 3;
        if constexpr (RAG) {
          rg[lane] = st + g * FSB + mis[g];
          rg8[lane] = st + (g + 8) * FSB + mis[g + 8];
          decode_chunk<T, true, true>(rg[lane], rg8[lane], c, &rcs[lane * GPI]);
        } else {
          rg[lane] = st + (L::MIS ? 2 * IB : IB) * g;
          rg8[lane] = rg[lane] + (L::MIS ? IB : 8 * IB);
          decode_chunk<T, false, true, fast_i8<T>(), BR>(rg[lane], rg8[lane], c, &rcs[lane * GPI]);
        }
      }
      std::vector<float> D((size_t)GPI * 32 * 4);
      std::vector<int64_t> Dh((size_t)GPI * 32 * 4), Dl((size_t)GPI * 32 * 4);
      for (int q = 0; q < GPI; ++q) {
        const auto brec = [&](int g, int c) -> const uint8_t* {
          return recs.data() + FL::rec(FL::col(s, g, n, rcp), SR::bstride(), BREC) + q * BREC + c * (8 * STEPS);
        };
        if constexpr (fast_i8<T>()) {
          imma_group(&rcs[q], GPI, reinterpret_cast<int64_t(*)[4]>(&Dh[(size_t)q * 128]),
                     reinterpret_cast<int64_t(*)[4]>(&Dl[(size_t)q * 128]), brec);
        } else {
          float Dq[32][4] = {};
          mma_group(&rcs[q], GPI, STEPS, Dq, brec);
          std::memcpy(&D[(size_t)q * 128], Dq, sizeof(Dq));
        }
      }
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane >> 2, c = lane & 3;
        const FL fl(s, g, c, n, rcp);
        if (!fl.kept) continue;
        const uint8_t* myc = fl.hi ? rg8[lane] : rg[lane];
        float acc = 0.f;
        if constexpr (fast_i8<T>()) {  // v109: the kept product of a block's groups as integers, scaled once
          const uint8_t* sp = srecs + FL::rec(fl.k, SR::sstride(), GR);
          for (int b = 0; b < GPI / 8; ++b) {
            int64_t ah = 0, al = 0;
            for (int j = 0; j < 8; ++j) {
              const size_t i = (size_t)(8 * b + j) * 128 + lane * 4 + fl.elem;
              if (!block_add<T>(myc + L::BB * b, j, Dh[i], Dl[i], ah, al)) return 6;
            }
            const float sig = *reinterpret_cast<const float*>(sp + 8 * b * GR);
            acc = std::fmaf(f16v(myc + L::BB * b) * sig, std::fmaf(256.f, (float)ah, (float)al), acc);
          }
          itm[fl.item] = acc;
          ++kept[fl.item];
          continue;
        }
        for (int G = 0; G < GPI; ++G) {
          float sg, og;
          L::scale(myc, G, sg, og);
          const float* sb = reinterpret_cast<const float*>(srecs + FL::rec(fl.k, SR::sstride(), GR) + G * GR);
          acc = std::fmaf(sg, std::fmaf(sb[0], D[(size_t)G * 128 + lane * 4 + fl.elem], sb[1]), acc);
          if (L::HAS_MIN) acc = std::fmaf(og, sb[4], acc);
        }
        itm[fl.item] = acc;
        ++kept[fl.item];
      }
    }
    for (int i = 0; i < RU * n; ++i)
      if (kept[i] != 1) { std::fprintf(stderr, "item %d kept %d times\n", i, kept[i]); return 5; }
    for (int r = 0; r < RU; ++r) {
      float v = 0.f;
      for (int j = 0; j < n; ++j) v += itm[r * n + j];
      out[row0 + r] = v;
    }
  }
  return 0;
}

// f(std::integral_constant<int, T>()) for the fast path's type t (the ctypes entry points below), or
// `missing` for any other type.
template <class F>
static int with_fast_type(int t, int missing, F&& f) {
  switch (t) {
    case Q4_0: return f(std::integral_constant<int, Q4_0>());
    case Q8_0: return f(std::integral_constant<int, Q8_0>());
    case Q4_K: return f(std::integral_constant<int, Q4_K>());
    case Q5_K: return f(std::integral_constant<int, Q5_K>());
    case Q6_K: return f(std::integral_constant<int, Q6_K>());
    case IQ4_XS: return f(std::integral_constant<int, IQ4_XS>());
    case MXFP4: return f(std::integral_constant<int, MXFP4>());
  }
  return missing;
}

extern "C" int fast_matmul_stream_one(int t, const uint8_t* w, int R, long long rb, int K, const float* x, float* out) {
  return with_fast_type(t, 1, [&](auto T) { return run_stream_one<decltype(T)::value>(w, R, rb, K, x, out); });
}

extern "C" int fast_matmul_stream_flat(int t, const uint8_t* w, int R, long long rb, int K, const float* x, float* out) {
  return with_fast_type(t, 1, [&](auto T) { return run_stream_flat<decltype(T)::value, false>(w, R, rb, K, x, out); });
}

extern "C" int fast_matmul_stream_flat_ragged(int t, const uint8_t* w, int R, long long rb, int K, const float* x,
                                              float* out) {
  return with_fast_type(t, 1, [&](auto T) { return run_stream_flat<decltype(T)::value, true>(w, R, rb, K, x, out); });
}

// BR (v113): IQ4_XS's ragged rows of at most 4 one-block items, each stage one run
extern "C" int fast_matmul_stream_flat_run(int t, const uint8_t* w, int R, long long rb, int K, const float* x,
                                           float* out) {
  return with_fast_type(t, 1, [&](auto T) { return run_stream_flat<decltype(T)::value, false, true>(w, R, rb, K, x, out); });
}

extern "C" int fast_matmul_stream(int t, const uint8_t* w, int R, long long rb, int K, const float* x, int M,
                                  float* out, int ctas, int wpc, int exp8) {
  return with_fast_type(t, 1, [&](auto T) {
    return run_stream<decltype(T)::value>(w, R, rb, K, x, M, out, ctas, wpc, exp8 != 0);
  });
}

// f16: a fast_i8 type's fp16 form (the tile kernel's records and decode)
extern "C" int fast_matmul(int t, const uint8_t* w, int R, long long rb, int K, const float* x, int M, float* out,
                           int U, int f16) {
  return with_fast_type(t, 1, [&](auto T) {
    constexpr int TT = decltype(T)::value;
    return f16 ? run<TT, false>(w, R, rb, K, x, M, out, U) : run<TT>(w, R, rb, K, x, M, out, U);
  });
}

// FT<T>::scale against the scales FT<T>::chunk passes for every group of one row's chunks (K a
// multiple of the chunk); returns the number of groups where they differ, or -2 when chunk() breaks
// the order gemv_stream_kernel's deferred epilogues rely on: runs of DEF groups (8 when a chunk has
// more than 16, else all), each run's groups before the next run's, each run ending with its last.
template <int T>
static int check_scales(const uint8_t* row, int K) {
  using L = FT<T>;
  const int GPC = L::CE / L::GS, DEF = GPC > 16 ? 8 : GPC;
  std::vector<uint8_t> buf(L::CB + 32);
  uint8_t* ch = reinterpret_cast<uint8_t*>(((uintptr_t)buf.data() + 15) & ~(uintptr_t)15);
  std::memcpy(ch, row, L::CB);
  std::vector<int> order;
  L::chunk(ch, ch, 0, [&](int q, const uint32_t (&)[2][4], float, float, float, float) { order.push_back(q); });
  if ((int)order.size() != GPC) return -2;
  for (int i = 0; i < GPC; ++i)
    if (order[i] / DEF != i / DEF || (i % DEF == DEF - 1 && order[i] != i)) return -2;
  int bad = 0;
  for (int k = 0; k < K / L::CE; ++k) {
    std::memcpy(ch, row + (size_t)k * L::CB, L::CB);
    std::vector<Rec> rcs(GPC);
    decode_chunk<T>(ch, ch, 0, rcs.data());
    for (int G = 0; G < GPC; ++G) {
      float s, o;
      L::scale(ch, G, s, o);
      bad += !(s == rcs[G].sg) || !(o == rcs[G].og);  // (a zero's sign may differ)
    }
  }
  return bad;
}

extern "C" int fast_check_scales(int t, const uint8_t* row, int K) {
  return with_fast_type(t, -1, [&](auto T) { return check_scales<decltype(T)::value>(row, K); });
}
