// ggml i-quant block decoders (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M), written from
// ggml's public block layouts (ggml-common.h: block_iq*; the reference dequantize_row_iq* semantics)
// with the decode_codes<T> contract of ggml_blocks.cuh. Included, before the kernels, only by the
// translation units that instantiate these types (and the host check), since it defines the grids.
//
// Each 256-element superblock is split into 32-element sub-blocks (ib) of four 8-element groups, an
// 8-element group being one grid entry (IQ3: two 4-element entries) and 8 sign bits. Lane (u, p)'s
// group q holds elements 64 (u & 3) + 16 q + 4 p .. + 3 of superblock u >> 2: sub-block
// ib = 2 (u & 3) + (q >> 1), 8-element group k8 = 8 (u & 3) + 2 q + (p >> 1) (l = k8 & 3 within the
// sub-block), half p & 1 of it.
//
// Codes: IQ2 / IQ3 give +-g with g a grid byte (< 64): code = 64 + g or 64 - g, x = s * code - 64 s.
// IQ1 gives g + delta, g in {-1, 0, 1}, delta = +-1/8: code = 8 (g + 1) + 8 +- 1, s = dl / 8,
// x = s * code - 16 s. Either way the fma in decode() rounds the product once, as ggml's float does.
#pragma once
#include "ggml_blocks.cuh"
#include "iq_grids.h"

namespace gq {

namespace iqg {
#if defined(__CUDACC__)
static __device__ const uint64_t d_iq2xxs[256] = GQ_IQ2XXS_GRID;
static __device__ const uint64_t d_iq2xs[512] = GQ_IQ2XS_GRID;
static __device__ const uint64_t d_iq2s[1024] = GQ_IQ2S_GRID;
static __device__ const uint32_t d_iq3xxs[256] = GQ_IQ3XXS_GRID;
static __device__ const uint32_t d_iq3s[512] = GQ_IQ3S_GRID;
static __device__ const uint64_t d_iq1s[2048] = GQ_IQ1S_GRID;
#endif
static const uint64_t h_iq2xxs[256] = GQ_IQ2XXS_GRID;
static const uint64_t h_iq2xs[512] = GQ_IQ2XS_GRID;
static const uint64_t h_iq2s[1024] = GQ_IQ2S_GRID;
static const uint32_t h_iq3xxs[256] = GQ_IQ3XXS_GRID;
static const uint32_t h_iq3s[512] = GQ_IQ3S_GRID;
static const uint64_t h_iq1s[2048] = GQ_IQ1S_GRID;
}  // namespace iqg

// Half h (bytes 4h..4h+3) of an 8-byte grid entry; a 4-byte entry.
GQ_HD uint32_t iq2xxs_half(uint32_t i, int h) { return (uint32_t)(GQ_DEV_HOST(__ldg(&iqg::d_iq2xxs[i]), iqg::h_iq2xxs[i]) >> (32 * h)); }
GQ_HD uint32_t iq2xs_half(uint32_t i, int h) { return (uint32_t)(GQ_DEV_HOST(__ldg(&iqg::d_iq2xs[i]), iqg::h_iq2xs[i]) >> (32 * h)); }
GQ_HD uint32_t iq2s_half(uint32_t i, int h) { return (uint32_t)(GQ_DEV_HOST(__ldg(&iqg::d_iq2s[i]), iqg::h_iq2s[i]) >> (32 * h)); }
GQ_HD uint32_t iq1s_half(uint32_t i, int h) { return (uint32_t)(GQ_DEV_HOST(__ldg(&iqg::d_iq1s[i]), iqg::h_iq1s[i]) >> (32 * h)); }
GQ_HD uint32_t iq3xxs_entry(uint32_t i) { return GQ_DEV_HOST(__ldg(&iqg::d_iq3xxs[i]), iqg::h_iq3xxs[i]); }
GQ_HD uint32_t iq3s_entry(uint32_t i) { return GQ_DEV_HOST(__ldg(&iqg::d_iq3s[i]), iqg::h_iq3s[i]); }

// ksigns_iq2xs[i]: the 7 bits of i and an eighth that makes the number of set bits even.
GQ_HD uint32_t ksigns(uint32_t i) {
  return i | ((uint32_t)(GQ_DEV_HOST(__popc(i), __builtin_popcount(i)) & 1) << 7);
}
// 0xFF in byte i where bit i (i < 4) of `bits` is set, else 0x00 (the shifted copies of bits by 0, 7,
// 14 and 21 never overlap, so the product has no carries).
GQ_HD uint32_t sign_mask4(uint32_t bits) { return ((bits * 0x00204081u) & 0x01010101u) * 0xFFu; }
// 64 + g where the mask byte is 0, 64 - g where it is 0xFF (bytes of g below 64: no carries).
GQ_HD uint32_t signed_codes(uint32_t g, uint32_t m) { return ((g + 0x40404040u) & ~m) | ((0x40404040u - g) & m); }

// 7-bit codes (64 +- g, g < 64) and 5-bit (IQ1); every 16-element group with its own scale and offset
// as far as the kernels know (the sub-block ones share them).
template <> struct CodeBits<IQ2_XXS> : CodeBitsOf<7, false> {};
template <> struct CodeBits<IQ2_XS>  : CodeBitsOf<7, false> {};
template <> struct CodeBits<IQ2_S>   : CodeBitsOf<7, false> {};
template <> struct CodeBits<IQ3_XXS> : CodeBitsOf<7, false> {};
template <> struct CodeBits<IQ3_S>   : CodeBitsOf<7, false> {};
template <> struct CodeBits<IQ1_S>   : CodeBitsOf<5, false> {};
template <> struct CodeBits<IQ1_M>   : CodeBitsOf<5, false> {};

GQ_HD void set_group(Codes& r, int q, uint32_t code, float s, float off) {
  r.c[q] = code;
  r.s[q] = s;
  r.o[q] = off * s;
}

// block_iq2_xxs { ggml_half d; uint16_t qs[32]; }: sub-block ib is two words, the first four grid
// indices (one byte per 8-group), the second four 7-bit ksigns indices (bits 7l..) and a 4-bit scale
// (bits 28..31); x = d * (0.5 + scale) * 0.25 * grid * sign.
template <>
GQ_HD void decode_codes<IQ2_XXS>(const uint8_t* row, int u, int p, bool, Codes& r) {
  const uint8_t* b = row + (u >> 2) * 66;
  const int uu = u & 3, h = p & 1;
  const float d = f16_at(b);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int ib = 2 * uu + (q >> 1), l = 2 * (q & 1) + (p >> 1);
    const uint32_t idx = u32_a2(b + 2 + 8 * ib), aux = u32_a2(b + 6 + 8 * ib);
    const uint32_t g = iq2xxs_half((idx >> (8 * l)) & 0xFF, h);
    const uint32_t m = sign_mask4((ksigns((aux >> (7 * l)) & 0x7F) >> (4 * h)) & 0xF);
    set_group(r, q, signed_codes(g, m), d * (0.5f + (float)(aux >> 28)) * 0.25f, -64.f);
  }
}

