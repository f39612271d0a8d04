// Small-M (1..8 rows of x) matmul for rows whose byte length is a multiple of 16 ("fast GEMV", v4).
//
// Why a second small-M kernel: gemv_mma_kernel folds each block's scale into the weights before the
// tensor-core product (codes -> bf16 pairs -> s*code + o per pair), which costs ~7 instructions per
// weight with the per-unit overhead (NOTES.md, v3). Here the scale is applied after the product:
//
//   sum_k w_k x_k over one group (32 weights, 16 for Q6_K) = s * (sum_k u_k x_k - z * sum_k x_k)
//                                                           (+ o * sum_k x_k for Q4_K/Q5_K mins)
//
// with u the unsigned code. The tensor core multiplies fp16 "1024 + u" (the code OR-ed under the
// exponent of 1024: one LOP3 per pair for 4-bit codes, one PRMT per pair for bytes) by the
// activations; the 1024 (and z) terms are removed with per-group sums of x that a small prep kernel
// computes once per call. A hi nibble is used in place, as 1024 + 16u, against x / 16 (exact).
// (MXFP4 has no offset: its e2m1 codes become their own values x 2^-14, FT<MXFP4>.)
// Products and sums are exact fp16 x fp16 -> fp32 (the only roundings: fp32 accumulation and the
// output), so the result is closer to the exact product than the pair-folding kernel's.
//
// Activations: the prep kernel (one thread per (group, token)) writes, per group, each lane's four
// B registers in the order the weight decode produces its A registers (fp16, scaled by a power of
// two per group and token so that bf16 activations fit fp16 exactly), and per token
// {sigma, -beta, S}: D * sigma - beta = sum (u - z) x, S = sum x.
//
// Weights: a warp owns 16 rows; lane (g, c) = (lane / 4, lane % 4) decodes rows g and g + 8 (the A
// fragment of mma.m16n8k16) and feeds token g of the B fragment. Rows stream through shared memory
// by cp.async in chunks of whole blocks whose byte length is a multiple of 16 (so every block's
// alignment inside a chunk is a compile-time constant), U chunks and their B records per stage, S
// stages deep (U, S and the W warps per CTA that split K are chosen per launch; partial sums meet in
// shared memory); the first stages' weights are requested before waiting on the prep kernel
// (programmatic dependent launch).
//
// Everything that touches data layout (chunk decoders, prep) is host+device, and
// tests/fast_host.cu runs it on the CPU with a software model of the mma fragments.
#pragma once
#include <cstdint>
#include <cmath>
#include <cstring>

#include "ggml_blocks.cuh"

namespace gq {
namespace fast {

constexpr uint32_t H1024 = 0x64006400u;  // fp16 {1024, 1024}

// fp16 pairs {1024 + code} from nibbles / bytes (low half <- first element).
template <uint32_t MASK> GQ_HD uint32_t and_or_h(uint32_t w) { return and_or<MASK>(w, H1024); }
GQ_HD uint32_t nib_lo(uint32_t w) { return and_or_h<0x000F000Fu>(w); }  // lo nibbles of bytes 0, 2
GQ_HD uint32_t nib_hi(uint32_t w) { return and_or_h<0x00F000F0u>(w); }  // 16 x hi nibbles of bytes 0, 2
GQ_HD uint32_t byte_lo(uint32_t u) { return perm(u, 0x64646464u, 0x4140); }  // bytes 0, 1
GQ_HD uint32_t byte_hi(uint32_t u) { return perm(u, 0x64646464u, 0x4342); }  // bytes 2, 3

// Shift left for n > 0, right for n < 0 (n a constant after unrolling).
GQ_HD uint32_t shl(uint32_t v, int n) { return n >= 0 ? v << n : v >> (-n); }

#if !defined(__CUDA_ARCH__)
// Host runs (tests/fast_host.cu): loads at addresses ldw's A does not match, which the GPU would fault
// on and x86 reads without complaint.
inline int host_misaligned = 0;
#endif
// 32-bit little-endian word at p, where p % 4 == A (A compile-time; reads the aligned words around).
template <int A> GQ_HD uint32_t ldw(const uint8_t* p) {
#if !defined(__CUDA_ARCH__)
  host_misaligned += ((uintptr_t)p & 3) != (uintptr_t)A;
#endif
  if constexpr (A == 0) {
    return *reinterpret_cast<const uint32_t*>(p);
  } else {
    const uint32_t* q = reinterpret_cast<const uint32_t*>(p - A);
    return perm(q[0], q[1], A == 1 ? 0x4321 : (A == 2 ? 0x5432 : 0x6543));
  }
}
GQ_HD float f16v(const uint8_t* p) { return f16_at(p); }

// kvalues_iq4nl + 128
constexpr uint32_t IQ4U_T0 = 0x3F2D1801u, IQ4U_T1 = 0x766A5D4Fu, IQ4U_T2 = 0xA6998D81u, IQ4U_T3 = 0xF1D9C5B5u;

// prmt.b32 with each selector nibble's bit 3 as PTX defines it: the picked byte's sign replicated (0x00 or
// 0xFF); the host model emulates it.
GQ_HD uint32_t prmt_sx(uint32_t a, uint32_t b, uint32_t s) {
#if defined(__CUDA_ARCH__)
  return prmt_raw(a, b, s);
#else
  uint32_t r = perm(a, b, s);
  for (int i = 0; i < 4; ++i)
    if ((s >> (4 * i + 3)) & 1) r = (r & ~(0xFFu << (8 * i))) | ((r >> (8 * i + 7)) & 1 ? 0xFFu << (8 * i) : 0u);
  return r;
#endif
}
// IQ4_XS as two 8-entry tables of int8 (v98, v109): P = kvalues_iq4nl of codes 0..7 (every one negative), Q =
// kvalues_iq4nl + 1 of codes 8..15 (every one positive). Looked up by a code's nibble as it is, P gives its entry
// for codes 0..7 and, sign-replicated, 0xFF (-1) for 8..15; Q by the nibble with bit 3 flipped gives its entry for
// 8..15 and 0x00 for 0..7. So P + Q is kvalues itself for every code (as s8), with no select between halves and no
// offset to remove (v98's tables gave kvalues + 255 as u8).
constexpr uint32_t IQ4P_T0 = 0xBFAD9881u, IQ4P_T1 = 0xF6EADDCFu, IQ4Q_T0 = 0x271A0E02u, IQ4Q_T1 = 0x725A4636u;

// ---- per-type layout ----------------------------------------------------------------------------
// CE: elements per chunk per row; CB: bytes per chunk per row; RS: shared-memory row stride;
// GS: elements per group (one scale); STEPS = GS / 16 mma steps per group; Z: zero code;
// HAS_MIN: value = s*u + o (else s*(u - z)); MIS: chunk starts are only 4-byte aligned in the row
// (Q6_K), so the chunk is copied from the 16-byte boundary below and read at offset `mis`.
// slot(G, st, c, k, div16): element (within group G) held in B slot k (0,1: b0 lo/hi; 2,3: b1) of
// lane c at step st, and whether it is used as x / 16 (the weight is 1024 + 16u there).
template <int T> struct FT { static constexpr bool OK = false; };
// Whether T's fast kernels multiply int8 (mma.m16n8k32, u8 weights x the activations' s8 high and u8 low
// bytes) in place of fp16: IQ4_XS, whose table decode bound its stages (v98, NOTES.md next step 4).
template <int T> GQ_HD constexpr bool fast_i8() { return T == IQ4_XS; }

template <> struct FT<Q4_0> {
  static constexpr bool OK = true, HAS_MIN = false, MIS = false;
  static constexpr int CE = 256, CB = 144, RS = 144, GS = 32, STEPS = 2, Z = 8;
  static GQ_HD int slot(int, int st, int c, int k, bool& d16) {
    d16 = st == 1;
    return 4 * c + 2 * (k & 1) + (k >> 1) + 16 * st;
  }
  // Calls f(q, A[2][4], s_g, s_g8, o_g, o_g8) for each group q of the chunk.
  template <class F> static GQ_HD void chunk(const uint8_t* rg, const uint8_t* rg8, int c, F&& f) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const uint8_t* b = rg + 18 * j;
      const uint8_t* b8 = rg8 + 18 * j;
      uint32_t w, w8;
      if (j & 1) { w = ldw<0>(b + 2 + 4 * c); w8 = ldw<0>(b8 + 2 + 4 * c); }
      else { w = ldw<2>(b + 2 + 4 * c); w8 = ldw<2>(b8 + 2 + 4 * c); }
      const uint32_t v = w >> 8, v8 = w8 >> 8;
      uint32_t A[2][4] = {{nib_lo(w), nib_lo(w8), nib_lo(v), nib_lo(v8)},
                          {nib_hi(w), nib_hi(w8), nib_hi(v), nib_hi(v8)}};
      f(j, A, f16v(b), f16v(b8), 0.f, 0.f);
    }
  }
  // group G's scale (and min term) of the chunk at ch, as chunk() passes them
  static GQ_HD void scale(const uint8_t* ch, int G, float& s, float& o) { s = f16v(ch + 18 * G); o = 0.f; }
};

