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
#include <cstring>
#include <cuda_fp16.h>

#include "qtypes.h"

#if defined(__CUDACC__)
#define GQ_HD __host__ __device__ __forceinline__
#else
#define GQ_HD inline
#endif

namespace gq {

template <int T> struct Traits;
template <> struct Traits<Q4_0>   { static constexpr int BLOCK = 32,  BYTES = 18;  };
template <> struct Traits<Q4_1>   { static constexpr int BLOCK = 32,  BYTES = 20;  };
template <> struct Traits<Q5_0>   { static constexpr int BLOCK = 32,  BYTES = 22;  };
template <> struct Traits<Q5_1>   { static constexpr int BLOCK = 32,  BYTES = 24;  };
template <> struct Traits<Q8_0>   { static constexpr int BLOCK = 32,  BYTES = 34;  };
template <> struct Traits<Q2_K>   { static constexpr int BLOCK = 256, BYTES = 84;  };
template <> struct Traits<Q3_K>   { static constexpr int BLOCK = 256, BYTES = 110; };
template <> struct Traits<Q4_K>   { static constexpr int BLOCK = 256, BYTES = 144; };
template <> struct Traits<Q5_K>   { static constexpr int BLOCK = 256, BYTES = 176; };
template <> struct Traits<Q6_K>   { static constexpr int BLOCK = 256, BYTES = 210; };
template <> struct Traits<IQ4_NL> { static constexpr int BLOCK = 32,  BYTES = 18;  };
template <> struct Traits<IQ4_XS> { static constexpr int BLOCK = 256, BYTES = 136; };
template <> struct Traits<MXFP4>  { static constexpr int BLOCK = 32,  BYTES = 17;  };

// ---- small portable helpers ------------------------------------------------------------------

GQ_HD float as_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f; std::memcpy(&f, &u, 4); return f;
#endif
}

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

// Unsigned byte i of w, minus `off`, as an exact float: 0x4B0000bb is 2^23 + bb.
GQ_HD float ubyte(uint32_t w, int i, float off) {
  return as_float(perm(w, 0x4B000000u, 0x7540u | (uint32_t)i)) - (8388608.0f + off);
}

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

// kvalues_iq4nl (ggml-common.h) as int8 bytes, little-endian words.
constexpr uint32_t IQ4_T0 = 0xBFAD9881u, IQ4_T1 = 0xF6EADDCFu, IQ4_T2 = 0x26190D01u, IQ4_T3 = 0x71594535u;
// kvalues_mxfp4: e2m1 values doubled {0,1,2,3,4,6,8,12,-0,-1,-2,-3,-4,-6,-8,-12}.
constexpr uint32_t FP4_T0 = 0x03020100u, FP4_T1 = 0x0C080604u, FP4_T2 = 0xFDFEFF00u, FP4_T3 = 0xF4F8FAFCu;

// ggml_e8m0_to_fp32_half: 2^(e-128) (half of the E8M0 scale, because the table is doubled).
GQ_HD float e8m0_half(uint32_t e) {
  return as_float(e < 2 ? (0x00200000u << e) : ((e - 1) << 23));
}

// Q4_K / Q5_K 6-bit scale and min of sub-block j (get_scale_min_k4 semantics).
GQ_HD void scale_min_k4(int j, const uint8_t* q, float& sc, float& mn) {
  if (j < 4) {
    sc = (float)(q[j] & 63);
    mn = (float)(q[j + 4] & 63);
  } else {
    sc = (float)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    mn = (float)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// scale_min_k4 for sub-blocks 2c and 2c+1 at once, from the 12 scale bytes read as three
// words (q 4-byte aligned).
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
// Traits<T>::CODE_BITS is the widest code (<= 7 lets the tensor-core path build bf16 directly).

struct Codes {
  uint32_t c[4];
  float s[4], o[4];
};

template <int T>
GQ_HD void decode_codes(const uint8_t* row, int u, int p, bool full, Codes& r);

template <int T> struct CodeBits;

// Zero the second block's groups of a half unit (K % 64 == 32).
GQ_HD void zero_hi(Codes& r) {
  r.c[2] = r.c[3] = 0u;
  r.s[2] = r.s[3] = r.o[2] = r.o[3] = 0.f;
}

// block_q4_0 { ggml_half d; uint8_t qs[16]; }: byte j holds element j (low nibble) and j+16
// (high nibble); x = d * (q - 8).
template <> struct CodeBits<Q4_0> { static constexpr bool PAIRED = true; static constexpr int BITS = 4; };
template <>
GQ_HD void decode_codes<Q4_0>(const uint8_t* row, int u, int p, bool full, Codes& r) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (h == 1 && !full) { zero_hi(r); break; }
    const uint8_t* b = row + (2 * u + h) * 18;
    const float d = f16_at(b);
    const uint32_t w = u32_a2(b + 2 + 4 * p);
    r.c[2 * h] = w & 0x0F0F0F0Fu;
    r.c[2 * h + 1] = (w >> 4) & 0x0F0F0F0Fu;
    r.s[2 * h] = r.s[2 * h + 1] = d;
    r.o[2 * h] = r.o[2 * h + 1] = -8.f * d;
  }
}

