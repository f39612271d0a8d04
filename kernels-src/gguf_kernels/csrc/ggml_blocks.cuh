// ggml block decoders, written from ggml's public block layouts (ggml-common.h: the
// block_* structs and the reference dequantize_row_* semantics). Host+device so the same
// code can be checked on a CPU against gguf-py.
//
// One entry point per type:
//
//   decode<T>(row, u, p, full, v)
//
// fills v[4*q + i] (q = 0..3, i = 0..3) with the fp32 value of element 64*u + 16*q + 4*p + i
// of the row that starts at `row` (p = 0..3 is the "part": four lanes share one 64-element
// unit). `row` may point at global or shared memory holding the row's bytes with the same
// alignment modulo 16 as in the file. For the 32-element block types a unit is two blocks;
// when the row ends after the first one (K % 64 == 32) `full` is false and v[8..15] are 0.
//
// The element -> (byte, bit) maps below are derived from the block structs; each decoder
// notes which struct it follows.
#pragma once
#include <cstdint>
#include <cuda_fp16.h>

#include "hostdev.h"
#include "qtypes.h"

namespace gq {

// ---- small portable helpers ------------------------------------------------------------------

// PTX prmt.b32 in its default mode, selector bits [2:0] of each nibble only.
GQ_HD uint32_t perm(uint32_t x, uint32_t y, uint32_t s) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(x, y, s);
#else
  uint64_t v = (uint64_t)x | ((uint64_t)y << 32);
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= (uint32_t)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xFF) << (8 * i);
  return r;
#endif
}

// 0xFF in each byte whose bit 7 is set, else 0x00 (prmt sign-replicate mode).
GQ_HD uint32_t byte_msb_mask(uint32_t x) {
#if defined(__CUDA_ARCH__)
  uint32_t r;
  asm("prmt.b32 %0, %1, 0, 0xBA98;" : "=r"(r) : "r"(x));
  return r;
#else
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) if ((x >> (8 * i + 7)) & 1) r |= 0xFFu << (8 * i);
  return r;
#endif
}

GQ_HD float f16_at(const uint8_t* p) {  // p 2-byte aligned
  return __half2float(__ushort_as_half(*reinterpret_cast<const uint16_t*>(p)));
}
GQ_HD uint32_t u16_at(const uint8_t* p) { return *reinterpret_cast<const uint16_t*>(p); }
GQ_HD uint32_t u32_a4(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }
GQ_HD uint32_t u32_a2(const uint8_t* p) { return perm(u16_at(p), u16_at(p + 2), 0x5410); }
GQ_HD uint32_t u32_a1(const uint8_t* p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

// Unsigned byte i of w as an exact float: 0x4B0000bb is 2^23 + bb.
GQ_HD float ubyte(uint32_t w, int i) { return as_float(perm(w, 0x4B000000u, 0x7540u | (uint32_t)i)) - 8388608.0f; }

// The low / high nibble of each byte of w, in the byte's low bits.
GQ_HD uint32_t nib_lo4(uint32_t w) { return w & 0x0F0F0F0Fu; }
GQ_HD uint32_t nib_hi4(uint32_t w) { return (w >> 4) & 0x0F0F0F0Fu; }

// Bits 0..3 of x moved to bit 4 of bytes 0..3 (0x10 per set bit). The four shifted copies
// of x (by 4, 11, 18, 25) never overlap, so the product has no carries.
GQ_HD uint32_t spread4_to_bit4(uint32_t x) { return (x * 0x02040810u) & 0x10101010u; }

// 16-entry int8 table lookup for four byte lanes holding 0..15 (two prmt halves, chosen per
// byte by the index's bit 3).
GQ_HD uint32_t lut16(uint32_t codes, uint32_t t0, uint32_t t1, uint32_t t2, uint32_t t3) {
  const uint32_t x = codes | (codes >> 4);            // byte0 = c0 | c1<<4, byte2 = c2 | c3<<4
  const uint32_t sel = perm(x, 0, 0x4420) & 0x7777u;  // nibbles c0,c1,c2,c3 (low 3 bits)
  const uint32_t lo = perm(t0, t1, sel);
  const uint32_t hi = perm(t2, t3, sel);
  const uint32_t m = byte_msb_mask(codes << 4);       // bit 3 of each code -> 0xFF
  return (hi & m) | (lo & ~m);
}

// prmt.b32 with a selector whose nibbles have bit 3 clear (no masking: __byte_perm would add a LOP3).
GQ_HD uint32_t prmt_raw(uint32_t a, uint32_t b, uint32_t s) {
#if defined(__CUDA_ARCH__)
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(s));
  return r;
#else
  return perm(a, b, s);
#endif
}