// block_iq2_xs { ggml_half d; uint16_t qs[32]; uint8_t scales[8]; }: qs[k8] is a 9-bit grid index and
// a 7-bit ksigns index; a 4-bit scale per 16 elements (low nibble first); x = d * (0.5 + scale) * 0.25 *
// grid * sign.
template <>
GQ_HD void decode_codes<IQ2_XS>(const uint8_t* row, int u, int p, bool, Codes& r) {
  const uint8_t* b = row + (u >> 2) * 74;
  const int uu = u & 3, h = p & 1;
  const float d = f16_at(b);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int k8 = 8 * uu + 2 * q + (p >> 1);
    const uint32_t v = u16_at(b + 2 + 2 * k8);
    const uint32_t g = iq2xs_half(v & 511, h);
    const uint32_t m = sign_mask4((ksigns(v >> 9) >> (4 * h)) & 0xF);
    const uint32_t sc = (b[66 + 2 * uu + (q >> 1)] >> (4 * (q & 1))) & 0xF;
    set_group(r, q, signed_codes(g, m), d * (0.5f + (float)sc) * 0.25f, -64.f);
  }
}

// block_iq2_s { ggml_half d; uint8_t qs[64]; uint8_t qh[8]; uint8_t scales[8]; }: qs[k8] the low 8
// bits of a 10-bit grid index, bits 2l.. of qh[ib] the top two; qs[32 + k8] the 8 sign bits; a 4-bit
// scale per 16 elements; x = d * (0.5 + scale) * 0.25 * grid * sign.
template <>
GQ_HD void decode_codes<IQ2_S>(const uint8_t* row, int u, int p, bool, Codes& r) {
  const uint8_t* b = row + (u >> 2) * 82;
  const int uu = u & 3, h = p & 1;
  const float d = f16_at(b);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int ib = 2 * uu + (q >> 1), k8 = 8 * uu + 2 * q + (p >> 1);
    const uint32_t gi = b[2 + k8] | (((uint32_t)(b[66 + ib] >> (2 * (k8 & 3))) & 3) << 8);
    const uint32_t g = iq2s_half(gi, h);
    const uint32_t m = sign_mask4((b[34 + k8] >> (4 * h)) & 0xF);
    const uint32_t sc = (b[74 + ib] >> (4 * (q & 1))) & 0xF;
    set_group(r, q, signed_codes(g, m), d * (0.5f + (float)sc) * 0.25f, -64.f);
  }
}

// block_iq3_xxs { ggml_half d; uint8_t qs[96]; }: qs[k4] (k4 = 16 (u & 3) + 4 q + p, one per 4
// elements) indexes the 4-byte grid; qs[64 + 4 ib..] is a word of four 7-bit ksigns indices and a 4-bit
// scale, as IQ2_XXS's; x = d * (0.5 + scale) * 0.5 * grid * sign.
template <>
GQ_HD void decode_codes<IQ3_XXS>(const uint8_t* row, int u, int p, bool, Codes& r) {
  const uint8_t* b = row + (u >> 2) * 98;
  const int uu = u & 3, h = p & 1;
  const float d = f16_at(b);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int ib = 2 * uu + (q >> 1), l = 2 * (q & 1) + (p >> 1);
    const uint32_t aux = u32_a2(b + 66 + 4 * ib);
    const uint32_t g = iq3xxs_entry(b[2 + 16 * uu + 4 * q + p]);
    const uint32_t m = sign_mask4((ksigns((aux >> (7 * l)) & 0x7F) >> (4 * h)) & 0xF);
    set_group(r, q, signed_codes(g, m), d * (0.5f + (float)(aux >> 28)) * 0.5f, -64.f);
  }
}