// block_q4_1 { ggml_half d; ggml_half m; uint8_t qs[16]; }: x = d * q + m.
template <> struct CodeBits<Q4_1> { static constexpr bool PAIRED = true; static constexpr int BITS = 4; };
template <>
GQ_HD void decode_codes<Q4_1>(const uint8_t* row, int u, int p, bool full, Codes& r) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (h == 1 && !full) { zero_hi(r); break; }
    const uint8_t* b = row + (2 * u + h) * 20;
    const float d = f16_at(b), m = f16_at(b + 2);
    const uint32_t w = u32_a4(b + 4 + 4 * p);
    r.c[2 * h] = w & 0x0F0F0F0Fu;
    r.c[2 * h + 1] = (w >> 4) & 0x0F0F0F0Fu;
    r.s[2 * h] = r.s[2 * h + 1] = d;
    r.o[2 * h] = r.o[2 * h + 1] = m;
  }
}

// block_q5_0 { ggml_half d; uint8_t qh[4]; uint8_t qs[16]; }: the fifth bit of element e is
// bit e of qh (read as little-endian uint32); x = d * (q - 16).
template <> struct CodeBits<Q5_0> { static constexpr bool PAIRED = true; static constexpr int BITS = 5; };
template <>
GQ_HD void decode_codes<Q5_0>(const uint8_t* row, int u, int p, bool full, Codes& r) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (h == 1 && !full) { zero_hi(r); break; }
    const uint8_t* b = row + (2 * u + h) * 22;
    const float d = f16_at(b);
    const uint32_t qh = u32_a2(b + 2);
    const uint32_t w = u32_a2(b + 6 + 4 * p);
    r.c[2 * h] = (w & 0x0F0F0F0Fu) | spread4_to_bit4((qh >> (4 * p)) & 0xF);
    r.c[2 * h + 1] = ((w >> 4) & 0x0F0F0F0Fu) | spread4_to_bit4((qh >> (16 + 4 * p)) & 0xF);
    r.s[2 * h] = r.s[2 * h + 1] = d;
    r.o[2 * h] = r.o[2 * h + 1] = -16.f * d;
  }
}

// block_q5_1 { ggml_half d; ggml_half m; uint8_t qh[4]; uint8_t qs[16]; }: x = d * q + m.
template <> struct CodeBits<Q5_1> { static constexpr bool PAIRED = true; static constexpr int BITS = 5; };
template <>
GQ_HD void decode_codes<Q5_1>(const uint8_t* row, int u, int p, bool full, Codes& r) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (h == 1 && !full) { zero_hi(r); break; }
    const uint8_t* b = row + (2 * u + h) * 24;
    const float d = f16_at(b), m = f16_at(b + 2);
    const uint32_t qh = u32_a4(b + 4);
    const uint32_t w = u32_a4(b + 8 + 4 * p);
    r.c[2 * h] = (w & 0x0F0F0F0Fu) | spread4_to_bit4((qh >> (4 * p)) & 0xF);
    r.c[2 * h + 1] = ((w >> 4) & 0x0F0F0F0Fu) | spread4_to_bit4((qh >> (16 + 4 * p)) & 0xF);
    r.s[2 * h] = r.s[2 * h + 1] = d;
    r.o[2 * h] = r.o[2 * h + 1] = m;
  }
}