// (w & MASK) | c in one LOP3 (the compiler splits two immediates into two LOP3s; keep c in a register).
template <uint32_t MASK> GQ_HD uint32_t and_or(uint32_t w, uint32_t c) {
#if defined(__CUDA_ARCH__)
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(w), "n"(MASK), "r"(c));
  return r;
#else
  return (w & MASK) | c;
#endif
}

// v >> N as IMAD.HI (v x 2^(32 - N), high word) on the FMA pipe, where SHF takes the ALU pipe: IQ4_XS's
// stage is bound by the ALU pipe (PRMT, LOP3, SHF: 785 instructions of a stage of 32 mma at MT = 2) while its
// FMA pipe issues a third as many (NOTES.md v95).
template <int N> GQ_HD uint32_t shr_fma(uint32_t v) {
  static_assert(N > 0 && N < 32, "shift of 1..31");
#if defined(__CUDA_ARCH__)
  return __umulhi(v, 1u << (32 - N));
#else
  return v >> N;
#endif
}

// 16-entry byte table (entry n = byte n % 4 of t[n / 4]) applied to the 8 nibbles of w:
// c0 = entries of nibbles 0..3, c1 = nibbles 4..7 (bit 3 of a nibble picks t2/t3).
// 12 ALU instructions (10 PRMT, 2 LOP3) and 3 IMAD.HI for the shifts (v95; was 16 ALU).
GQ_HD void lut8(uint32_t w, uint32_t t0, uint32_t t1, uint32_t t2, uint32_t t3, uint32_t& c0, uint32_t& c1) {
  const uint32_t s = w & 0x77777777u;
  const uint32_t sel = and_or<0x44444444u>(shr_fma<1>(w), 0x32103210u);
  const uint32_t s16 = shr_fma<16>(s), sel16 = shr_fma<16>(sel);
  c0 = prmt_raw(prmt_raw(t0, t1, s), prmt_raw(t2, t3, s), sel);
  c1 = prmt_raw(prmt_raw(t0, t1, s16), prmt_raw(t2, t3, s16), sel16);
}

// kvalues_iq4nl (ggml-common.h) as int8 bytes, little-endian words.
constexpr uint32_t IQ4_T0 = 0xBFAD9881u, IQ4_T1 = 0xF6EADDCFu, IQ4_T2 = 0x26190D01u, IQ4_T3 = 0x71594535u;
// kvalues_iq4nl as bf16 (integers of at most 7 significant bits, so exact): the low bytes (IQ4BL) and the
// high bytes (IQ4BH) of their bit patterns, as two 16-entry byte tables.
constexpr uint32_t IQ4BL_T0 = 0x82A6D0FEu, IQ4BL_T1 = 0x20B00C44u, IQ4BL_T2 = 0x18C85080u, IQ4BL_T3 = 0xE2B28A54u;
constexpr uint32_t IQ4BH_T0 = 0xC2C2C2C2u, IQ4BH_T1 = 0xC1C1C2C2u, IQ4BH_T2 = 0x4241413Fu, IQ4BH_T3 = 0x42424242u;