template <> struct FT<Q8_0> {
  static constexpr bool OK = true, HAS_MIN = false, MIS = false;
  static constexpr int CE = 256, CB = 272, RS = 272, GS = 32, STEPS = 2, Z = 128;
  static GQ_HD int slot(int, int st, int c, int k, bool& d16) {
    d16 = false;
    return 4 * c + k + 16 * st;
  }
  template <class F> static GQ_HD void chunk(const uint8_t* rg, const uint8_t* rg8, int c, F&& f) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const uint8_t* b = rg + 34 * j;
      const uint8_t* b8 = rg8 + 34 * j;
      uint32_t w0, w1, x0, x1;
      if (j & 1) {
        w0 = ldw<0>(b + 2 + 4 * c); w1 = ldw<0>(b + 18 + 4 * c);
        x0 = ldw<0>(b8 + 2 + 4 * c); x1 = ldw<0>(b8 + 18 + 4 * c);
      } else {
        w0 = ldw<2>(b + 2 + 4 * c); w1 = ldw<2>(b + 18 + 4 * c);
        x0 = ldw<2>(b8 + 2 + 4 * c); x1 = ldw<2>(b8 + 18 + 4 * c);
      }
      w0 ^= 0x80808080u; w1 ^= 0x80808080u; x0 ^= 0x80808080u; x1 ^= 0x80808080u;
      uint32_t A[2][4] = {{byte_lo(w0), byte_lo(x0), byte_hi(w0), byte_hi(x0)},
                          {byte_lo(w1), byte_lo(x1), byte_hi(w1), byte_hi(x1)}};
      f(j, A, f16v(b), f16v(b8), 0.f, 0.f);
    }
  }
  static GQ_HD void scale(const uint8_t* ch, int G, float& s, float& o) { s = f16v(ch + 34 * G); o = 0.f; }
};

// 4-bit codes through a 16-entry table (IQ4_XS), a pair {lo, hi} nibble of one byte per fp16 pair.
GQ_HD void lut_pairs(uint32_t w, uint32_t w8, uint32_t t0, uint32_t t1, uint32_t t2, uint32_t t3,
                     uint32_t (&A)[2][4]) {
  uint32_t c0, c1, d0, d1;
  lut8(w, t0, t1, t2, t3, c0, c1);
  lut8(w8, t0, t1, t2, t3, d0, d1);
  A[0][0] = byte_lo(c0); A[0][1] = byte_lo(d0); A[0][2] = byte_hi(c0); A[0][3] = byte_hi(d0);
  A[1][0] = byte_lo(c1); A[1][1] = byte_lo(d1); A[1][2] = byte_hi(c1); A[1][3] = byte_hi(d1);
}

// ldw<A>(p) for A = a & 3, a a constant after unrolling.
GQ_HD uint32_t ldw_c(const uint8_t* p, int a) {
  switch (a & 3) {
    case 0: return ldw<0>(p);
    case 1: return ldw<1>(p);
    case 2: return ldw<2>(p);
    default: return ldw<3>(p);
  }
}

// MXFP4 without a table (OCP MX e2m1 codes, ggml's block_mxfp4: one E8M0 byte, 16 bytes of nibbles,
// element j the low nibble of byte j, element 16 + j its high one): e2m1_pair_mb<10> gives
// the fp16 of e2m1(n) x 2^-14 exactly (e2m1's 2-bit exponent and mantissa bit under fp16's, subnormal
// where e2m1's is, the sign in place), so the tensor core gets the values themselves: no 1024 offset,
// the records' sigma times 2^14 and beta zero (Prep). A pair is the two nibbles 16 bits apart in lane
// c's word (its bytes i hold elements 4c + i and 16 + 4c + i): two LOP3 (magnitude and sign bits) and
// two IMAD (moved into place) where the table lookup (IQ4_XS) is about 8 ALU instructions, and the
// M = 1 kernels are bound by the ALU pipe (NOTES.md v20).
template <> struct FT<MXFP4> {
  static constexpr bool OK = true, HAS_MIN = false, MIS = false;
  static constexpr int CE = 512, CB = 272, RS = 272, GS = 32, STEPS = 2, Z = 0;
  // step st: b0 the pair at bits 4 st of the word (elements 16 st + 4c, + 2), b1 the one at 8 + 4 st (+ 1, + 3)
  static GQ_HD int slot(int, int st, int c, int k, bool& d16) {
    d16 = false;
    return 16 * st + 4 * c + 2 * (k & 1) + (k >> 1);
  }
  // AL8: rg8 % 4 - rg % 4 (2 for rows of 4k + 2 bytes, e.g. K = 2880: gemv_stream_kernel's ragged rows)
  template <int AL8 = 0, class F> static GQ_HD void chunk(const uint8_t* rg, const uint8_t* rg8, int c, F&& f) {
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const uint8_t* b = rg + 17 * j;
      const uint8_t* b8 = rg8 + 17 * j;
      const uint32_t w = ldw_c(b + 1 + 4 * c, j + 1), w8 = ldw_c(b8 + 1 + 4 * c, j + 1 + AL8);
      uint32_t A[2][4] = {{e2m1_pair_mb<10, 0>(w), e2m1_pair_mb<10, 0>(w8), e2m1_pair_mb<10, 2>(w), e2m1_pair_mb<10, 2>(w8)},
                          {e2m1_pair_mb<10, 1>(w), e2m1_pair_mb<10, 1>(w8), e2m1_pair_mb<10, 3>(w), e2m1_pair_mb<10, 3>(w8)}};
      f(j, A, e8m0(b[0]), e8m0(b8[0]), 0.f, 0.f);
    }
  }
  static GQ_HD void scale(const uint8_t* ch, int G, float& s, float& o) { s = e8m0(ch[17 * G]); o = 0.f; }
};