// block_q8_0 { ggml_half d; int8_t qs[32]; }: x = d * q (code = q + 128).
template <> struct CodeBits<Q8_0> { static constexpr bool PAIRED = true; static constexpr int BITS = 8; };
template <>
GQ_HD void decode_codes<Q8_0>(const uint8_t* row, int u, int p, bool full, Codes& r) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (h == 1 && !full) { zero_hi(r); break; }
    const uint8_t* b = row + (2 * u + h) * 34;
    const float d = f16_at(b);
    r.c[2 * h] = u32_a2(b + 2 + 4 * p) ^ 0x80808080u;
    r.c[2 * h + 1] = u32_a2(b + 18 + 4 * p) ^ 0x80808080u;
    r.s[2 * h] = r.s[2 * h + 1] = d;
    r.o[2 * h] = r.o[2 * h + 1] = -128.f * d;
  }
}

// block_q2_K { uint8_t scales[16]; uint8_t qs[64]; ggml_half d; ggml_half dmin; }:
// element e = 128n + 32j + l (n < 2, j < 4, l < 32) is bits 2j..2j+1 of qs[32n + l];
// scales[e / 16] holds the scale (low nibble) and min (high nibble): x = d*sc*q - dmin*m.
template <> struct CodeBits<Q2_K> { static constexpr bool PAIRED = false; static constexpr int BITS = 2; };
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
    r.c[q] = (((q & 1) ? B : A) >> (2 * (j0 + (q >> 1)))) & 0x03030303u;
    const uint32_t sc = (sc4 >> (8 * q)) & 0xFF;
    r.s[q] = d * (float)(sc & 15);
    r.o[q] = -(dmin * (float)(sc >> 4));
  }
}

// block_q3_K { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; ggml_half d; }:
// element e = 128n + 32j + l: low two bits = bits 2j.. of qs[32n + l], third bit = bit
// 4n + j of hmask[l] (set means +0, clear means -4); 6-bit scales (scale_q3k) minus 32.
template <> struct CodeBits<Q3_K> { static constexpr bool PAIRED = false; static constexpr int BITS = 3; };
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
    const uint32_t lo2 = (((q & 1) ? B : A) >> (2 * j)) & 0x03030303u;
    const uint32_t hb = ((((q & 1) ? HB : HA) >> (4 * n + j)) & 0x01010101u) << 2;
    r.c[q] = lo2 | hb;
    const float dl = d * scale_q3k(4 * uu + q, b + 96);
    r.s[q] = dl;
    r.o[q] = -4.f * dl;
  }
}

// block_q4_K { ggml_half d; ggml_half dmin; uint8_t scales[12]; uint8_t qs[128]; }:
// element e = 64c + 32h + l is nibble h of qs[32c + l], sub-block s = 2c + h with 6-bit
// scale/min from scale_min_k4: x = d*sc*q - dmin*m.
template <> struct CodeBits<Q4_K> { static constexpr bool PAIRED = true; static constexpr int BITS = 4; };
template <>
GQ_HD void decode_codes<Q4_K>(const uint8_t* row, int u, int p, bool, Codes& r) {
  const uint8_t* b = row + (u >> 2) * 144;
  const int c = u & 3;
  const float d = f16_at(b), dmin = f16_at(b + 2);
  float sc0, mn0, sc1, mn1;
  scale_min_k4_pair(c, b + 4, sc0, mn0, sc1, mn1);
  const uint32_t A = u32_a4(b + 16 + 32 * c + 4 * p);
  const uint32_t B = u32_a4(b + 16 + 32 * c + 16 + 4 * p);
  r.c[0] = A & 0x0F0F0F0Fu;
  r.c[1] = B & 0x0F0F0F0Fu;
  r.c[2] = (A >> 4) & 0x0F0F0F0Fu;
  r.c[3] = (B >> 4) & 0x0F0F0F0Fu;
  r.s[0] = r.s[1] = d * sc0;
  r.o[0] = r.o[1] = -(dmin * mn0);
  r.s[2] = r.s[3] = d * sc1;
  r.o[2] = r.o[3] = -(dmin * mn1);
}