// The bf16 pairs of kvalues_iq4nl of one word w of a 32-element sub-block's qs in the Q4_0 nibble layout
// (bytes 4p..4p+3: elements 4p + i in the low nibbles, 16 + 4p + i in the high): v[0] = elements {4p, 4p + 1},
// v[1] = {16 + 4p, 17 + 4p}, v[2] = {4p + 2, 4p + 3}, v[3] = {18 + 4p, 19 + 4p} (low half the first). Both
// tables go through lut8 with the same selectors, then one PRMT a pair joins low and high bytes. z: 0, opaque
// to the compiler (iq4_bf16_opaque_zero), XOR-ed into the tables' first words (PRMT's first source) so that ptxas
// keeps them in general registers instead of copying each from a uniform register before its PRMT (v116's
// lever in the stream kernels).
GQ_HD void iq4_bf16_pairs(uint32_t w, uint32_t z, uint32_t (&v)[4]) {
  uint32_t l0, l1, h0, h1;  // entries of nibbles 0..3 (bytes 0, 1 of w) and 4..7 (bytes 2, 3)
  lut8(w, IQ4BL_T0 ^ z, IQ4BL_T1, IQ4BL_T2 ^ z, IQ4BL_T3, l0, l1);
  lut8(w, IQ4BH_T0 ^ z, IQ4BH_T1, IQ4BH_T2 ^ z, IQ4BH_T3, h0, h1);
  v[0] = prmt_raw(l0, h0, 0x6240u);  // nibbles 0 and 2: the low nibbles of bytes 0, 1
  v[1] = prmt_raw(l0, h0, 0x7351u);  // nibbles 1 and 3: their high nibbles
  v[2] = prmt_raw(l1, h1, 0x6240u);
  v[3] = prmt_raw(l1, h1, 0x7351u);
}
// 0 as each lane's id XOR its neighbour's (a shfl.sync of every lane): a per-lane value ptxas cannot fold, so
// the tables XOR-ed with it stay in general registers (a shfl of a constant 0, v116's form, folds here before
// registers are picked, and the tables go back to uniform registers and their copies: 118-124 IMAD.U32 a chunk).
GQ_HD uint32_t iq4_bf16_opaque_zero() {
#if defined(__CUDA_ARCH__)
  uint32_t l, z;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(l));
  asm volatile("shfl.sync.bfly.b32 %0, %1, 1, 0x1f, 0xffffffff;" : "=r"(z) : "r"(l));
  return z ^ l ^ 1u;
#else
  return 0u;
#endif
}

// kvalues_mxfp4: e2m1 values doubled {0,1,2,3,4,6,8,12,-0,-1,-2,-3,-4,-6,-8,-12}.
constexpr uint32_t FP4_T0 = 0x03020100u, FP4_T1 = 0x0C080604u, FP4_T2 = 0xFDFEFF00u, FP4_T3 = 0xF4F8FAFCu;

// OCP MX e2m1 codes to 16-bit floats with MB mantissa bits (fp16 10, bf16 7) without a table: the
// nibbles n at bits 4P and 16 + 4P of w become the low and high half of the result, each (n & 7) <<
// (MB - 1) | (n & 8) << 12, which is e2m1(n) x 2^(1 - bias) exactly (e2m1's 2-bit exponent and mantissa
// bit under the float's, subnormal where e2m1's is, the sign in place). Sums where the shifts are left
// ones (the bits do not overlap), so ptxas can use IMAD.
template <int MB, int P> GQ_HD uint32_t e2m1_pair_mb(uint32_t w) {
  constexpr int MS = MB - 1 - 4 * P, SS = 12 - 4 * P;
  constexpr uint32_t MM = 0x00070007u << 4 * P, SM = 0x00080008u << 4 * P;
  if constexpr (MS >= 0) return (w & MM) * (1u << MS) + (w & SM) * (1u << SS);
  else return ((w >> -MS) & (MM >> -MS)) | ((w & SM) << SS);
}

// kvalues_mxfp4 + 64 (the MXFP4 decoder's codes).
constexpr uint32_t FP4P_T0 = 0x43424140u, FP4P_T1 = 0x4C484644u, FP4P_T2 = 0x3D3E3F40u, FP4P_T3 = 0x34383A3Cu;

// ggml_ue4m3_to_fp32 halved (the table is doubled): bits 6..3 the exponent (bias 7), bits 2..0 the
// mantissa, exponent 0 subnormal (m * 2^-9); 0 and 0x7F are zero; bit 7 is not read. Exact in fp32.
GQ_HD float ue4m3_half(uint32_t x) {
  const uint32_t e = (x >> 3) & 0xF, m = x & 7;
  if (x == 0 || x == 0x7F) return 0.f;
  return e == 0 ? (float)m * 0x1p-10f : as_float(((e + 119) << 23) | (m << 20));
}

// IQ4_NL / IQ4_XS codes (kvalues_iq4nl[q] + 128) of the 4-bit indices of one nibble per byte.
GQ_HD uint32_t iq4_codes(uint32_t q) { return lut16(q, IQ4_T0, IQ4_T1, IQ4_T2, IQ4_T3) ^ 0x80808080u; }