// IQ4_XS: codes through kvalues_iq4nl, 512 elements (272 bytes) per chunk; lane c's word of a 32-element
// sub-block holds elements 4c + i (low nibbles) and 16 + 4c + i (high) of it. Two forms (chunk<I8>):
// - fp16 pairs (lut_pairs; the tile kernel, whose 2-4 token groups a decode would each convert from int):
//   `slot`, Z = 128;
// - int8 (v98, `fast_i8`: mma.m16n8k32 s8 x {s8, u8}; the stream kernels and gemv_fast_kernel): P and Q
//   fragments, whose bytes keep the nibbles' order, so byte j of the A register for mma k = 4c + j (+ 16) is
//   element 16 (j & 1) + 4c + j / 2 (+ 2): `elem` (P + Q = kvalues).
template <> struct FT<IQ4_XS> {
  static constexpr bool OK = true, HAS_MIN = false, MIS = false;
  static constexpr int CE = 512, CB = 272, RS = 272, GS = 32, STEPS = 2, Z = 128, BB = 136, BG = 8;  // BB, BG: a block's bytes, groups
  static GQ_HD int slot(int, int st, int c, int k, bool& d16) {
    d16 = false;
    return 4 * c + 16 * (k & 1) + (k >> 1) + 2 * st;
  }
  static GQ_HD int elem(int c, int reg, int j) { return 16 * (j & 1) + 4 * c + (j >> 1) + 2 * reg; }
  // The 6-bit scales of a block's 8 sub-blocks (ggml's block_iq4_xs: fp16 d, uint16 scales_h with 2 high
  // bits a sub-block, scales_l[4] with 4 low bits a sub-block, two a byte) as bytes: ls[0] sub-blocks 0, 2,
  // 4, 6, ls[1] 1, 3, 5, 7. 6 ALU instructions for the 8, where each alone took 4 (v95).
  static GQ_HD void sub_scales(const uint8_t* b, uint32_t (&ls)[2]) {
    const uint32_t h = ldw<0>(b), sl = ldw<0>(b + 4);
    const uint32_t y = perm(h, 0u, 0x4342u);         // {scales_h byte 0, 0, scales_h byte 1, 0}
    const uint32_t z = (y | (y << 4)) & 0x0F0F0F0Fu;  // byte j: scales_h's nibble j (sub-blocks 2j, 2j + 1)
    ls[0] = (sl & 0x0F0F0F0Fu) | ((z & 0x03030303u) << 4);
    ls[1] = (shr_fma<4>(sl) & 0x0F0F0F0Fu) | ((z & 0x0C0C0C0Cu) << 2);
  }
  // ls - 32 of sub-block ib as an exact float: 0x4B0000ll is 2^23 + ls (one PRMT and one FADD, where
  // I2F takes the conversion pipe, a quarter of the ALU pipe's rate).
  static GQ_HD float sub_scale(const uint32_t (&ls)[2], int ib) {
    return as_float(perm(ls[ib & 1], 0x4B000000u, 0x7540u | (uint32_t)(ib >> 1))) - 8388640.0f;
  }
  // v109's integer epilogues, ls - 32 of a sub-block as an int:
  // - the forms that keep both rows' products (MT = 1, 2, 4, 8): the block's scales as sub_scales orders them, each
  //   byte ls - 32 as int8 (ls in [0, 63]: the bias per byte with no carry between bytes), one PRMT a sub-block
  //   (sign-extended); with the kept element picked once a block, 1-4% fewer instructions a stage than a shift,
  //   mask and subtract and a pick a group;
  // - the ONE forms (one kept row, half the groups): the raw scales of the block's sub-blocks of the lane's parity
  //   par (byte j: sub-block 2j + par's), shift, mask and subtract (1-1.5% fewer there than the bias and PRMT)
  static GQ_HD void sub_scales_s8(const uint8_t* b, uint32_t (&ls)[2]) {
    sub_scales(b, ls);
#pragma unroll
    for (int k = 0; k < 2; ++k) ls[k] = ((ls[k] | 0x80808080u) - 0x20202020u) ^ 0x80808080u;
  }
  static GQ_HD int sub_scale_int(uint32_t w, int j) {  // byte j (a constant after unrolling) of such a word
    return (int)prmt_sx(w, 0u, (uint32_t)j | (uint32_t)(j | 8) * 0x1110u);
  }
  static GQ_HD uint32_t sub_scales_of(const uint8_t* b, int par) {
    uint32_t ls[2];
    sub_scales(b, ls);
    return par ? ls[1] : ls[0];
  }
  static GQ_HD int sub_scale_raw(uint32_t w, int j) { return (int)((w >> (8 * j)) & 0xFFu) - 32; }
  // NB = 1: the chunk's first block only, groups 0 .. 7 (rg, rg8 a block each: the one-block flat items of ragged
  // MoE rows, v112). RT: the tables' first words (PRMT's first source) in general registers (v114 for NB = 1, v116 for
  // every stream form; chunk_as<T, true, false> where they do not pay). As constants
  // ptxas keeps each in a uniform register and copies it (IMAD.U32 R, RZ, RZ, UR) before almost every PRMT, 80-122
  // instructions a stage of two blocks (10-16% of the stage loop); XOR-ed with a shfl.sync of 0 (all 32 lanes run the
  // mma), opaque when ptxas picks uniform registers and folded away after, they stay in general registers.
  template <bool I8 = true, int NB = 2, bool RT = true, class F>
  static GQ_HD void chunk(const uint8_t* rg, const uint8_t* rg8, int c, F&& f) {
    uint32_t tp = IQ4P_T0, tq = IQ4Q_T0;
#if defined(__CUDA_ARCH__)
    if constexpr (I8 && RT) {
      uint32_t z;
      asm volatile("shfl.sync.bfly.b32 %0, %1, 1, 0x1f, 0xffffffff;" : "=r"(z) : "r"(0u));
      tp ^= z;
      tq ^= z;
    }
#endif
#pragma unroll
    for (int s = 0; s < NB; ++s) {
      const uint8_t* b = rg + BB * s;
      const uint8_t* b8 = rg8 + BB * s;
      uint32_t ls[2], ls8[2];
      sub_scales(b, ls);
      sub_scales(b8, ls8);
      const float d = f16v(b), d8 = f16v(b8);
#pragma unroll
      for (int ib = 0; ib < 8; ++ib) {
        const uint32_t w = ldw<0>(b + 8 + 16 * ib + 4 * c), w8 = ldw<0>(b8 + 8 + 16 * ib + 4 * c);
        uint32_t A[2][4];
        if constexpr (I8) {  // A[0] the P fragment, A[1] the Q one: rows g (w), g + 8 (w8), k 4c + j, then 16 + 4c + j
          const uint32_t q = w ^ 0x88888888u, q8 = w8 ^ 0x88888888u;
          const uint32_t w16 = shr_fma<16>(w), w816 = shr_fma<16>(w8), q16 = shr_fma<16>(q), q816 = shr_fma<16>(q8);
          A[0][0] = prmt_sx(tp, IQ4P_T1, w);   A[0][1] = prmt_sx(tp, IQ4P_T1, w8);
          A[0][2] = prmt_sx(tp, IQ4P_T1, w16); A[0][3] = prmt_sx(tp, IQ4P_T1, w816);
          A[1][0] = prmt_sx(tq, IQ4Q_T1, q);   A[1][1] = prmt_sx(tq, IQ4Q_T1, q8);
          A[1][2] = prmt_sx(tq, IQ4Q_T1, q16); A[1][3] = prmt_sx(tq, IQ4Q_T1, q816);
        } else {
          lut_pairs(w, w8, IQ4U_T0, IQ4U_T1, IQ4U_T2, IQ4U_T3, A);
        }
        f(8 * s + ib, A, d * sub_scale(ls, ib), d8 * sub_scale(ls8, ib), 0.f, 0.f);
      }
    }
  }
  static GQ_HD void scale(const uint8_t* ch, int G, float& s, float& o) {
    const uint8_t* b = ch + 136 * (G >> 3);
    const int ib = G & 7;
    const int ls = ((b[4 + (ib >> 1)] >> (4 * (ib & 1))) & 0xF) | (((int)(u16_at(b + 2) >> (2 * ib)) & 3) << 4);
    s = f16v(b) * (float)(ls - 32);
    o = 0.f;
  }
};