// block_q5_K { ggml_half d; ggml_half dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; }:
// as Q4_K, plus fifth bit of element 64c + 32h + l = bit (2c + h) of qh[l].
template <> struct CodeBits<Q5_K> { static constexpr bool PAIRED = true; static constexpr int BITS = 5; };
template <>
GQ_HD void decode_codes<Q5_K>(const uint8_t* row, int u, int p, bool, Codes& r) {
  const uint8_t* b = row + (u >> 2) * 176;
  const int c = u & 3;
  const float d = f16_at(b), dmin = f16_at(b + 2);
  float sc0, mn0, sc1, mn1;
  scale_min_k4_pair(c, b + 4, sc0, mn0, sc1, mn1);
  const uint32_t QA = u32_a4(b + 16 + 4 * p), QB = u32_a4(b + 32 + 4 * p);
  const uint32_t A = u32_a4(b + 48 + 32 * c + 4 * p);
  const uint32_t B = u32_a4(b + 48 + 32 * c + 16 + 4 * p);
  const int s0 = 2 * c, s1 = 2 * c + 1;
  r.c[0] = (A & 0x0F0F0F0Fu) | (((QA >> s0) & 0x01010101u) << 4);
  r.c[1] = (B & 0x0F0F0F0Fu) | (((QB >> s0) & 0x01010101u) << 4);
  r.c[2] = ((A >> 4) & 0x0F0F0F0Fu) | (((QA >> s1) & 0x01010101u) << 4);
  r.c[3] = ((B >> 4) & 0x0F0F0F0Fu) | (((QB >> s1) & 0x01010101u) << 4);
  r.s[0] = r.s[1] = d * sc0;
  r.o[0] = r.o[1] = -(dmin * mn0);
  r.s[2] = r.s[3] = d * sc1;
  r.o[2] = r.o[3] = -(dmin * mn1);
}

// block_q6_K { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; ggml_half d; }:
// in half n (128 elements), quarter t, position l < 32: low nibble source ql[64n + 32(t&1) + l]
// (high nibble when t >= 2), two high bits = bits 2t.. of qh[32n + l]; x = d * sc[e/16] * (q - 32).
template <> struct CodeBits<Q6_K> { static constexpr bool PAIRED = false; static constexpr int BITS = 6; };
template <>
GQ_HD void decode_codes<Q6_K>(const uint8_t* row, int u, int p, bool, Codes& r) {
  const uint8_t* b = row + (u >> 2) * 210;
  const int uu = u & 3, n = uu >> 1, hi = uu & 1;
  const float d = f16_at(b + 208);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const uint32_t L = u32_a2(b + 64 * n + 16 * q + 4 * p);
    const uint32_t H = u32_a2(b + 128 + 32 * n + 16 * (q & 1) + 4 * p);
    const uint32_t nib = (hi ? (L >> 4) : L) & 0x0F0F0F0Fu;
    const uint32_t hb = ((H >> (4 * hi + 2 * (q >> 1))) & 0x03030303u) << 4;
    r.c[q] = nib | hb;
    const float dl = d * (float)(int8_t)b[192 + 4 * uu + q];
    r.s[q] = dl;
    r.o[q] = -32.f * dl;
  }
}

// block_iq4_nl { ggml_half d; uint8_t qs[16]; }: Q4_0 nibble layout, x = d * kvalues_iq4nl[q]
// (code = kvalue + 128).
template <> struct CodeBits<IQ4_NL> { static constexpr bool PAIRED = true; static constexpr int BITS = 8; };
template <>
GQ_HD void decode_codes<IQ4_NL>(const uint8_t* row, int u, int p, bool full, Codes& r) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (h == 1 && !full) { zero_hi(r); break; }
    const uint8_t* b = row + (2 * u + h) * 18;
    const float d = f16_at(b);
    const uint32_t w = u32_a2(b + 2 + 4 * p);
    r.c[2 * h] = lut16(w & 0x0F0F0F0Fu, IQ4_T0, IQ4_T1, IQ4_T2, IQ4_T3) ^ 0x80808080u;
    r.c[2 * h + 1] = lut16((w >> 4) & 0x0F0F0F0Fu, IQ4_T0, IQ4_T1, IQ4_T2, IQ4_T3) ^ 0x80808080u;
    r.s[2 * h] = r.s[2 * h + 1] = d;
    r.o[2 * h] = r.o[2 * h + 1] = -128.f * d;
  }
}