// ggml_e8m0_to_fp32_half: 2^(e-128) (half of the E8M0 scale, because the table is doubled).
GQ_HD float e8m0_half(uint32_t e) {
  return as_float(e < 2 ? (0x00200000u << e) : ((e - 1) << 23));
}
// ggml_e8m0_to_fp32: 2^(e-127), e = 0 the subnormal 2^-127; twice e8m0_half exactly for e < 255 (255,
// NaN in the OCP MX spec, is inf here where e8m0_half gives 2^127). Two operations where e8m0_half
// takes five, so the fast decoders take it and halve their activations' records.
GQ_HD float e8m0(uint32_t e) {
  const uint32_t b = e << 23;
  return as_float(b > 0x00400000u ? b : 0x00400000u);
}

// Q4_K / Q5_K 6-bit scales and mins of sub-blocks 2c and 2c+1 (get_scale_min_k4 semantics:
// sub-block j < 4 takes the low 6 bits of q[j] / q[j+4]; j >= 4 the nibbles of q[j+4] with the
// top two bits of q[j-4] / q[j]), from the 12 scale bytes read as three words (q 4-byte aligned).
GQ_HD void scale_min_k4_pair(int c, const uint8_t* q, float& sc0, float& mn0, float& sc1, float& mn1) {
  const uint32_t w0 = u32_a4(q), w1 = u32_a4(q + 4), w2 = u32_a4(q + 8);
  if (c < 2) {
    const int sh = 16 * c;
    sc0 = (float)((w0 >> sh) & 63);
    sc1 = (float)((w0 >> (sh + 8)) & 63);
    mn0 = (float)((w1 >> sh) & 63);
    mn1 = (float)((w1 >> (sh + 8)) & 63);
  } else {
    const int sh = 16 * (c - 2);
    sc0 = (float)(((w2 >> sh) & 0xF) | (((w0 >> (sh + 6)) & 3) << 4));
    mn0 = (float)(((w2 >> (sh + 4)) & 0xF) | (((w1 >> (sh + 6)) & 3) << 4));
    sc1 = (float)(((w2 >> (sh + 8)) & 0xF) | (((w0 >> (sh + 14)) & 3) << 4));
    mn1 = (float)(((w2 >> (sh + 12)) & 0xF) | (((w1 >> (sh + 14)) & 3) << 4));
  }
}

// Q3_K 6-bit scale of 16-element group g from the 12 packed bytes, minus 32.
GQ_HD float scale_q3k(int g, const uint8_t* s) {
  const int lo = g < 8 ? (s[g] & 15) : (s[g - 8] >> 4);
  const int hi = (s[8 + (g & 3)] >> (2 * (g >> 2))) & 3;
  return (float)((lo | (hi << 4)) - 32);
}

// ---- decoders ----------------------------------------------------------------------------------
// decode_codes<T>(row, u, p, full, r) gives, for q = 0..3, a word of four unsigned byte codes
// r.c[q] (byte i <-> element 64u + 16q + 4p + i) and an affine map: value = r.s[q] * code + r.o[q].
// Each decoder follows the struct named in its comment. The addresses that depend on the part p
// are formed in the decoders themselves, not in the shared helpers: moved into a helper, they
// changed the generated code.

struct Codes {
  uint32_t c[4];
  float s[4], o[4];
};

// CodeBits<T>: BITS, the widest code (<= 7 lets the tensor-core path build bf16 directly);
// PAIRED, groups 2h and 2h+1 always share their scale and offset (one scale per 32 elements).
template <int T> struct CodeBits;
template <int B, bool P> struct CodeBitsOf { static constexpr int BITS = B; static constexpr bool PAIRED = P; };
template <> struct CodeBits<Q4_0>   : CodeBitsOf<4, true>  {};
template <> struct CodeBits<Q4_1>   : CodeBitsOf<4, true>  {};
template <> struct CodeBits<Q5_0>   : CodeBitsOf<5, true>  {};
template <> struct CodeBits<Q5_1>   : CodeBitsOf<5, true>  {};
template <> struct CodeBits<Q8_0>   : CodeBitsOf<8, true>  {};
template <> struct CodeBits<Q2_K>   : CodeBitsOf<2, false> {};
template <> struct CodeBits<Q3_K>   : CodeBitsOf<3, false> {};
template <> struct CodeBits<Q4_K>   : CodeBitsOf<4, true>  {};
template <> struct CodeBits<Q5_K>   : CodeBitsOf<5, true>  {};
template <> struct CodeBits<Q6_K>   : CodeBitsOf<6, false> {};
template <> struct CodeBits<IQ4_NL> : CodeBitsOf<8, true>  {};
template <> struct CodeBits<IQ4_XS> : CodeBitsOf<8, true>  {};
template <> struct CodeBits<MXFP4>  : CodeBitsOf<7, true>  {};
template <> struct CodeBits<NVFP4>  : CodeBitsOf<7, false> {};