// T's chunk decode in the records' form I8 (fast_i8<T>() where the kernel takes int8 products; every other
// type has the fp16 form only). RT = false keeps IQ4_XS's table words as constants: gemv_fast_kernel, where in
// registers they lengthen the loop (834 -> 843 instructions; 909 with one of them).
template <int T, bool I8, bool RT = true, class F>
GQ_HD void chunk_as(const uint8_t* rg, const uint8_t* rg8, int c, F&& f) {
  if constexpr (fast_i8<T>()) FT<T>::template chunk<I8, 2, RT>(rg, rg8, c, f);
  else FT<T>::chunk(rg, rg8, c, f);
}

// Q4_K / Q5_K 6-bit scales and mins of the 8 sub-blocks from the three scale words (get_scale_min_k4):
// bytes of sc[0] = sub-blocks 0..3, sc[1] = 4..7; same for mn.
GQ_HD void k4_scales(const uint8_t* b, uint32_t (&sc)[2], uint32_t (&mn)[2]) {
  const uint32_t q0 = ldw<0>(b + 4), q1 = ldw<0>(b + 8), q2 = ldw<0>(b + 12);
  sc[0] = q0 & 0x3F3F3F3Fu;
  mn[0] = q1 & 0x3F3F3F3Fu;
  sc[1] = (q2 & 0x0F0F0F0Fu) | ((q0 >> 2) & 0x30303030u);
  mn[1] = ((q2 >> 4) & 0x0F0F0F0Fu) | ((q1 >> 2) & 0x30303030u);
}
// fl(byte i of w * m), exactly as the fp32 product: (2^23 + byte) * m - 2^23 * m, one rounding.
GQ_HD float byte_times(uint32_t w, int i, float m, float m23) {
  return fmaf(as_float(perm(w, 0x4B000000u, 0x7540u | (uint32_t)i)), m, m23);
}

template <int T> struct FTK {  // Q4_K (QH = false) and Q5_K (QH = true)
  static constexpr bool QH = T == Q5_K;
  static constexpr bool OK = true, HAS_MIN = true, MIS = false;
  static constexpr int CE = 256, CB = QH ? 176 : 144, RS = CB, GS = 32, STEPS = 2, Z = 0;
  static constexpr int QS = QH ? 48 : 16;
  static GQ_HD int slot(int G, int st, int c, int k, bool& d16) {
    d16 = (G & 1) != 0;
    return 8 * c + 2 * (k & 1) + (k >> 1) + 4 * st;
  }
  template <class F> static GQ_HD void chunk(const uint8_t* rg, const uint8_t* rg8, int c, F&& f) {
    const float d = f16v(rg), dm = f16v(rg + 2), d8 = f16v(rg8), dm8 = f16v(rg8 + 2);
    const float d23 = -8388608.f * d, dm23 = 8388608.f * dm, d823 = -8388608.f * d8, dm823 = 8388608.f * dm8;
    uint32_t sc[2], mn[2], sc8[2], mn8[2];
    k4_scales(rg, sc, mn);
    k4_scales(rg8, sc8, mn8);
    uint32_t h0 = 0, h1 = 0, k0 = 0, k1 = 0;
    if constexpr (QH) {
      h0 = ldw<0>(rg + 16 + 8 * c); h1 = ldw<0>(rg + 20 + 8 * c);
      k0 = ldw<0>(rg8 + 16 + 8 * c); k1 = ldw<0>(rg8 + 20 + 8 * c);
    }
#pragma unroll
    for (int jp = 0; jp < 4; ++jp) {
      const uint32_t w0 = ldw<0>(rg + QS + 32 * jp + 8 * c), w1 = ldw<0>(rg + QS + 32 * jp + 8 * c + 4);
      const uint32_t x0 = ldw<0>(rg8 + QS + 32 * jp + 8 * c), x1 = ldw<0>(rg8 + QS + 32 * jp + 8 * c + 4);
      const uint32_t v0 = w0 >> 8, v1 = w1 >> 8, y0 = x0 >> 8, y1 = x1 >> 8;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int s = 2 * jp + h;
        uint32_t A[2][4];
        if (h == 0) {
          A[0][0] = nib_lo(w0); A[0][1] = nib_lo(x0); A[0][2] = nib_lo(v0); A[0][3] = nib_lo(y0);
          A[1][0] = nib_lo(w1); A[1][1] = nib_lo(x1); A[1][2] = nib_lo(v1); A[1][3] = nib_lo(y1);
        } else {
          A[0][0] = nib_hi(w0); A[0][1] = nib_hi(x0); A[0][2] = nib_hi(v0); A[0][3] = nib_hi(y0);
          A[1][0] = nib_hi(w1); A[1][1] = nib_hi(x1); A[1][2] = nib_hi(v1); A[1][3] = nib_hi(y1);
        }
        if constexpr (QH) {
          // fifth bit of sub-block s = bit s of qh[l]; it is worth 16 (lo: half bit 4) or 256 (hi: bit 8).
          if (h == 0) {
            A[0][0] |= shl(h0, 4 - s) & 0x00100010u;      A[0][1] |= shl(k0, 4 - s) & 0x00100010u;
            A[0][2] |= shl(h0 >> 8, 4 - s) & 0x00100010u; A[0][3] |= shl(k0 >> 8, 4 - s) & 0x00100010u;
            A[1][0] |= shl(h1, 4 - s) & 0x00100010u;      A[1][1] |= shl(k1, 4 - s) & 0x00100010u;
            A[1][2] |= shl(h1 >> 8, 4 - s) & 0x00100010u; A[1][3] |= shl(k1 >> 8, 4 - s) & 0x00100010u;
          } else {
            A[0][0] |= shl(h0, 8 - s) & 0x01000100u;      A[0][1] |= shl(k0, 8 - s) & 0x01000100u;
            A[0][2] |= shl(h0 >> 8, 8 - s) & 0x01000100u; A[0][3] |= shl(k0 >> 8, 8 - s) & 0x01000100u;
            A[1][0] |= shl(h1, 8 - s) & 0x01000100u;      A[1][1] |= shl(k1, 8 - s) & 0x01000100u;
            A[1][2] |= shl(h1 >> 8, 8 - s) & 0x01000100u; A[1][3] |= shl(k1 >> 8, 8 - s) & 0x01000100u;
          }
        }
        const int wi = s >> 2, bi = s & 3;
        f(s, A, byte_times(sc[wi], bi, d, d23), byte_times(sc8[wi], bi, d8, d823),
          -byte_times(mn[wi], bi, dm, -dm23), -byte_times(mn8[wi], bi, dm8, -dm823));
      }
    }
  }
  // sub-block G's d * scale and -(dmin * min) (get_scale_min_k4 on the 12 scale bytes at ch + 4)
  static GQ_HD void scale(const uint8_t* ch, int G, float& s, float& o) {
    const uint8_t* q = ch + 4;
    const int sc = G < 4 ? q[G] & 63 : (q[G + 4] & 0xF) | ((q[G - 4] >> 6) << 4);
    const int mn = G < 4 ? q[G + 4] & 63 : (q[G + 4] >> 4) | ((q[G] >> 6) << 4);
    s = f16v(ch) * (float)sc;
    o = -(f16v(ch + 2) * (float)mn);
  }
};
template <> struct FT<Q4_K> : FTK<Q4_K> {};
template <> struct FT<Q5_K> : FTK<Q5_K> {};