// block_iq3_s { ggml_half d; uint8_t qs[64]; uint8_t qh[8]; uint8_t signs[32]; uint8_t scales[4]; }:
// qs[k4] the low 8 bits of a 9-bit grid index (4-byte entries), bit k4 & 7 of qh[ib] the ninth;
// signs[k8] the 8 sign bits; a 4-bit scale per sub-block (low nibble first); x = d * (1 + 2 scale) *
// grid * sign.
template <>
GQ_HD void decode_codes<IQ3_S>(const uint8_t* row, int u, int p, bool, Codes& r) {
  const uint8_t* b = row + (u >> 2) * 110;
  const int uu = u & 3, h = p & 1;
  const float d = f16_at(b);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int ib = 2 * uu + (q >> 1), k4 = 16 * uu + 4 * q + p, k8 = k4 >> 1;
    const uint32_t g = iq3s_entry(b[2 + k4] | ((uint32_t)((b[66 + ib] >> (k4 & 7)) & 1) << 8));
    const uint32_t m = sign_mask4((b[74 + k8] >> (4 * h)) & 0xF);
    const uint32_t sc = (b[106 + (ib >> 1)] >> (4 * (ib & 1))) & 0xF;
    set_group(r, q, signed_codes(g, m), d * (float)(1 + 2 * sc), -64.f);
  }
}

// IQ1 codes of grid values + 1 (bytes 0..2) and the delta's sign: 8 (g + 1) + 8 +- 1.
GQ_HD uint32_t iq1_codes(uint32_t g1, bool neg) { return (g1 << 3) + (neg ? 0x07070707u : 0x09090909u); }

// block_iq1_s { ggml_half d; uint8_t qs[32]; uint16_t qh[8]; }: qs[k8] the low 8 bits of an 11-bit
// grid index, bits 3l.. of qh[ib] the top three; bits 12..14 of qh[ib] a 3-bit scale, bit 15 the sign
// of delta; x = d * (2 scale + 1) * (grid + delta), delta = +-1/8.
template <>
GQ_HD void decode_codes<IQ1_S>(const uint8_t* row, int u, int p, bool, Codes& r) {
  const uint8_t* b = row + (u >> 2) * 50;
  const int uu = u & 3, h = p & 1;
  const float d = f16_at(b);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int ib = 2 * uu + (q >> 1), k8 = 8 * uu + 2 * q + (p >> 1);
    const uint32_t qh = u16_at(b + 34 + 2 * ib);
    const uint32_t g1 = iq1s_half(b[2 + k8] | (((qh >> (3 * (k8 & 3))) & 7) << 8), h);
    const float dl = d * (float)(2 * ((qh >> 12) & 7) + 1);
    set_group(r, q, iq1_codes(g1, qh & 0x8000), dl * 0.125f, -16.f);
  }
}

// block_iq1_m { uint8_t qs[32]; uint8_t qh[16]; uint8_t scales[8]; }: qs[k8] the low 8 bits of the
// grid index; nibble k8 & 1 of qh[k8 >> 1] its top three bits and (bit 3) the sign of delta; 3-bit
// scales per 16 elements, bits 3j.. of the four 16-bit scale words, whose top nibbles hold the fp16 d;
// x = d * (2 scale + 1) * (grid + delta).
template <>
GQ_HD void decode_codes<IQ1_M>(const uint8_t* row, int u, int p, bool, Codes& r) {
  const uint8_t* b = row + (u >> 2) * 56;
  const int uu = u & 3, h = p & 1;
  const uint32_t s0 = u16_at(b + 48), s1 = u16_at(b + 50), s2 = u16_at(b + 52), s3 = u16_at(b + 54);
  const uint32_t dbits = (s0 >> 12) | ((s1 >> 8) & 0xF0) | ((s2 >> 4) & 0xF00) | (s3 & 0xF000);
  const float d = __half2float(__ushort_as_half((unsigned short)dbits));
  const uint32_t sw = u16_at(b + 48 + 2 * uu);  // the scale word of elements 64 (u & 3)..
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int k8 = 8 * uu + 2 * q + (p >> 1);
    const uint32_t nib = (b[32 + (k8 >> 1)] >> (4 * (k8 & 1))) & 0xF;
    const uint32_t g1 = iq1s_half(b[k8] | ((nib & 7) << 8), h);
    const float dl = d * (float)(2 * ((sw >> (3 * q)) & 7) + 1);
    set_group(r, q, iq1_codes(g1, nib & 8), dl * 0.125f, -16.f);
  }
}

}  // namespace gq