// Groups 2h and 2h+1 share scale s and offset o.
GQ_HD void set_pair(Codes& r, int h, float s, float o) {
  r.s[2 * h] = r.s[2 * h + 1] = s;
  r.o[2 * h] = r.o[2 * h + 1] = o;
}

// Zero the second block's groups of a half unit (K % 64 == 32).
GQ_HD void zero_hi(Codes& r) {
  r.c[2] = r.c[3] = 0u;
  r.s[2] = r.s[3] = r.o[2] = r.o[3] = 0.f;
}

// The Q4_0 nibble layout (also Q4_1, Q5_*, IQ4_NL, MXFP4 and the IQ4_XS sub-blocks): byte j of
// qs holds element j (low nibble) and j+16 (high nibble). w = qs bytes 4p..4p+3 gives the codes
// of elements 4p.. (c0) and 16+4p.. (c1).
GQ_HD void nibbles(uint32_t w, uint32_t& c0, uint32_t& c1) {
  c0 = nib_lo4(w);
  c1 = nib_hi4(w);
}

// Q5_0 / Q5_1: the fifth bit of element e is bit e of qh (read as little-endian uint32); w and p
// as for nibbles().
GQ_HD void nibbles_q5(uint32_t w, uint32_t qh, int p, uint32_t& c0, uint32_t& c1) {
  c0 = nib_lo4(w) | spread4_to_bit4((qh >> (4 * p)) & 0xF);
  c1 = nib_hi4(w) | spread4_to_bit4((qh >> (16 + 4 * p)) & 0xF);
}

// block_iq4_nl at b: qs word 4p..4p+3 (the Q4_0 nibble layout) and the block's scale d.
GQ_HD uint32_t iq4nl_word(const uint8_t* b, int p, float& d) {
  d = f16_at(b);
  return u32_a2(b + 2 + 4 * p);
}

// The 32-element types: a unit is blocks 2u and 2u+1; block h gives groups 2h and 2h+1, which
// share one scale s and offset o.
template <int T>
GQ_HD void decode_codes(const uint8_t* row, int u, int p, bool full, Codes& r) {
  static_assert(Traits<T>::BLOCK == 32, "the 256-element types specialise decode_codes");
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (h == 1 && !full) { zero_hi(r); break; }
    const uint8_t* b = row + (2 * u + h) * Traits<T>::BYTES;
    uint32_t c0, c1;
    float s, o;
    if constexpr (T == Q4_0) {
      // block_q4_0 { ggml_half d; uint8_t qs[16]; }: x = d * (q - 8).
      s = f16_at(b);
      nibbles(u32_a2(b + 2 + 4 * p), c0, c1);
      o = -8.f * s;
    } else if constexpr (T == Q4_1) {
      // block_q4_1 { ggml_half d; ggml_half m; uint8_t qs[16]; }: x = d * q + m.
      s = f16_at(b);
      o = f16_at(b + 2);
      nibbles(u32_a4(b + 4 + 4 * p), c0, c1);
    } else if constexpr (T == Q5_0) {
      // block_q5_0 { ggml_half d; uint8_t qh[4]; uint8_t qs[16]; }: x = d * (q - 16).
      s = f16_at(b);
      const uint32_t qh = u32_a2(b + 2);
      nibbles_q5(u32_a2(b + 6 + 4 * p), qh, p, c0, c1);
      o = -16.f * s;
    } else if constexpr (T == Q5_1) {
      // block_q5_1 { ggml_half d; ggml_half m; uint8_t qh[4]; uint8_t qs[16]; }: x = d * q + m.
      s = f16_at(b);
      o = f16_at(b + 2);
      const uint32_t qh = u32_a4(b + 4);
      nibbles_q5(u32_a4(b + 8 + 4 * p), qh, p, c0, c1);
    } else if constexpr (T == Q8_0) {
      // block_q8_0 { ggml_half d; int8_t qs[32]; }: x = d * q (code = q + 128).
      s = f16_at(b);
      c0 = u32_a2(b + 2 + 4 * p) ^ 0x80808080u;
      c1 = u32_a2(b + 18 + 4 * p) ^ 0x80808080u;
      o = -128.f * s;
    } else if constexpr (T == IQ4_NL) {
      // block_iq4_nl { ggml_half d; uint8_t qs[16]; }: x = d * kvalues_iq4nl[q] (code = kvalue + 128).
      const uint32_t w = iq4nl_word(b, p, s);
      c0 = iq4_codes(nib_lo4(w));
      c1 = iq4_codes(nib_hi4(w));
      o = -128.f * s;
    } else if constexpr (T == MXFP4) {
      // block_mxfp4 { uint8_t e; uint8_t qs[16]; }: x = kvalues_mxfp4[q] * 2^(e-128) (code = kvalue
      // + 64, from a table holding kvalues_mxfp4 + 64, so codes fit 7 bits).
      s = e8m0_half(b[0]);
      const uint32_t w = u32_a1(b + 1 + 4 * p);
      c0 = lut16(nib_lo4(w), FP4P_T0, FP4P_T1, FP4P_T2, FP4P_T3);
      c1 = lut16(nib_hi4(w), FP4P_T0, FP4P_T1, FP4P_T2, FP4P_T3);
      o = -64.f * s;
    }
    r.c[2 * h] = c0;
    r.c[2 * h + 1] = c1;
    set_pair(r, h, s, o);
  }
}