// Q6_K: chunk = two super-blocks (420 bytes; starts 4-byte aligned), 16-element groups.
// Group G (within a super-block) = 8n + 2t + h: elements 128n + 32t + 16h + l, l < 16; lane c
// holds l = 4c + i: ql byte 64n + 32(t&1) + 16h + 4c + i (nibble t >> 1), qh byte 32n + 16h + 4c + i
// (bits 2t, 2t+1).
template <> struct FT<Q6_K> {
  static constexpr bool OK = true, HAS_MIN = false, MIS = true;
  static constexpr int CE = 512, CB = 420, RS = 432, GS = 16, STEPS = 1, Z = 32;
  static GQ_HD int slot(int G, int, int c, int k, bool& d16) {
    d16 = ((G >> 1) & 3) >= 2;
    return 4 * c + 2 * (k & 1) + (k >> 1);
  }
  // one super-block of each row: b at AL bytes past 4-byte alignment, b8 at AL8
  template <int AL, int AL8 = AL, class F>
  static GQ_HD void sb(const uint8_t* b, const uint8_t* b8, int c, int q0, F&& f) {
    const float d = f16v(b + 208), d8 = f16v(b8 + 208);
    uint32_t sw[4], sw8[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) { sw[i] = ldw<AL>(b + 192 + 4 * i); sw8[i] = ldw<AL8>(b8 + 192 + 4 * i); }
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t L0 = ldw<AL>(b + 64 * n + 16 * h + 4 * c), L1 = ldw<AL>(b + 64 * n + 32 + 16 * h + 4 * c);
        const uint32_t M0 = ldw<AL8>(b8 + 64 * n + 16 * h + 4 * c), M1 = ldw<AL8>(b8 + 64 * n + 32 + 16 * h + 4 * c);
        const uint32_t V = ldw<AL>(b + 128 + 32 * n + 16 * h + 4 * c), V8 = ldw<AL8>(b8 + 128 + 32 * n + 16 * h + 4 * c);
        const uint32_t Vs = V >> 8, V8s = V8 >> 8;
#pragma unroll
        for (int t = 0; t < 4; ++t) {
          const uint32_t w = (t & 1) ? L1 : L0, w8 = (t & 1) ? M1 : M0;
          uint32_t A[2][4];
          if (t < 2) {
            A[0][0] = nib_lo(w) | (shl(V, 4 - 2 * t) & 0x00300030u);
            A[0][1] = nib_lo(w8) | (shl(V8, 4 - 2 * t) & 0x00300030u);
            A[0][2] = nib_lo(w >> 8) | (shl(Vs, 4 - 2 * t) & 0x00300030u);
            A[0][3] = nib_lo(w8 >> 8) | (shl(V8s, 4 - 2 * t) & 0x00300030u);
          } else {
            A[0][0] = nib_hi(w) | (shl(V, 8 - 2 * t) & 0x03000300u);
            A[0][1] = nib_hi(w8) | (shl(V8, 8 - 2 * t) & 0x03000300u);
            A[0][2] = nib_hi(w >> 8) | (shl(Vs, 8 - 2 * t) & 0x03000300u);
            A[0][3] = nib_hi(w8 >> 8) | (shl(V8s, 8 - 2 * t) & 0x03000300u);
          }
          A[1][0] = A[1][1] = A[1][2] = A[1][3] = 0u;
          const int G = 8 * n + 2 * t + h;
          const int sc = (int)(int8_t)((sw[G >> 2] >> (8 * (G & 3))) & 0xFF);
          const int sc8 = (int)(int8_t)((sw8[G >> 2] >> (8 * (G & 3))) & 0xFF);
          f(q0 + G, A, d * (float)sc, d8 * (float)sc8, 0.f, 0.f);
        }
      }
  }
  // rg, rg8: the chunk's first byte (4-byte aligned).
  template <class F> static GQ_HD void chunk(const uint8_t* rg, const uint8_t* rg8, int c, F&& f) {
    sb<0>(rg, rg8, c, 0, f);
    sb<2>(rg + 210, rg8 + 210, c, 16, f);
  }
  static GQ_HD void scale(const uint8_t* ch, int G, float& s, float& o) {
    const uint8_t* b = ch + 210 * (G >> 4);
    s = f16v(b + 208) * (float)(int8_t)b[192 + (G & 15)];
    o = 0.f;
  }
};