// block_iq4_xs { ggml_half d; uint16_t scales_h; uint8_t scales_l[4]; uint8_t qs[128]; }:
// sub-block ib (32 elements): qs[16ib + j] holds element j (low nibble) and j + 16 (high);
// 6-bit scale ls = scales_l nibble | 2 bits of scales_h; x = d * (ls - 32) * kvalues_iq4nl[q].
template <> struct CodeBits<IQ4_XS> { static constexpr bool PAIRED = true; static constexpr int BITS = 8; };
template <>
GQ_HD void decode_codes<IQ4_XS>(const uint8_t* row, int u, int p, bool, Codes& r) {
  const uint8_t* b = row + (u >> 2) * 136;
  const int c = u & 3;
  const float d = f16_at(b);
  const uint32_t sh = u16_at(b + 2);
  const uint32_t sl = b[4 + c];  // scales_l[(2c)/2]: low nibble for sub-block 2c, high for 2c+1
  const float d0 = d * (float)((int)((sl & 0xF) | (((sh >> (4 * c)) & 3) << 4)) - 32);
  const float d1 = d * (float)((int)((sl >> 4) | (((sh >> (4 * c + 2)) & 3) << 4)) - 32);
  const uint32_t A = u32_a4(b + 8 + 32 * c + 4 * p);
  const uint32_t B = u32_a4(b + 8 + 32 * c + 16 + 4 * p);
  r.c[0] = lut16(A & 0x0F0F0F0Fu, IQ4_T0, IQ4_T1, IQ4_T2, IQ4_T3) ^ 0x80808080u;
  r.c[1] = lut16((A >> 4) & 0x0F0F0F0Fu, IQ4_T0, IQ4_T1, IQ4_T2, IQ4_T3) ^ 0x80808080u;
  r.c[2] = lut16(B & 0x0F0F0F0Fu, IQ4_T0, IQ4_T1, IQ4_T2, IQ4_T3) ^ 0x80808080u;
  r.c[3] = lut16((B >> 4) & 0x0F0F0F0Fu, IQ4_T0, IQ4_T1, IQ4_T2, IQ4_T3) ^ 0x80808080u;
  r.s[0] = r.s[1] = d0;
  r.o[0] = r.o[1] = -128.f * d0;
  r.s[2] = r.s[3] = d1;
  r.o[2] = r.o[3] = -128.f * d1;
}

// block_mxfp4 { uint8_t e; uint8_t qs[16]; }: Q4_0 nibble layout, x = kvalues_mxfp4[q] * 2^(e-128)
// (code = kvalue + 64, from a table holding kvalues_mxfp4 + 64, so codes fit 7 bits).
constexpr uint32_t FP4P_T0 = 0x43424140u, FP4P_T1 = 0x4C484644u, FP4P_T2 = 0x3D3E3F40u, FP4P_T3 = 0x34383A3Cu;
template <> struct CodeBits<MXFP4> { static constexpr bool PAIRED = true; static constexpr int BITS = 7; };
template <>
GQ_HD void decode_codes<MXFP4>(const uint8_t* row, int u, int p, bool full, Codes& r) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (h == 1 && !full) { zero_hi(r); break; }
    const uint8_t* b = row + (2 * u + h) * 17;
    const float d = e8m0_half(b[0]);
    const uint32_t w = u32_a1(b + 1 + 4 * p);
    r.c[2 * h] = lut16(w & 0x0F0F0F0Fu, FP4P_T0, FP4P_T1, FP4P_T2, FP4P_T3);
    r.c[2 * h + 1] = lut16((w >> 4) & 0x0F0F0F0Fu, FP4P_T0, FP4P_T1, FP4P_T2, FP4P_T3);
    r.s[2 * h] = r.s[2 * h + 1] = d;
    r.o[2 * h] = r.o[2 * h + 1] = -64.f * d;
  }
}

// Unsigned byte i of w as an exact float (0x4B0000bb is 2^23 + bb).
GQ_HD float ubyte0(uint32_t w, int i) { return as_float(perm(w, 0x4B000000u, 0x7540u | (uint32_t)i)) - 8388608.0f; }

// fp32 values: v[4q + i] = element 64u + 16q + 4p + i (correctly rounded s*code + o, which
// equals ggml's d * (q - offset) etc. bit for bit).
template <int T>
GQ_HD void decode(const uint8_t* row, int u, int p, bool full, float (&v)[16]) {
  Codes r;
  decode_codes<T>(row, u, p, full, r);
#pragma unroll
  for (int q = 0; q < 4; ++q)
#pragma unroll
    for (int i = 0; i < 4; ++i) v[4 * q + i] = fmaf(r.s[q], ubyte0(r.c[q], i), r.o[q]);
}

}  // namespace gq