// Q2_K / Q3_K qs layout: element e = 128n + 32j + l (n < 2, j < 4, l < 32) is bits 2j..2j+1 of
// qs[32n + l]. A / B: qs bytes 32n + 4p.. / 32n + 16 + 4p..; group q has j = j0 + q/2 and takes
// its codes from A (q even) or B (q odd).
GQ_HD uint32_t qs2_codes(uint32_t A, uint32_t B, int j, int q) {
  return (((q & 1) ? B : A) >> (2 * j)) & 0x03030303u;
}

// block_q2_K { uint8_t scales[16]; uint8_t qs[64]; ggml_half d; ggml_half dmin; }:
// scales[e / 16] holds the scale (low nibble) and min (high nibble): x = d*sc*q - dmin*m.
template <>
GQ_HD void decode_codes<Q2_K>(const uint8_t* row, int u, int p, bool, Codes& r) {
  const uint8_t* b = row + (u >> 2) * 84;
  const int uu = u & 3, n = uu >> 1, j0 = 2 * (uu & 1);
  const float d = f16_at(b + 80), dmin = f16_at(b + 82);
  const uint32_t A = u32_a4(b + 16 + 32 * n + 4 * p);
  const uint32_t B = u32_a4(b + 16 + 32 * n + 16 + 4 * p);
  const uint32_t sc4 = u32_a4(b + 4 * uu);  // scales of groups 4uu .. 4uu+3
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    r.c[q] = qs2_codes(A, B, j0 + (q >> 1), q);
    const uint32_t sc = (sc4 >> (8 * q)) & 0xFF;
    r.s[q] = d * (float)(sc & 15);
    r.o[q] = -(dmin * (float)(sc >> 4));
  }
}

// block_q3_K { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; ggml_half d; }:
// element e = 128n + 32j + l: low two bits from qs as Q2_K, third bit = bit 4n + j of hmask[l]
// (set means +0, clear means -4); 6-bit scales (scale_q3k) minus 32.
template <>
GQ_HD void decode_codes<Q3_K>(const uint8_t* row, int u, int p, bool, Codes& r) {
  const uint8_t* b = row + (u >> 2) * 110;
  const int uu = u & 3, n = uu >> 1, j0 = 2 * (uu & 1);
  const float d = f16_at(b + 108);
  const uint32_t A = u32_a2(b + 32 + 32 * n + 4 * p);
  const uint32_t B = u32_a2(b + 32 + 32 * n + 16 + 4 * p);
  const uint32_t HA = u32_a2(b + 4 * p);
  const uint32_t HB = u32_a2(b + 16 + 4 * p);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int j = j0 + (q >> 1);
    const uint32_t lo2 = qs2_codes(A, B, j, q);
    const uint32_t hb = ((((q & 1) ? HB : HA) >> (4 * n + j)) & 0x01010101u) << 2;
    r.c[q] = lo2 | hb;
    const float dl = d * scale_q3k(4 * uu + q, b + 96);
    r.s[q] = dl;
    r.o[q] = -4.f * dl;
  }
}