// ---- activation prep (host+device) --------------------------------------------------------------
// Scratch layout for K (multiple of CE) and M tokens, TP2 = (M + 1) / 2 token pairs, nG = K / GS:
//   B part:  [nG][M][4 lanes][STEPS][2] u32   (lane c's b0, b1 of each step)
//   SB part: [nG][GR bytes]: TP2 x {sigma, -beta} pairs as float4 (tokens 2p, 2p+1), then, with
//            HAS_MIN, TP2 x {S(2p), S(2p+1)}.
template <int T> struct Prep {
  using L = FT<T>;
  static constexpr int BREC = 32 * L::STEPS;  // bytes per (group, token)
  static GQ_HD int gr(int M) {  // bytes per group, a multiple of 16
    const int tp2 = (M + 1) / 2;
    return tp2 * 16 + (L::HAS_MIN ? (tp2 * 8 + 15) / 16 * 16 : 0);
  }
  static GQ_HD size_t b_bytes(int K, int M) { return (size_t)(K / L::GS) * M * BREC; }
  static GQ_HD size_t bytes(int K, int M) { return b_bytes(K, M) + (size_t)(K / L::GS) * gr(M); }
  // bytes() rounded up to 256: a scratch buffer's size
  static GQ_HD size_t scratch(int K, int M) { return (bytes(K, M) + 255) / 256 * 256; }

  // One (group G, token t): xv = the group's GS activations as float.
  // The sums run as four independent chains (a thread's dependent adds per group 64 -> 16, where each
  // stream-kernel thread builds its groups one after another, up to 8 at M = 5..8, before any warp
  // starts its products), two over each half of the group: every type's d16 is the same for all
  // elements of a half (Q4_0: the high nibbles' half; K-quants, Q6_K: whole groups), so beta's
  // code-offset term is (64 or 1024) x each half's sum, not a multiply-add per element.
  // SWZ (the stream kernels' records in shared memory, consecutive threads building consecutive groups):
  // the record's 16-byte pieces are stored as piece k ^ rot in the k-th store, rot from the record's
  // 128-byte line, so that the 8 threads of a 128-bit store's phase write 8 different bank groups (in
  // order, records of 64 bytes put 4 threads on each: 4-way conflicted; Q6_K's 32 bytes, 2-way)
  // I8: int8 records (fast_i8 types' stream kernels and gemv_fast_kernel), else fp16 (every other type, and
  // the tile kernel's)
  template <bool SWZ = false, bool I8 = fast_i8<T>()>
  static GQ_HD void group(const float* xv, int G, int t, int M, uint8_t* xb, uint8_t* xs) {
    if constexpr (I8) group_i8(xv, G, t, M, xb, xs, group_amax(xv));
    else group_f16<SWZ>(xv, G, t, M, xb, xs);
  }
  // sigma = 2^(E - P) for amax's exponent E, so that amax / sigma is in [2^P, 2^(P + 1)); inv = 1 / sigma
  template <int P> static GQ_HD void pow2_scale(float amax, float& sigma, float& inv) {
    const uint32_t be = (as_uint(amax) >> 23) & 0xFF;
    const uint32_t se = be > P + 1 ? be - P : 1u;
    sigma = as_float(se << 23);
    inv = as_float((254u - se) << 23);
  }
  // fast_i8 (v98): x / sigma rounded to int16 (|x| / sigma < 2^15; 2^15 itself, from rounding up, taken as
  // 2^15 - 1), as its high byte (s8) and low byte (u8). Lane slot c's words: the high plane's b0 (mma k 4c + j)
  // and b1 (16 + 4c + j), then the low plane's. P + Q is kvalues itself, so the products carry no offset and the
  // {sigma, -beta} record is {sigma, 0}. amax: the group's largest |x|, or its 256-element block's (v109's block
  // form, StreamRecs::group_blk, for every stream form but MoE's ONE and flat items: one sigma a block, whose
  // products then add as integers)
  static GQ_HD void group_i8(const float* xv, int G, int t, int M, uint8_t* xb, uint8_t* xs, float amax) {
    float sigma, inv;
    pow2_scale<14>(amax, sigma, inv);
    uint32_t* rec = reinterpret_cast<uint32_t*>(xb + ((size_t)G * M + t) * BREC);
#pragma unroll
    for (int c = 0; c < 4; ++c)
#pragma unroll
      for (int reg = 0; reg < 2; ++reg) {
        uint32_t hi = 0, lo = 0;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int r = (int)rintf(xv[L::elem(c, reg, j)] * inv), q = r > 32767 ? 32767 : r;
          hi |= ((uint32_t)(q >> 8) & 0xFFu) << (8 * j);
          lo |= ((uint32_t)q & 0xFFu) << (8 * j);
        }
        rec[4 * c + reg] = hi;
        rec[4 * c + 2 + reg] = lo;
      }
    float* sb = reinterpret_cast<float*>(xs + (size_t)G * gr(M));
    sb[2 * t] = sigma;
    sb[2 * t + 1] = 0.f;
    if ((M & 1) && t == M - 1) sb[2 * t + 2] = sb[2 * t + 3] = 0.f;  // the pad token of the last pair
  }
  // The largest |x| of a group (four independent chains)
  static GQ_HD float group_amax(const float* xv) {
    float am[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int e = 0; e < L::GS; ++e) am[e & 3] = fmaxf(am[e & 3], fabsf(xv[e]));
    return fmaxf(fmaxf(am[0], am[1]), fmaxf(am[2], am[3]));
  }
  template <bool SWZ = false>
  static GQ_HD void group_f16(const float* xv, int G, int t, int M, uint8_t* xb, uint8_t* xs) {
    float am[4] = {0.f, 0.f, 0.f, 0.f}, s4[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int e = 0; e < L::GS; ++e) { am[e & 3] = fmaxf(am[e & 3], fabsf(xv[e])); s4[(e & 1) + 2 * (e >> 4)] += xv[e]; }
    const float amax = fmaxf(fmaxf(am[0], am[1]), fmaxf(am[2], am[3]));
    const float Slo = s4[0] + s4[1], Shi = s4[2] + s4[3], S = Slo + Shi;
    float sigma, inv;
    pow2_scale<13>(amax, sigma, inv);
    // x / 16's factor as one power of two (inv >= 2^-114, so inv / 16 stays normal): x * (inv / 16) is exactly
    // (x * inv) / 16 wherever that is normal, and both are under fp16's smallest value where it is not
    const float inv16 = inv * 0.0625f;
    constexpr bool OFF = T != MXFP4;  // whether the codes carry 1024 (MXFP4's are their values x 2^-14)
    float wh[2] = {1024.f, 1024.f};  // the code offset of each half's elements
    uint32_t* rec = reinterpret_cast<uint32_t*>(xb + ((size_t)G * M + t) * BREC);
    uint32_t wd[BREC / 4];
#pragma unroll
    for (int c = 0; c < 4; ++c)
#pragma unroll
      for (int st = 0; st < L::STEPS; ++st)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          uint32_t word = 0;
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            bool d16 = false;
            const int e = L::slot(G, st, c, 2 * r + hh, d16);
            wh[e >> 4] = d16 ? 64.f : 1024.f;
            const __half hv = __float2half_rn(xv[e] * (d16 ? inv16 : inv));
            word |= (uint32_t)__half_as_ushort(hv) << (16 * hh);
          }
          if constexpr (SWZ) wd[(c * L::STEPS + st) * 2 + r] = word;
          else rec[(c * L::STEPS + st) * 2 + r] = word;  // (as made: fewer words live)
        }
    if constexpr (SWZ) {
      // the pieces moved by selects, since wd[4 * (k ^ rot)] (a run-time index) would put wd on the stack
      constexpr int NP = BREC / 16;  // 16-byte pieces a record
      const int rot = (int)((reinterpret_cast<uintptr_t>(rec) >> 7) & (NP - 1));
      uint4 P[NP];
#pragma unroll
      for (int k = 0; k < NP; ++k) P[k] = make_uint4(wd[4 * k], wd[4 * k + 1], wd[4 * k + 2], wd[4 * k + 3]);
#pragma unroll
      for (int b = 1; b < NP; b <<= 1) {  // after bit b's swaps, P[k] holds piece k ^ (rot & (2b - 1))
        const bool sw = rot & b;
#pragma unroll
        for (int k = 0; k < NP; ++k) {
          if (!(k & b)) {
            const uint4 x = P[k], y = P[k | b];
            P[k] = sw ? y : x;
            P[k | b] = sw ? x : y;
          }
        }
      }
#pragma unroll
      for (int k = 0; k < NP; ++k) reinterpret_cast<uint4*>(rec)[k ^ rot] = P[k];
    }
    const float off = OFF ? wh[0] * Slo + wh[1] * Shi : 0.f;
    const float beta = (float)L::Z * S + off;
    constexpr float H = OFF ? 1.f : 16384.f;  // MXFP4: its codes' 2^-14, exactly
    float* sb = reinterpret_cast<float*>(xs + (size_t)G * gr(M));
    sb[2 * t] = sigma * H;
    sb[2 * t + 1] = -beta * H;
    if (L::HAS_MIN) sb[4 * ((M + 1) / 2) + t] = S;
    if ((M & 1) && t == M - 1) {  // the pad token of the last pair
      sb[2 * t + 2] = 0.f;
      sb[2 * t + 3] = 0.f;
      if (L::HAS_MIN) sb[4 * ((M + 1) / 2) + t + 1] = 0.f;
    }
  }
};

// M = 1 stream kernel (NOTES.md v6): the records of all of K (one token) in each CTA's shared
// memory, chunk by chunk. Chunk ch's B records start at ch * bstride() and its {sigma, -beta[, S]}
// records at chunks(K) * bstride() + ch * sstride(): one spare record per chunk puts the 8 chunks a
// warp reads at once (lanes g) in different banks. A last chunk short of CE elements (ragged rows,
// K = 2880 for MXFP4) is padded with the records of zero activations.
template <int T> struct StreamRecs {
  using L = FT<T>;
  static constexpr int GPC = L::CE / L::GS, BREC = Prep<T>::BREC;
  static GQ_HD int chunks(int K) { return (K + L::CE - 1) / L::CE; }
  static GQ_HD int bstride() { return (GPC + 1) * BREC; }
  static GQ_HD int sstride() { return GPC * Prep<T>::gr(1) + 16; }
  static GQ_HD size_t bytes(int K) { return (size_t)chunks(K) * (bstride() + sstride()); }
  // Whether the MT = 8 kernel stores its records in Prep::group's conflict-free order: measured faster only
  // for these (NOTES.md session 39: Q5_K 14336 -> 4096 M = 8 -0.6 us); Q6_K's 2-way stores were slower by
  // 0.25-0.35 us, Q8_0 and the two-warp types unchanged.
  static constexpr bool SWZ8 = T == Q4_0 || T == Q4_K || T == Q5_K;
  // Group G's records, through Prep<T>::group's layout shifted by the chunk's spare records (SWZ: its
  // stores in the conflict-free order).
  template <bool SWZ = false>
  static GQ_HD void group(const float* xv, int G, int K, uint8_t* recs) {
    const int ch = G / GPC;
    Prep<T>::template group<SWZ>(xv, G, 0, 1, recs + ch * BREC, recs + (size_t)chunks(K) * bstride() + ch * 16);
  }
  // Group G's records in fast_i8's block form (v109; amax_blk its 256-element block's largest |x|)
  static GQ_HD void group_blk(const float* xv, float amax_blk, int G, int K, uint8_t* recs) {
    const int ch = G / GPC;
    Prep<T>::group_i8(xv, G, 0, 1, recs + ch * BREC, recs + (size_t)chunks(K) * bstride() + ch * 16, amax_blk);
  }
};

// gemv_stream_kernel's x rows' records (MT tokens a unit) in shared memory: row xr's at
// stream_rec_off(xr, stream_rec_stride<T, MT>(K), MT). MT = 8 reads 8 rows' B records at once (lanes g:
// row g, 16-byte pieces c; a quarter warp: rows 2j, 2j + 1) and the {sigma, -beta} of rows 2c and
// 2c + 1: rows a whole number of 128-byte lines apart, row xr shifted by 64 (xr & 1) + 16 (xr >> 1)
// bytes, so that a quarter warp's B pieces tile one 128-byte line and rows 0, 2, 4, 6 (1, 3, 5, 7)
// read their {sigma, -beta} from different banks (a plain stride of bytes + 64 left those 4-way conflicted:
// 263 shared wavefronts a Q4_0 stage against 121 ideal; NOTES.md v12).
template <int T, int MT>
GQ_HD size_t stream_rec_stride(int K) {  // (MT = 8: room for the largest shift, 112 bytes)
  const size_t b = StreamRecs<T>::bytes(K);
  return MT == 8 ? (b + 112 + 127) / 128 * 128 : b;
}
GQ_HD size_t stream_rec_off(int xr, size_t RB, int MT) {
  return xr * RB + (MT == 8 ? 64 * (xr & 1) + 16 * (xr >> 1) : 0);
}

// gemv_stream_kernel's ragged MT = 8 stages (MoE units over hit experts): the unit's row that stage slot
// j holds, slot j < 8 row 2j and slot 8 + j row 2j + 1, so that each lane's two rows (A rows g, g + 8)
// start 0 and 2 bytes past 4-byte alignment (rows of 4k + 2 bytes, the unit's first row even), as
// chunk_ragged reads them; a row past the unit's last (`last`) is read as its first row, or the row
// before it (N >= 2), of the same parity
GQ_HD int slot_row(int j, int last) {
  const int r = j < 8 ? 2 * j : 2 * j - 15;
  return r <= last ? r : j < 8 ? 0 : last >= 1 ? 1 : -1;
}