// Q4_K / Q5_K: element e = 64c + 32h + l is nibble h of qs[32c + l] (A / B: qs bytes 32c + 4p.. /
// 32c + 16 + 4p..: groups 0, 1 are their low nibbles, groups 2, 3 the high ones), sub-block 2c + h
// with the 6-bit scale / min of scale_min_k4_pair: x = d*sc*q - dmin*m.
GQ_HD void k4_header(const uint8_t* b, int c, float& d, float& dmin, float& sc0, float& mn0, float& sc1, float& mn1) {
  d = f16_at(b);
  dmin = f16_at(b + 2);
  scale_min_k4_pair(c, b + 4, sc0, mn0, sc1, mn1);
}
GQ_HD void k4_scales(float d, float dmin, float sc0, float mn0, float sc1, float mn1, Codes& r) {
  set_pair(r, 0, d * sc0, -(dmin * mn0));
  set_pair(r, 1, d * sc1, -(dmin * mn1));
}

// block_q4_K { ggml_half d; ggml_half dmin; uint8_t scales[12]; uint8_t qs[128]; }.
template <>
GQ_HD void decode_codes<Q4_K>(const uint8_t* row, int u, int p, bool, Codes& r) {
  const uint8_t* b = row + (u >> 2) * 144;
  const int c = u & 3;
  float d, dmin, sc0, mn0, sc1, mn1;
  k4_header(b, c, d, dmin, sc0, mn0, sc1, mn1);
  const uint32_t A = u32_a4(b + 16 + 32 * c + 4 * p);
  const uint32_t B = u32_a4(b + 16 + 32 * c + 16 + 4 * p);
  r.c[0] = nib_lo4(A);
  r.c[1] = nib_lo4(B);
  r.c[2] = nib_hi4(A);
  r.c[3] = nib_hi4(B);
  k4_scales(d, dmin, sc0, mn0, sc1, mn1, r);
}

// block_q5_K { ggml_half d; ggml_half dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; }:
// as Q4_K, plus fifth bit of element 64c + 32h + l = bit (2c + h) of qh[l].
template <>
GQ_HD void decode_codes<Q5_K>(const uint8_t* row, int u, int p, bool, Codes& r) {
  const uint8_t* b = row + (u >> 2) * 176;
  const int c = u & 3;
  float d, dmin, sc0, mn0, sc1, mn1;
  k4_header(b, c, d, dmin, sc0, mn0, sc1, mn1);
  const uint32_t QA = u32_a4(b + 16 + 4 * p), QB = u32_a4(b + 32 + 4 * p);
  const uint32_t A = u32_a4(b + 48 + 32 * c + 4 * p);
  const uint32_t B = u32_a4(b + 48 + 32 * c + 16 + 4 * p);
  const int s0 = 2 * c, s1 = 2 * c + 1;
  r.c[0] = nib_lo4(A) | (((QA >> s0) & 0x01010101u) << 4);
  r.c[1] = nib_lo4(B) | (((QB >> s0) & 0x01010101u) << 4);
  r.c[2] = nib_hi4(A) | (((QA >> s1) & 0x01010101u) << 4);
  r.c[3] = nib_hi4(B) | (((QB >> s1) & 0x01010101u) << 4);
  k4_scales(d, dmin, sc0, mn0, sc1, mn1, r);
}