// gemv_stream_kernel's MoE pairs on flat items (FLAT, rows of n <= 4 items): an item is a chunk (Q6_K: a
// super-block, half its chunk); the fewest rows of a unit whose items fill whole stages of 16 items, the
// unit's stages, and each warp's shared memory for the unit's item sums (at most 48: 16 rows of 3).
// RAG (ragged rows, MXFP4 of 4k + 2 bytes, NOTES.md v37): an item is a chunk of K, the last one short
// (K = 2880: 6 items, the last 10 of 16 blocks), each copied at its own offset into a slot of
// flat_slot_bytes; the same units (rows of 6: 8 rows, 3 stages).
// IQ4_XS's ragged rows (an odd count of 136-byte blocks, ggml's block_iq4_xs; K = 768 for Qwen3-30B-A3B's down
// projection: 3) take items of one block (flat_blocks, v112), half a chunk as Q6_K's super-blocks are, where chunk
// items (v111) left every row's last one half zeros (a quarter of the stage's decode at K = 768); rows of an odd
// count of items, so units of 16 rows, a stage per item of a row.
// BR (v113, the kernel's MR on flat items): those one-block items on the aligned form, where a unit's 16 rows are one
// 16-byte aligned run (16 x 136 x n bytes) and a row holds at most 4 items (K = 256, 768): each stage one contiguous
// copy of 16 items, as Q6_K's super-blocks, in place of RAG's copy an item at its own offset.
template <int T, bool RAG, bool BR = false> GQ_HD constexpr bool flat_blocks() { return (RAG || BR) && T == IQ4_XS; }
template <int T, bool RAG, bool BR = false> GQ_HD constexpr bool flat_half() {
  return FT<T>::MIS || flat_blocks<T, RAG, BR>();
}
template <int T, bool RAG = false, bool BR = false> GQ_HD constexpr int flat_item_bytes() {
  return flat_half<T, RAG, BR>() ? FT<T>::CB / 2 : FT<T>::CB;
}
template <int T, bool RAG = false, bool BR = false> GQ_HD constexpr int flat_item_elems() {
  return FT<T>::CE * flat_item_bytes<T, RAG, BR>() / FT<T>::CB;
}
template <int T, bool BR = false> GQ_HD int flat_items(int K) { return K / flat_item_elems<T, false, BR>(); }
template <int T, bool RAG, bool BR = false> GQ_HD int flat_row_items(int K) {
  return RAG ? (K + flat_item_elems<T, RAG>() - 1) / flat_item_elems<T, RAG>() : flat_items<T, BR>(K);
}
template <int T, bool RAG, bool BR = false> GQ_HD constexpr int flat_slot_bytes() {
  return RAG ? (flat_item_bytes<T, RAG>() + 15 + 15) / 16 * 16 : flat_item_bytes<T, false, BR>();
}
// whether gemv_stream_kernel<T, XT, MOE, MT, RAG, ONE> is the flat form: ONE on MoE pairs at MT = 1
GQ_HD constexpr bool stream_flat(bool MOE, int MT, bool ONE) { return MOE && ONE && MT == 1; }
// whether its launch may be spread over every SM, more CTAs than the rounds need, its warps then taking the units
// warp-major (global warp warp x CTAs + CTA; else CTA x WPC + warp): the dense M = 1 forms (MT = 1, and ONE's 4-row
// units; v120)
GQ_HD constexpr bool stream_may_spread(bool MOE, int MT, bool ONE) { return !MOE && (MT == 1 || ONE); }
GQ_HD constexpr int flat_rows(int n) { return 16 / (n & -n); }
GQ_HD constexpr int flat_stages(int n) { return n / (n & -n); }
// gemv_stream_kernel<T, ., MOE, MT, RAG, ONE>'s unit at K: its rows (FLAT: flat_rows of a row's items;
// else 2 MT) and its stages (FLAT: flat_stages; else 8 / MT chunks a stage), for the kernel and its launch (MR on
// flat items: BR's one-block items)
template <int T, bool MOE, int MT, bool RAG, bool ONE, bool MR = false>
GQ_HD int stream_unit_rows(int K) {
  return stream_flat(MOE, MT, ONE) ? flat_rows(flat_row_items<T, RAG, MR>(K)) : 2 * MT;
}
template <int T, bool MOE, int MT, bool RAG, bool ONE, bool MR = false>
GQ_HD int stream_unit_stages(int K) {
  return stream_flat(MOE, MT, ONE) ? flat_stages(flat_row_items<T, RAG, MR>(K))
                                   : (StreamRecs<T>::chunks(K) + 8 / MT - 1) / (8 / MT);
}
constexpr int kFlatItemBytes = 48 * 4;
// A warp's item sums of a unit in shared memory: kFlatItemBytes; IQ4_XS's one-block items 16 rows of up to 15 (K up
// to 3840, v112)
template <int T, bool RAG> GQ_HD constexpr int flat_sum_bytes() {
  return flat_blocks<T, RAG>() ? 16 * 15 * 4 : kFlatItemBytes;
}
// Whether rows of n ragged flat items take their units: a unit's item sums fit a warp's, and the unit holds row
// pairs, as FlatLane's RAG slots (row pair, item) take them (at n a multiple of 16, flat_rows(n) = 1 would slot
// only half the unit's items: MXFP4 K = 7744 .. 8192 in rows of 4k + 2 bytes)
template <int T> GQ_HD constexpr bool flat_rag_fits(int n) {
  return n * flat_rows(n) <= flat_sum_bytes<T, true>() / 4 && flat_rows(n) >= 2;
}
// The K split's meeting (gemv_stream_kernel, KS): the sums a warp of every rank but 0 sends into rank 0's
// slots (32 lanes x 4 floats), and the shared memory a warp takes for them and rank 0's barrier (8 bytes)
constexpr int kKsSums = 32 * 4;
GQ_HD constexpr size_t ks_meet_bytes(int Z) { return (size_t)(Z - 1) * kKsSums * 4 + 8; }
// FLAT's lane roles (gemv_stream_kernel; tests/fast_host.cu's model): lane (g, c) at stage s of a unit
// whose rows hold n <= 4 items. A row g holds the stage's item g and A row g + 8 item g + 8 (MIS: 2g
// and 2g + 1); B's column g holds x's item col(g, n) = (g & 3) % n, so columns 0-3 and 4-7 each hold
// every item of a row. The lane may keep A row g's product (c < 2) or A row g + 8's (c >= 2, `hi`):
// `item` is that row's item in the unit and `k` its place in its row, kept where k is one of the lane's
// columns 2c, 2c + 1 (k >> 1 == c & 1), in D element `elem`.
// RAG: the unit's (row pair, item) slots in order, A row g holding the even row of slot 8 s + g and A
// row g + 8 the odd row of slot 8 s + (g ^ 4), so that every lane reads its rows 0 and 2 bytes past
// 4-byte alignment (chunk_ragged); B's column j holds x's item of slot 8 s + j. A row g's product is
// kept in column g (lane c = g >> 1, element g & 1), A row g + 8's in column g ^ 4 (lane (g >> 1) ^ 2,
// element 2 + (g & 1)): again one product a lane for half the lanes.
template <int T, bool RAG = false, bool BR = false> struct FlatLane {
  int item, k, elem;
  bool kept, hi;
  // RAG: rcp = slot_rcp(n), f / n as slot() takes it (v146: a generic division is ~20 instructions a stage)
  GQ_HD FlatLane(int s, int g, int c, int n, uint32_t rcp) {
    if constexpr (RAG) {
      hi = (c >> 1) != (g >> 2);
      const int f = 8 * s + (hi ? g ^ 4 : g), p = slot_div(f, rcp);
      k = f - p * n;
      item = (2 * p + hi) * n + k;
      elem = 2 * hi + (g & 1);
      kept = (c & 1) == ((g >> 1) & 1);
    } else {
      item = 16 * s + (FT<T>::MIS ? 2 * g + (c >> 1) : g + (c & 2) * 4);
      k = item % n;
      elem = (c & 2) + (k & 1);
      kept = (k >> 1) == (c & 1);
      hi = (c & 2) != 0;
    }
  }
  static GQ_HD int col(int s, int g, int n, uint32_t rcp) {  // RAG: rcp = slot_rcp(n)
    if constexpr (RAG) {
      const int f = 8 * s + g;
      return f - slot_div(f, rcp) * n;
    } else {
      return (g & 3) % n;
    }
  }
  // x item j's records from the start of a row's (StreamRecs): `stride` a chunk's, `gr` a group's (flat_half:
  // an item is half a chunk)
  static GQ_HD size_t rec(int j, size_t stride, int gr) {
    return flat_half<T, RAG, BR>() ? (size_t)(j >> 1) * stride + (size_t)(j & 1) * (FT<T>::CE / FT<T>::GS / 2) * gr
                               : (size_t)j * stride;
  }
  // RAG: what slot() multiplies by for f / n, ceil(2^16 / n). Exact there: f < 8 x the unit's stages <= 120 and n <=
  // 120 (flat_rag_fits), so f x (rcp x n - 2^16) < 2^16 (v143: the copy takes 9 slots a lane a stage, not 1, and a
  // generic division is ~20 instructions)
  static GQ_HD uint32_t slot_rcp(int n) { return (65536u + (uint32_t)n - 1) / (uint32_t)n; }
  // f / n by rcp = slot_rcp(n), for the f above
  static GQ_HD int slot_div(int f, uint32_t rcp) { return (int)(((uint32_t)f * rcp) >> 16); }
  // RAG: the unit row and item of A row a (< 16) of stage s; rcp = slot_rcp(n)
  static GQ_HD void slot(int s, int a, int n, uint32_t rcp, int& row, int& item) {
    const int f = 8 * s + (a < 8 ? a : (a - 8) ^ 4), p = slot_div(f, rcp);
    row = 2 * p + (a >= 8);
    item = f - p * n;
  }
};

// Floats per unit of gemv_stream_kernel's split sums (MT = 2, 4): 2 MT rows x MT tokens, then the
// stage count.
GQ_HD constexpr int split_slot(int MT) { return 2 * MT * MT + 1; }

// One chunk of a unit's two rows as gemv_stream_kernel leaves ragged rows (not a multiple of 16 bytes)
// in shared memory: rg 4-byte aligned, and rg8 too, except for MXFP4, whose ragged rows it takes are
// 4k + 2 bytes long (K = 2880: 1530), so the odd row rg8 starts 2 bytes past.
template <int T, class F> GQ_HD void chunk_ragged(const uint8_t* rg, const uint8_t* rg8, int c, F&& f) {
  if constexpr (T == MXFP4) FT<T>::template chunk<2>(rg, rg8, c, f);
  else FT<T>::chunk(rg, rg8, c, f);
}

// Group epilogue: D (rows g, g+8 x tokens 2c, 2c+1) -> acc. sb = {sigma0, -beta0, sigma1, -beta1}.
GQ_HD void epilogue(const float (&D)[4], const float (&sb)[4], float sg, float sg8, float (&acc)[4]) {
  acc[0] = fmaf(sg, fmaf(sb[0], D[0], sb[1]), acc[0]);
  acc[1] = fmaf(sg, fmaf(sb[2], D[1], sb[3]), acc[1]);
  acc[2] = fmaf(sg8, fmaf(sb[0], D[2], sb[1]), acc[2]);
  acc[3] = fmaf(sg8, fmaf(sb[2], D[3], sb[3]), acc[3]);
}
GQ_HD void epilogue_min(const float (&S)[2], float og, float og8, float (&acc)[4]) {
  acc[0] = fmaf(og, S[0], acc[0]);
  acc[1] = fmaf(og, S[1], acc[1]);
  acc[2] = fmaf(og8, S[0], acc[2]);
  acc[3] = fmaf(og8, S[1], acc[3]);
}

}  // namespace fast
}  // namespace gq