// block_q6_K { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; ggml_half d; }:
// in half n (128 elements), quarter t, position l < 32: low nibble source ql[64n + 32(t&1) + l]
// (high nibble when t >= 2), two high bits = bits 2t.. of qh[32n + l]; x = d * sc[e/16] * (q - 32).
template <>
GQ_HD void decode_codes<Q6_K>(const uint8_t* row, int u, int p, bool, Codes& r) {
  const uint8_t* b = row + (u >> 2) * 210;
  const int uu = u & 3, n = uu >> 1, hi = uu & 1;
  const float d = f16_at(b + 208);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const uint32_t L = u32_a2(b + 64 * n + 16 * q + 4 * p);
    const uint32_t H = u32_a2(b + 128 + 32 * n + 16 * (q & 1) + 4 * p);
    const uint32_t nib = nib_lo4(hi ? (L >> 4) : L);
    const uint32_t hb = ((H >> (4 * hi + 2 * (q >> 1))) & 0x03030303u) << 4;
    r.c[q] = nib | hb;
    const float dl = d * (float)(int8_t)b[192 + 4 * uu + q];
    r.s[q] = dl;
    r.o[q] = -32.f * dl;
  }
}

// block_iq4_xs { ggml_half d; uint16_t scales_h; uint8_t scales_l[4]; uint8_t qs[128]; }:
// sub-block ib (32 elements): qs[16ib..] in the Q4_0 nibble layout; 6-bit scale ls = scales_l
// nibble | 2 bits of scales_h; x = d * (ls - 32) * kvalues_iq4nl[q].
// Unit u's two qs words of part p, A of sub-block 2(u & 3) and B of the next, and their scales d0, d1.
GQ_HD void iq4xs_unit(const uint8_t* row, int u, int p, uint32_t& A, uint32_t& B, float& d0, float& d1) {
  const uint8_t* b = row + (u >> 2) * 136;
  const int c = u & 3;
  const float d = f16_at(b);
  const uint32_t sh = u16_at(b + 2);
  const uint32_t sl = b[4 + c];  // scales_l[(2c)/2]: low nibble for sub-block 2c, high for 2c+1
  d0 = d * (float)((int)((sl & 0xF) | (((sh >> (4 * c)) & 3) << 4)) - 32);
  d1 = d * (float)((int)((sl >> 4) | (((sh >> (4 * c + 2)) & 3) << 4)) - 32);
  A = u32_a4(b + 8 + 32 * c + 4 * p);
  B = u32_a4(b + 8 + 32 * c + 16 + 4 * p);
}
template <>
GQ_HD void decode_codes<IQ4_XS>(const uint8_t* row, int u, int p, bool, Codes& r) {
  uint32_t A, B;
  float d0, d1;
  iq4xs_unit(row, u, p, A, B, d0, d1);
  r.c[0] = iq4_codes(nib_lo4(A));
  r.c[1] = iq4_codes(nib_hi4(A));
  r.c[2] = iq4_codes(nib_lo4(B));
  r.c[3] = iq4_codes(nib_hi4(B));
  set_pair(r, 0, d0, -128.f * d0);
  set_pair(r, 1, d1, -128.f * d1);
}

// block_nvfp4 { uint8_t d[4]; uint8_t qs[32]; }, one 64-element unit: group q (16 elements) has the
// UE4M3 scale d[q] and bytes qs[8q..8q+7], byte j holding element j (low nibble) and j + 8 (high);
// x = kvalues_mxfp4[q] * ue4m3_half(d) (code = kvalue + 64, as MXFP4's).
template <>
GQ_HD void decode_codes<NVFP4>(const uint8_t* row, int u, int p, bool, Codes& r) {
  const uint8_t* b = row + u * 36;
  const uint32_t d = u32_a4(b);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const uint32_t w = u32_a4(b + 4 + 8 * q + 4 * (p & 1));
    r.c[q] = lut16(p < 2 ? nib_lo4(w) : nib_hi4(w), FP4P_T0, FP4P_T1, FP4P_T2, FP4P_T3);
    r.s[q] = ue4m3_half((d >> (8 * q)) & 0xFF);
    r.o[q] = -64.f * r.s[q];
  }
}

// fp32 values: v[4q + i] = element 64u + 16q + 4p + i (correctly rounded s*code + o, which
// equals ggml's d * (q - offset) etc. bit for bit).
template <int T>
GQ_HD void decode(const uint8_t* row, int u, int p, bool full, float (&v)[16]) {
  Codes r;
  decode_codes<T>(row, u, p, full, r);
#pragma unroll
  for (int q = 0; q < 4; ++q)
#pragma unroll
    for (int i = 0; i < 4; ++i) v[4 * q + i] = fmaf(r.s[q], ubyte(r.c[q], i), r.o[q]);
}

}  // namespace gq
