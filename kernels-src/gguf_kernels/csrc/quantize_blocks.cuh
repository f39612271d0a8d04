// ggml block quantizers (llama.cpp's reference quantizers, no importance matrix) as host+device
// block math, byte-exact with `ggml_quantize_chunk`. Written from the algorithm as
// src/gguf_quant/ggml/quant.py documents it, step by step; the same code is compiled for the
// host (../tests/quantize_host.cu, checked against libggml on the CPU by
// tests/test_quantize_kernels.py) and for the GPU (quantize_kernel.cuh, instantiated in
// quantize_k.cu and quantize_32.cu).
//
// Byte-exactness rules (see quant.py's module docstring for why each one matters):
//  * every fp32 operation goes through fmul/fadd/fsub/fdiv/fsqrt below: on the device these are
//    the explicitly rounded intrinsics (__fmul_rn, ...), which the compiler never contracts into
//    FMA whatever -fmad says; on the host they are plain operators (build with
//    -ffp-contract=off, no fast-math, SSE float on x86-64);
//  * products keep C's left-to-right association, sums accumulate element by element in order;
//  * nearest_int is llama.cpp's 1.5*2^23 magic-number rounding, garbage past 2^22 included; a NaN
//    argument gives 0 (x86's default NaN has those mantissa bits; CUDA's NaN does not);
//  * C's float -> int casts are x86's cvttss2si (out of range or NaN -> INT_MIN), done explicitly;
//  * fp16 conversion is done bit by bit (round to nearest even), identical on host and device; a
//    NaN scale is stored as 0xFE00 (x86's default NaN);
//  * searches keep C's tie-breaking (first maximum, strict comparisons).
//
// Structure. 32-element types: `QOps<T>::block(x, out, tab)` quantizes one block (one thread).
// 256-element types are split in S sub-blocks of N elements (one thread each on the GPU):
//   Sub s = search(x_sub, tab)                 per sub-block: scale (and min) search
//   super(v0[S], v1[S], sp)                    per super-block, from every sub-block's s.v0/s.v1
//   codes(x_sub, j, s, sp, codes + j*N, tab)   per sub-block: final codes, one byte each
//   byte(b, codes[256], sp)                    output byte b of the block
// The host harness runs the phases in loops; the kernel runs them on S lanes, with the gathered
// values and the Super struct in shared memory (so the per-lane indices j and b stay runtime values
// without local-memory arrays).
#pragma once
#include <cmath>
#include <cstdint>

#include "hostdev.h"
#include "qtypes.h"

namespace gq {
namespace qz {

// ---- exactly rounded fp32 arithmetic ----------------------------------------------------------

GQ_HD float fmul(float a, float b) { return GQ_DEV_HOST(__fmul_rn(a, b), a * b); }
GQ_HD float fadd(float a, float b) { return GQ_DEV_HOST(__fadd_rn(a, b), a + b); }
GQ_HD float fsub(float a, float b) { return GQ_DEV_HOST(__fsub_rn(a, b), a - b); }
GQ_HD float fdiv(float a, float b) { return GQ_DEV_HOST(__fdiv_rn(a, b), a / b); }
GQ_HD float fsqrt(float a) { return GQ_DEV_HOST(__fsqrt_rn(a), sqrtf(a)); }
GQ_HD bool is_nan(float x) { return x != x; }
GQ_HD float fabs_(float x) { return as_float(as_uint(x) & 0x7FFFFFFFu); }

constexpr float GROUP_MAX_EPS = 1e-15f;

// llama.cpp's nearest_int: round half to even below 2^22, the low mantissa bits past it.
GQ_HD int nearest_int(float f) {
  const float v = fadd(f, 12582912.f);
  const int i = (int)(as_uint(v) & 0x007FFFFFu) - 0x00400000;
  return is_nan(f) ? 0 : i;
}

// C's (int)f on x86-64: truncation, INT_MIN when out of range or NaN.
GQ_HD int c_int(float f) {
  return (f > -2147483904.f && f < 2147483648.f) ? (int)f : (int)0x80000000u;
}

GQ_HD int clampi(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }
GQ_HD int as_int8(int v) { return (int)(int8_t)(uint8_t)(v & 0xFF); }


// GGML_FP32_TO_FP16: round to nearest even, overflow to inf; NaN stored as 0xFE00.
GQ_HD uint32_t fp16_bits(float f) {
  const uint32_t x = as_uint(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return 0xFE00u;
  if (ax >= 0x477FF000u) return sign | 0x7C00u;  // >= 65520 rounds to inf
  if (ax < 0x38800000u) {                        // below 2^-14: subnormal half or zero
    if (ax <= 0x33000000u) return sign;          // <= 2^-25 rounds to zero
    const uint32_t e = ax >> 23, m = (ax & 0x7FFFFFu) | 0x800000u;
    const uint32_t sh = 126u - e;  // value in units of 2^-24 is m >> sh
    uint32_t q = m >> sh;
    const uint32_t rem = m & ((1u << sh) - 1u), half = 1u << (sh - 1u);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return sign | q;
  }
  const uint32_t r = ax - 0x38000000u;  // exponent rebiased 127 -> 15
  uint32_t q = r >> 13;
  const uint32_t rem = r & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) ++q;
  return sign | q;
}

GQ_HD float fp16_to_f32(uint32_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0) return as_float(sign | as_uint(fmul((float)m, 5.9604644775390625e-8f)));  // m * 2^-24, exact
  if (e == 31) return as_float(sign | 0x7F800000u | (m << 13));
  return as_float(sign | ((e + 112u) << 23) | (m << 13));
}

// GGML_FP16_TO_FP32(GGML_FP32_TO_FP16(x)): the value ggml reads back from a stored scale.
GQ_HD float fp16_round(float x) { return fp16_to_f32(fp16_bits(x)); }

// A super-block scale d as stored (fp16 bits) and as read back.
GQ_HD void fp16_store(float d, uint32_t& bits, float& read) {
  bits = fp16_bits(d);
  read = fp16_to_f32(bits);
}

// `if (fabsf(v) > amax) { amax = fabsf(v); max = v; }` from amax = max = 0.
template <int N>
GQ_HD void first_absmax(const float* x, float& amax, float& mx) {
  amax = 0.f;
  mx = 0.f;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const float ax = fabs_(x[i]);
    if (ax > amax) {
      amax = ax;
      mx = x[i];
    }
  }
}

// `float m = 0; for (...) if (v > m) m = v;`
template <int N>
GQ_HD float positive_max(const float* v) {
  float m = 0.f;
#pragma unroll
  for (int i = 0; i < N; ++i)
    if (v[i] > m) m = v[i];
  return m;
}

// ---- the IQ4_NL grid --------------------------------------------------------------------------
// kvalues_iq4nl and best_index_int8 as a table on key = floor(2x) clamped to [-255, 226] (NaN: 226):
// the midpoints of neighbouring grid values are multiples of 1/2, so x >= midpoint is decided by
// floor(2x) (quant.py's _IntGrid). tab.idx[key + 255] is the index, tab.val[key + 255] its value.

constexpr int IQ4_KEY_LO = -255, IQ4_KEY_HI = 226, IQ4_KEYS = IQ4_KEY_HI - IQ4_KEY_LO + 1;

struct Tables {
  const int8_t* val;  // IQ4_KEYS entries
  const uint8_t* idx;
};

GQ_HD int iq4_kvalue(int i) {
  switch (i) {
    case 0: return -127; case 1: return -104; case 2: return -83; case 3: return -65;
    case 4: return -49;  case 5: return -35;  case 6: return -22; case 7: return -10;
    case 8: return 1;    case 9: return 13;   case 10: return 25; case 11: return 38;
    case 12: return 53;  case 13: return 69;  case 14: return 89; default: return 113;
  }
}

// Entry e of the tables (key e - 255): the number of midpoints 2*mid <= key.
GQ_HD int iq4_table_index(int e) {
  const int key = e + IQ4_KEY_LO;
  int n = 0;
  for (int i = 0; i < 15; ++i) n += key >= iq4_kvalue(i) + iq4_kvalue(i + 1);
  return n;
}

GQ_HD int iq4_key(float x) {
  float k = floorf(fmul(x, 2.f));
  if (is_nan(k)) k = (float)IQ4_KEY_HI;
  k = k < (float)IQ4_KEY_LO ? (float)IQ4_KEY_LO : (k > (float)IQ4_KEY_HI ? (float)IQ4_KEY_HI : k);
  return (int)k - IQ4_KEY_LO;
}

// The scale searches' step (make_qx_quants, quantize_row_iq4_nl_impl): keep the fit with sums
// (sumqx, sumq2) if it beats the best so far, `sumq2 > 0 && sumqx*sumqx > best*sumq2`; returns
// whether it did.
GQ_HD bool take_better(float sumqx, float sumq2, float& scale, float& best) {
  if (sumq2 > 0 && fmul(sumqx, sumqx) > fmul(best, sumq2)) {
    scale = fdiv(sumqx, sumq2);
    best = fmul(scale, sumqx);
    return true;
  }
  return false;
}

// IQ4_NL / IQ4_XS: sum w*q*x and sum w*q*q over the 32 elements, q = kvalues_iq4nl[best index of id*x].
GQ_HD void iq4_sums(const float* x, const float* w, float id, const Tables& tab, float& sumqx, float& sumq2) {
  sumqx = 0.f;
  sumq2 = 0.f;
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    const float q = (float)tab.val[iq4_key(fmul(id, x[i]))];
    const float wq = fmul(w[i], q);
    sumqx = fadd(sumqx, fmul(wq, x[i]));
    sumq2 = fadd(sumq2, fmul(wq, q));
  }
}

// Per-32-group scale search of IQ4_NL / IQ4_XS (ntry = 7, weights x*x); 0 for an all-zero group.
GQ_HD float iq4_search(const float* x, const Tables& tab) {
  float amax, mx;
  first_absmax<32>(x, amax, mx);
  if (amax < GROUP_MAX_EPS) return 0.f;
  float w[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) w[i] = fmul(x[i], x[i]);
  float d = fdiv(-mx, -127.f);
  float sumqx, sumq2;
  iq4_sums(x, w, fdiv(1.f, d), tab, sumqx, sumq2);
  d = sumq2 > 0 ? fdiv(sumqx, sumq2) : 0.f;
  float best = fmul(d, sumqx);
#pragma unroll 1
  for (int itry = -7; itry <= 7; ++itry) {
    iq4_sums(x, w, fdiv((float)(itry - 127), mx), tab, sumqx, sumq2);
    take_better(sumqx, sumq2, d, best);
  }
  return d;
}

// ---- make_qkx2_quants (Q2_K, Q4_K, Q5_K) --------------------------------------------------------
// Scale/min search: codes l in [0, nmax] with x ~ scale*l - the_min. The codes of the best fit are
// not stored: they are clamp(nearest_int(l_iscale * (x - l_min))) for the (l_iscale, l_min) that
// produced them (0 * (x - 0) = 0 for a flat group), recomputed when they are needed.

struct Qkx2 {
  float scale, the_min;  // gathered: v0 = scale, v1 = the_min
  float l_iscale, l_min;
};

GQ_HD int qkx2_code(float x, float iscale, float mn, int nmax) {
  return clampi(nearest_int(fmul(iscale, fsub(x, mn))), 0, nmax);
}

template <int N, bool MAD>
GQ_HD Qkx2 make_qkx2(const float* x, const float* w, int nmax, float rmin, float rdelta, int nstep) {
  Qkx2 r;
  float sum_w = w[0];
  float sum_x = fmul(sum_w, x[0]);
  float mn = x[0], mx = x[0];
#pragma unroll
  for (int i = 1; i < N; ++i) {
    sum_w = fadd(sum_w, w[i]);
    sum_x = fadd(sum_x, fmul(w[i], x[i]));
    if (x[i] < mn) mn = x[i];
    if (x[i] > mx) mx = x[i];
  }
  if (mn > 0) mn = 0.f;
  if (mx == mn) {
    r.scale = 0.f;
    r.the_min = -mn;
    r.l_iscale = 0.f;
    r.l_min = 0.f;
    return r;
  }
  float iscale = fdiv((float)nmax, fsub(mx, mn));
  float scale = fdiv(1.f, iscale);
  float best_error = 0.f;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const float l = (float)qkx2_code(x[i], iscale, mn, nmax);
    float diff = fsub(fadd(fmul(scale, l), mn), x[i]);
    diff = MAD ? fabs_(diff) : fmul(diff, diff);
    best_error = fadd(best_error, fmul(w[i], diff));
  }
  r.l_iscale = iscale;
  r.l_min = mn;
#pragma unroll 1
  for (int is = 0; is <= nstep; ++is) {
    const float c = fadd(fadd(rmin, fmul(rdelta, (float)is)), (float)nmax);
    const float isc = fdiv(c, fsub(mx, mn));
    float laux[N];
    float sum_l = 0.f, sum_l2 = 0.f, sum_xl = 0.f;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const float l = (float)qkx2_code(x[i], isc, mn, nmax);
      laux[i] = l;
      const float wl = fmul(w[i], l);
      sum_l = fadd(sum_l, wl);
      sum_l2 = fadd(sum_l2, fmul(wl, l));
      sum_xl = fadd(sum_xl, fmul(wl, x[i]));
    }
    const float D = fsub(fmul(sum_w, sum_l2), fmul(sum_l, sum_l));
    if (D > 0) {
      float this_scale = fdiv(fsub(fmul(sum_w, sum_xl), fmul(sum_x, sum_l)), D);
      float this_min = fdiv(fsub(fmul(sum_l2, sum_x), fmul(sum_l, sum_xl)), D);
      if (this_min > 0) {
        this_min = 0.f;
        this_scale = fdiv(sum_xl, sum_l2);
      }
      float cur_error = 0.f;
#pragma unroll
      for (int i = 0; i < N; ++i) {
        float diff = fsub(fadd(fmul(this_scale, laux[i]), this_min), x[i]);
        diff = MAD ? fabs_(diff) : fmul(diff, diff);
        cur_error = fadd(cur_error, fmul(w[i], diff));
      }
      if (cur_error < best_error) {
        best_error = cur_error;
        scale = this_scale;
        r.l_iscale = isc;
        r.l_min = mn;
        mn = this_min;
      }
    }
  }
  r.scale = scale;
  r.the_min = -mn;
  return r;
}

// ---- per-type operations ----------------------------------------------------------------------

template <int T> struct QOps;

// Geometry of QOps<T>: BLOCK, BYTES (Traits<T>) and S sub-blocks of N elements (S = 1, N = 32: one
// thread per block).
template <int T, int N_ = Traits<T>::BLOCK>
struct QGeom {
  static constexpr int BLOCK = Traits<T>::BLOCK, BYTES = Traits<T>::BYTES, N = N_, S = BLOCK / N_;
};

// 32-element blocks ---------------------------------------------------------------------------

GQ_HD void put16(uint8_t* p, uint32_t v) {
  p[0] = (uint8_t)(v & 0xFF);
  p[1] = (uint8_t)((v >> 8) & 0xFF);
}

// `amax = MAX(amax, fabsf(x[i]))` from 0.
GQ_HD float max_abs32(const float* x) {
  float amax = 0.f;
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    const float a = fabs_(x[i]);
    amax = amax > a ? amax : a;
  }
  return amax;
}

// block_q8_0 (34 bytes): fp16 d, int8 qs[32]; d = max|x|/127, q = roundf(x/d).
template <> struct QOps<Q8_0> : QGeom<Q8_0> {
  static GQ_HD void block(const float* x, uint8_t* out, const Tables&) {
    const float amax = max_abs32(x);
    const float d = fdiv(amax, 127.f);
    const float id = d != 0 ? fdiv(1.f, d) : 0.f;
    put16(out, fp16_bits(d));
#pragma unroll
    for (int i = 0; i < 32; ++i) out[2 + i] = (uint8_t)(c_int(roundf(fmul(x[i], id))) & 0xFF);
  }
};

// Nibble packing of 32 codes: byte j = code j | code j+16 << 4.
GQ_HD void pack_nibbles32(const int* q, uint8_t* out) {
#pragma unroll
  for (int j = 0; j < 16; ++j) out[j] = (uint8_t)((q[j] | (q[j + 16] << 4)) & 0xFF);
}

// Bit 4 of each of 32 codes, little-endian uint32 (element k -> bit k).
GQ_HD void high_bits32(const int* q, uint8_t* out) {
  uint32_t h = 0;
#pragma unroll
  for (int j = 0; j < 32; ++j) h |= (uint32_t)((q[j] >> 4) & 1) << j;
  out[0] = (uint8_t)h;
  out[1] = (uint8_t)(h >> 8);
  out[2] = (uint8_t)(h >> 16);
  out[3] = (uint8_t)(h >> 24);
}

// The codes q of a Q4_* block (qs: nibbles) or a Q5_* block (qh: bit 4 of each code, then qs: the
// low nibbles lo = q & 0xF).
template <int BITS>
GQ_HD void put_codes32(const int* q, const int* lo, uint8_t* out) {
  if constexpr (BITS == 5) {
    high_bits32(q, out);
    pack_nibbles32(lo, out + 4);
  } else {
    pack_nibbles32(q, out);
  }
}

// min and max, first of equals (C: from FLT_MAX / -FLT_MAX, strict comparisons).
GQ_HD void first_min_max32(const float* x, float& mn, float& mx) {
  mn = 3.402823466e38f;
  mx = -3.402823466e38f;
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    if (x[i] < mn) mn = x[i];
    if (x[i] > mx) mx = x[i];
  }
}

// quantize_row_q{4,5}_0_ref, Z = 2^(BITS-1): fp16 d, then the codes; d = max/-Z (max: first element
// of largest magnitude), q = MIN(2Z - 1, (int8_t)(x/d + Z + 0.5f)).
template <int BITS>
struct SymmetricQ {
  static constexpr int Z = 1 << (BITS - 1);
  static GQ_HD void block(const float* x, uint8_t* out, const Tables&) {
    float amax, mx;
    first_absmax<32>(x, amax, mx);
    const float d = fdiv(mx, -(float)Z);
    const float id = d != 0 ? fdiv(1.f, d) : 0.f;
    put16(out, fp16_bits(d));
    int q[32], lo[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int v = as_int8(c_int(fadd(fmul(x[i], id), (float)Z + 0.5f)));
      q[i] = (v < 2 * Z - 1 ? v : 2 * Z - 1) & 0xFF;
      lo[i] = q[i] & 0xF;
    }
    put_codes32<BITS>(q, lo, out + 2);
  }
};

// quantize_row_q{4,5}_1_ref: fp16 d, fp16 m, then the codes; m = min, d = (max - min)/(2^BITS - 1),
// q = (x - m)/d + 0.5f as MIN(15, (int8_t)q) for Q4_1 and as (uint8_t)q for Q5_1 (llama.cpp's
// casts differ).
template <int BITS>
struct AffineQ {
  static constexpr int NMAX = (1 << BITS) - 1;
  static GQ_HD void block(const float* x, uint8_t* out, const Tables&) {
    float mn, mx;
    first_min_max32(x, mn, mx);
    const float d = fdiv(fsub(mx, mn), (float)NMAX);
    const float id = d != 0 ? fdiv(1.f, d) : 0.f;
    put16(out, fp16_bits(d));
    put16(out + 2, fp16_bits(mn));
    int q[32], lo[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int v = c_int(fadd(fmul(fsub(x[i], mn), id), 0.5f));
      if constexpr (BITS == 4) {
        const int v8 = as_int8(v);
        q[i] = (v8 < 15 ? v8 : 15) & 0xFF;
      } else {
        q[i] = v & 0xFF;
      }
      lo[i] = q[i] & 0xF;
    }
    put_codes32<BITS>(q, lo, out + 4);
  }
};

// block_q4_0 (18 bytes): fp16 d, qs[16].
template <> struct QOps<Q4_0> : QGeom<Q4_0>, SymmetricQ<4> {};

// block_q4_1 (20 bytes): fp16 d, fp16 m, qs[16].
template <> struct QOps<Q4_1> : QGeom<Q4_1>, AffineQ<4> {};

// block_q5_0 (22 bytes): fp16 d, qh (bit 4 of each code), qs[16] low nibbles.
template <> struct QOps<Q5_0> : QGeom<Q5_0>, SymmetricQ<5> {};

// block_q5_1 (24 bytes): fp16 d, fp16 m, qh, qs[16].
template <> struct QOps<Q5_1> : QGeom<Q5_1>, AffineQ<5> {};

// block_iq4_nl (18 bytes): fp16 d, qs[16]; x = d * kvalues_iq4nl[q]; the codes use the unrounded d.
template <> struct QOps<IQ4_NL> : QGeom<IQ4_NL> {
  static GQ_HD void block(const float* x, uint8_t* out, const Tables& tab) {
    const float d = iq4_search(x, tab);
    const float id = d != 0 ? fdiv(1.f, d) : 0.f;
    put16(out, fp16_bits(d));
    int q[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) q[i] = tab.idx[iq4_key(fmul(x[i], id))];
    pack_nibbles32(q, out + 2);
  }
};

// block_mxfp4 (17 bytes): e8m0 exponent e, qs[16] e2m1 codes; e = floor(log2(max|x|)) - 2 + 127,
// q the nearest e2m1 value of x / 2^(e-128) (first code on ties), counted by midpoints of ceil(2a).
template <> struct QOps<MXFP4> : QGeom<MXFP4> {
  static GQ_HD void block(const float* x, uint8_t* out, const Tables&) {
    const float amax = max_abs32(x);
    int e = 0;
    if (amax > 0) {
      // floorf(log2f(amax)) with log2 correctly rounded to float (through double, as quant.py).
      const float lg = floorf((float)log2((double)amax));
      e = c_int(fadd(fsub(lg, 2.f), 127.f)) & 0xFF;
    }
    const float d = as_float(e < 2 ? (0x00200000u << e) : ((uint32_t)(e - 1) << 23));  // 2^(e-128)
    out[0] = (uint8_t)e;
    int q[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      float a2 = ceilf(fmul(fdiv(fabs_(x[i]), d), 2.f));
      a2 = a2 < 0.f ? 0.f : (a2 > 25.f ? 25.f : a2);
      const int k = (int)a2;
      const int mag = (k > 1) + (k > 3) + (k > 5) + (k > 7) + (k > 10) + (k > 14) + (k > 20);
      q[i] = (x[i] < 0 && mag > 0) ? mag + 8 : mag;
    }
    pack_nibbles32(q, out + 1);
  }
};

// 256-element super-blocks ---------------------------------------------------------------------

// v0 / v1: the per-sub-block values super() gathers, the scale and (MIN) the min, else 0.
template <bool MIN>
struct Gather {
  template <typename Sub> static GQ_HD float v0(const Sub& s) { return s.scale; }
  template <typename Sub> static GQ_HD float v1(const Sub& s) {
    if constexpr (MIN) return s.the_min;
    else return 0.f;
  }
};

// Final codes of an asymmetric sub-block (Q2_K, Q4_K, Q5_K): clamp(nearest_int((x + ml) / dl)) with the
// super-block's scale dl and min ml, or, when dl is 0, the codes of the search's best fit.
template <int N, int NMAX>
GQ_HD void qkx2_final_codes(const float* x, float dl, float ml, const Qkx2& s, uint8_t* c) {
  if (dl != 0) {
#pragma unroll
    for (int i = 0; i < N; ++i) c[i] = (uint8_t)clampi(nearest_int(fdiv(fadd(x[i], ml), dl)), 0, NMAX);
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) c[i] = (uint8_t)qkx2_code(x[i], s.l_iscale, s.l_min, NMAX);
  }
}

// A symmetric code (Q3_K: Z = 4, Q6_K: Z = 32): clamp(nearest_int(v), -Z, Z - 1) + Z.
template <int Z>
GQ_HD uint8_t sym_code(float v) { return (uint8_t)(clampi(nearest_int(v), -Z, Z - 1) + Z); }

// Four 2-bit fields (c >> SH) & MASK of codes k, k + 32, k + 64, k + 96 in bits 0-1, 2-3, 4-5, 6-7
// (Q2_K / Q3_K qs: the low two bits, MASK 3; Q6_K qh: the high two bits of its 6-bit codes, MASK
// 0xFF as none is needed). Returned as int, narrowed by the caller (which keeps the generated code).
template <int SH, int MASK>
GQ_HD int pack2x4(const uint8_t* c, int k) {
  return ((c[k] >> SH) & MASK) | (((c[k + 32] >> SH) & MASK) << 2) | (((c[k + 64] >> SH) & MASK) << 4) |
         (((c[k + 96] >> SH) & MASK) << 6);
}

// Bit BIT of codes j, j + 32, ..., j + 224 as bits 0..7 (Q3_K hmask, Q5_K qh).
template <int BIT>
GQ_HD uint32_t bit_column(const uint8_t* c, int j) {
  uint32_t h = 0;
#pragma unroll
  for (int k = 0; k < 8; ++k) h |= (uint32_t)((c[32 * k + j] >> BIT) & 1) << k;
  return h;
}

// Q4_K / Q5_K share the scale/min part (quantize_row_q{4,5}_K_ref).
struct K4Super {
  uint32_t d_bits, dmin_bits;
  int ls[8], lm[8];
};

template <int NMAX, int NSTEP>
struct K4Common : Gather<true> {
  static constexpr float RMIN = NMAX == 15 ? -1.f : -0.5f;
  using Sub = Qkx2;
  using Super = K4Super;
  static GQ_HD Sub search(const float* x, const Tables&) {
    float sumx2 = 0.f;
#pragma unroll
    for (int i = 0; i < 32; ++i) sumx2 = fadd(sumx2, fmul(x[i], x[i]));
    const float av_x = fsqrt(fdiv(sumx2, 32.f));
    float w[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) w[i] = fadd(av_x, fabs_(x[i]));
    return make_qkx2<32, false>(x, w, NMAX, RMIN, 0.1f, NSTEP);
  }
  static GQ_HD void super(const float* scales, const float* mins, K4Super& sp) {
    const float max_scale = positive_max<8>(scales), max_min = positive_max<8>(mins);
    const float inv_scale = max_scale > 0 ? fdiv(63.f, max_scale) : 0.f;
    const float inv_min = max_min > 0 ? fdiv(63.f, max_min) : 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int ls = nearest_int(fmul(inv_scale, scales[j])) & 0xFF;
      const int lm = nearest_int(fmul(inv_min, mins[j])) & 0xFF;
      sp.ls[j] = ls < 63 ? ls : 63;
      sp.lm[j] = lm < 63 ? lm : 63;
    }
    sp.d_bits = fp16_bits(fdiv(max_scale, 63.f));
    sp.dmin_bits = fp16_bits(fdiv(max_min, 63.f));
  }
  static GQ_HD void codes(const float* x, int j, const Sub& s, const K4Super& sp, uint8_t* c, const Tables&) {
    const float dl = fmul(fp16_to_f32(sp.d_bits), (float)sp.ls[j]);
    const float ml = fmul(fp16_to_f32(sp.dmin_bits), (float)sp.lm[j]);
    qkx2_final_codes<32, NMAX>(x, dl, ml, s, c);
  }
  // Header: d, dmin, scales[12] (6-bit scale/min pairs).
  static GQ_HD uint8_t header_byte(int b, const K4Super& sp) {
    if (b < 2) return (uint8_t)(sp.d_bits >> (8 * b));
    if (b < 4) return (uint8_t)(sp.dmin_bits >> (8 * (b - 2)));
    const int k = b - 4;
    if (k < 4) return (uint8_t)(sp.ls[k] | ((sp.ls[k + 4] >> 4) << 6));
    if (k < 8) return (uint8_t)(sp.lm[k - 4] | ((sp.lm[k] >> 4) << 6));
    return (uint8_t)((sp.ls[k - 4] & 0xF) | ((sp.lm[k - 4] & 0xF) << 4));
  }
  // qs byte 32c + l: element 64c + l (low nibble) | 64c + 32 + l (high nibble).
  static GQ_HD uint8_t qs_byte(int k, const uint8_t* c) {
    const int base = 64 * (k >> 5) + (k & 31);
    return (uint8_t)((c[base] & 0xF) | ((c[base + 32] & 0xF) << 4));
  }
};

// block_q4_K (144 bytes): fp16 d, fp16 dmin, scales[12], qs[128].
template <> struct QOps<Q4_K> : QGeom<Q4_K, 32>, K4Common<15, 20> {
  static GQ_HD uint8_t byte(int b, const uint8_t* c, const K4Super& sp) {
    return b < 16 ? header_byte(b, sp) : qs_byte(b - 16, c);
  }
};

// block_q5_K (176 bytes): fp16 d, fp16 dmin, scales[12], qh[32] (bit k of qh[j]: bit 4 of
// element 32k + j), qs[128] low nibbles as Q4_K.
template <> struct QOps<Q5_K> : QGeom<Q5_K, 32>, K4Common<31, 15> {
  static GQ_HD uint8_t byte(int b, const uint8_t* c, const K4Super& sp) {
    if (b < 16) return header_byte(b, sp);
    if (b < 48) return (uint8_t)bit_column<4>(c, b - 16);
    return qs_byte(b - 48, c);
  }
};

// Symmetric searches of Q6_K (make_qx_quants, rmse_type 1) and Q3_K (make_q3_quants with rmse).
struct Qx {
  float scale;     // gathered: v0
  float l_iscale;  // the codes of the best fit: clamp(nearest_int(l_iscale * x)) + nmax
  bool zero;       // all-zero group: codes 0
};

// block_q6_K (210 bytes): ql[128], qh[64], int8 scales[16], fp16 d; 16 groups of 16.
struct Q6Super {
  uint32_t d_bits;
  float d_read;
  int sc[16];  // int8 values
  bool zero;   // the whole block is zero bytes
};

// Q6_K's search: sum w*x*l and sum w*l*l over the 16 elements, l = clamp(nearest_int(iscale*x), -32, 31).
GQ_HD void q6_sums(const float* x, const float* w, const float* wx, float iscale, float& sumlx, float& suml2) {
  sumlx = 0.f;
  suml2 = 0.f;
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const float l = (float)clampi(nearest_int(fmul(iscale, x[i])), -32, 31);
    sumlx = fadd(sumlx, fmul(wx[i], l));
    suml2 = fadd(suml2, fmul(fmul(w[i], l), l));
  }
}

template <> struct QOps<Q6_K> : QGeom<Q6_K, 16>, Gather<false> {
  using Sub = Qx;
  using Super = Q6Super;
  static GQ_HD Sub search(const float* x, const Tables&) {
    Sub r;
    float amax, mx;
    first_absmax<16>(x, amax, mx);
    r.zero = amax < GROUP_MAX_EPS;
    r.scale = 0.f;
    r.l_iscale = 0.f;
    if (r.zero) return r;
    float w[16], wx[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      w[i] = fmul(x[i], x[i]);
      wx[i] = fmul(w[i], x[i]);
    }
    float iscale = fdiv(-32.f, mx);
    float sumlx, suml2;
    q6_sums(x, w, wx, iscale, sumlx, suml2);
    float scale = suml2 != 0 ? fdiv(sumlx, suml2) : 0.f;
    float best = fmul(scale, sumlx);
    r.l_iscale = iscale;
#pragma unroll 1
    for (int is = -9; is <= 9; ++is) {
      if (is == 0) continue;
      iscale = fdiv(-fadd(32.f, fmul(0.1f, (float)is)), mx);
      q6_sums(x, w, wx, iscale, sumlx, suml2);
      if (take_better(sumlx, suml2, scale, best)) r.l_iscale = iscale;
    }
    r.scale = scale;
    return r;
  }
  static GQ_HD void super(const float* scales, const float*, Q6Super& sp) {
    float abs_max, max_scale;
    first_absmax<16>(scales, abs_max, max_scale);
    sp.zero = abs_max < GROUP_MAX_EPS;
    const float iscale = fdiv(-128.f, max_scale);
    const float d = fdiv(1.f, iscale);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const int v = nearest_int(fmul(iscale, scales[j]));
      sp.sc[j] = as_int8(v < 127 ? v : 127);
    }
    fp16_store(d, sp.d_bits, sp.d_read);
  }
  static GQ_HD void codes(const float* x, int j, const Sub& s, const Q6Super& sp, uint8_t* c, const Tables&) {
    const float dl = fmul(sp.d_read, (float)sp.sc[j]);
    if (dl != 0) {
#pragma unroll
      for (int i = 0; i < 16; ++i) c[i] = sym_code<32>(fdiv(x[i], dl));
    } else {
#pragma unroll
      for (int i = 0; i < 16; ++i) c[i] = s.zero ? 0 : sym_code<32>(fmul(s.l_iscale, x[i]));
    }
  }
  // Per 128-element half h: ql[64h + l] = c[128h + l] | c[128h + 64 + l] << 4,
  // ql[64h + 32 + l] = c[128h + 32 + l] | c[128h + 96 + l] << 4 (low nibbles);
  // qh[32h + l] = the high 2-bit pairs of c[128h + l], +32, +64, +96.
  static GQ_HD uint8_t byte(int b, const uint8_t* c, const Q6Super& sp) {
    if (sp.zero) return 0;
    if (b < 128) {
      const int h = b >> 6, k = b & 63;
      const int base = 128 * h + (k & 31) + (k >= 32 ? 32 : 0);
      return (uint8_t)((c[base] & 0xF) | ((c[base + 64] & 0xF) << 4));
    }
    if (b < 192) {
      const int k = b - 128, base = 128 * (k >> 5) + (k & 31);
      return (uint8_t)pack2x4<4, 0xFF>(c, base);
    }
    if (b < 208) return (uint8_t)(sp.sc[b - 192] & 0xFF);
    return (uint8_t)(sp.d_bits >> (8 * (b - 208)));
  }
};

// block_q3_K (110 bytes): hmask[32], qs[64], scales[12], fp16 d; 16 groups of 16, codes 0..7.
struct Q3Sub {
  float scale;
  uint8_t L[16];  // codes of the search (l + 4; 0 for an all-zero group)
};
struct Q3Super {
  uint32_t d_bits;
  float d_read;
  int l[16];  // stored 6-bit scales (scale + 32)
};

template <> struct QOps<Q3_K> : QGeom<Q3_K, 16>, Gather<false> {
  using Sub = Q3Sub;
  using Super = Q3Super;
  static GQ_HD Sub search(const float* x, const Tables&) {
    Sub r;
    float amax, mx;
    first_absmax<16>(x, amax, mx);
    if (amax < GROUP_MAX_EPS) {
      r.scale = 0.f;
#pragma unroll
      for (int i = 0; i < 16; ++i) r.L[i] = 0;
      return r;
    }
    float w[16], wx[16], L[16];
    const float iscale = fdiv(-4.f, mx);
    float sumlx = 0.f, suml2 = 0.f;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      w[i] = fmul(x[i], x[i]);
      wx[i] = fmul(w[i], x[i]);
      L[i] = (float)clampi(nearest_int(fmul(iscale, x[i])), -4, 3);
      sumlx = fadd(sumlx, fmul(wx[i], L[i]));
      suml2 = fadd(suml2, fmul(fmul(w[i], L[i]), L[i]));
    }
#pragma unroll 1
    for (int pass = 0; pass < 5; ++pass) {
      int changed = 0;
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        float slx = fsub(sumlx, fmul(wx[i], L[i]));
        if (slx > 0) {
          float sl2 = fsub(suml2, fmul(fmul(w[i], L[i]), L[i]));
          const float new_l = (float)clampi(nearest_int(fdiv(fmul(x[i], sl2), slx)), -4, 3);
          if (new_l != L[i]) {
            slx = fadd(slx, fmul(wx[i], new_l));
            sl2 = fadd(sl2, fmul(fmul(w[i], new_l), new_l));
            if (sl2 > 0 && fmul(fmul(slx, slx), suml2) > fmul(fmul(sumlx, sumlx), sl2)) {
              L[i] = new_l;
              sumlx = slx;
              suml2 = sl2;
              ++changed;
            }
          }
        }
      }
      if (!changed) break;
    }
    r.scale = suml2 > 0 ? fdiv(sumlx, suml2) : 0.f;
#pragma unroll
    for (int i = 0; i < 16; ++i) r.L[i] = (uint8_t)((int)L[i] + 4);
    return r;
  }
  static GQ_HD void super(const float* scales, const float*, Q3Super& sp) {
    float amax, max_scale;
    first_absmax<16>(scales, amax, max_scale);
    const bool nonzero = max_scale != 0;
    const float iscale = nonzero ? fdiv(-32.f, max_scale) : 0.f;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const int v = clampi(as_int8(nearest_int(fmul(iscale, scales[j]))), -32, 31) + 32;
      sp.l[j] = nonzero ? v : 0;
    }
    const float d = nonzero ? fdiv(1.f, iscale) : 0.f;
    fp16_store(d, sp.d_bits, sp.d_read);
  }
  static GQ_HD void codes(const float* x, int j, const Sub& s, const Q3Super& sp, uint8_t* c, const Tables&) {
    const float dl = fmul(sp.d_read, (float)(sp.l[j] - 32));
    if (dl != 0) {
#pragma unroll
      for (int i = 0; i < 16; ++i) c[i] = sym_code<4>(fdiv(x[i], dl));
    } else {
#pragma unroll
      for (int i = 0; i < 16; ++i) c[i] = s.L[i];
    }
  }
  static GQ_HD uint8_t byte(int b, const uint8_t* c, const Q3Super& sp) {
    if (b < 32) return (uint8_t)bit_column<2>(c, b);  // hmask[m]: bit k = bit 2 of element 32k + m
    if (b < 96) {  // qs[32h + l]: low 2 bits of elements 128h + l, +32, +64, +96
      const int k = b - 32, base = 128 * (k >> 5) + (k & 31);
      return (uint8_t)pack2x4<0, 3>(c, base);
    }
    if (b < 104) {  // low nibbles of scale j (low) and j + 8 (high)
      const int j = b - 96;
      return (uint8_t)((sp.l[j] & 0xF) | ((sp.l[j + 8] & 0xF) << 4));
    }
    if (b < 108) {  // high 2 bits of scales m, m+4, m+8, m+12
      const int m = b - 104;
      return (uint8_t)((sp.l[m] >> 4) | ((sp.l[m + 4] >> 4) << 2) | ((sp.l[m + 8] >> 4) << 4) |
                       ((sp.l[m + 12] >> 4) << 6));
    }
    return (uint8_t)(sp.d_bits >> (8 * (b - 108)));
  }
};

// block_q2_K (84 bytes): scales[16] (scale | min << 4), qs[64], fp16 d, fp16 dmin; groups of 16.
struct Q2Super {
  uint32_t d_bits, dmin_bits;
  float d_read, dmin_read;
  int s[16];
};

template <> struct QOps<Q2_K> : QGeom<Q2_K, 16>, Gather<true> {
  using Sub = Qkx2;
  using Super = Q2Super;
  static GQ_HD Sub search(const float* x, const Tables&) {
    float w[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) w[i] = fabs_(x[i]);
    return make_qkx2<16, true>(x, w, 3, -0.5f, 0.1f, 15);
  }
  static GQ_HD void super(const float* scales, const float* mins, Q2Super& sp) {
    const float max_scale = positive_max<16>(scales), max_min = positive_max<16>(mins);
    const float isc = max_scale > 0 ? fdiv(15.f, max_scale) : 0.f;
    const float imn = max_min > 0 ? fdiv(15.f, max_min) : 0.f;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const int ls = max_scale > 0 ? nearest_int(fmul(isc, scales[j])) : 0;
      const int lm = max_min > 0 ? (int)((uint32_t)nearest_int(fmul(imn, mins[j])) << 4) : 0;
      sp.s[j] = (ls | lm) & 0xFF;
    }
    sp.d_bits = fp16_bits(max_scale > 0 ? fdiv(max_scale, 15.f) : 0.f);
    sp.dmin_bits = fp16_bits(max_min > 0 ? fdiv(max_min, 15.f) : 0.f);
    sp.d_read = fp16_to_f32(sp.d_bits);
    sp.dmin_read = fp16_to_f32(sp.dmin_bits);
  }
  static GQ_HD void codes(const float* x, int j, const Sub& s, const Q2Super& sp, uint8_t* c, const Tables&) {
    const float dl = fmul(sp.d_read, (float)(sp.s[j] & 0xF));
    const float ml = fmul(sp.dmin_read, (float)(sp.s[j] >> 4));
    qkx2_final_codes<16, 3>(x, dl, ml, s, c);
  }
  static GQ_HD uint8_t byte(int b, const uint8_t* c, const Q2Super& sp) {
    if (b < 16) return (uint8_t)sp.s[b];
    if (b < 80) {
      const int k = b - 16, base = 128 * (k >> 5) + (k & 31);
      return (uint8_t)pack2x4<0, 3>(c, base);
    }
    if (b < 82) return (uint8_t)(sp.d_bits >> (8 * (b - 80)));
    return (uint8_t)(sp.dmin_bits >> (8 * (b - 82)));
  }
};

// block_iq4_xs (136 bytes): fp16 d, uint16 scales_h, scales_l[4], qs[128]; groups of 32,
// x = d*(s_j - 32) * kvalues_iq4nl[q]; the codes use the unrounded d.
struct IQ4XSSuper {
  float d;
  uint32_t d_bits;
  int l[8];  // l_j + 32 (6 bits)
};

template <> struct QOps<IQ4_XS> : QGeom<IQ4_XS, 32>, Gather<false> {
  struct Sub {
    float scale;
  };
  using Super = IQ4XSSuper;
  static GQ_HD Sub search(const float* x, const Tables& tab) { return Sub{iq4_search(x, tab)}; }
  static GQ_HD void super(const float* scales, const float*, IQ4XSSuper& sp) {
    float amax, max_scale;
    first_absmax<8>(scales, amax, max_scale);
    sp.d = fdiv(-max_scale, 32.f);
    const float id = sp.d != 0 ? fdiv(1.f, sp.d) : 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j) sp.l[j] = clampi(nearest_int(fmul(id, scales[j])), -32, 31) + 32;
    sp.d_bits = fp16_bits(sp.d);
  }
  static GQ_HD void codes(const float* x, int j, const Sub&, const IQ4XSSuper& sp, uint8_t* c, const Tables& tab) {
    const float dl = fmul(sp.d, (float)(sp.l[j] - 32));
    const float idl = dl != 0 ? fdiv(1.f, dl) : 0.f;
#pragma unroll
    for (int i = 0; i < 32; ++i) c[i] = tab.idx[iq4_key(fmul(x[i], idl))];
  }
  static GQ_HD uint8_t byte(int b, const uint8_t* c, const IQ4XSSuper& sp) {
    if (b < 2) return (uint8_t)(sp.d_bits >> (8 * b));
    if (b < 4) {
      uint32_t h = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) h |= (uint32_t)(sp.l[j] >> 4) << (2 * j);
      return (uint8_t)(h >> (8 * (b - 2)));
    }
    if (b < 8) {
      const int k = b - 4;
      return (uint8_t)((sp.l[2 * k] & 0xF) | ((sp.l[2 * k + 1] & 0xF) << 4));
    }
    const int k = b - 8, g = k >> 4, l = k & 15;
    return (uint8_t)((c[32 * g + l] & 0xF) | ((c[32 * g + l + 16] & 0xF) << 4));
  }
};

// Which types have a quantizer here (GQ_FOR_EACH_QUANT_TYPE of qtypes.h).
GQ_HD constexpr bool quantize_supported(int t) {
#define GQ_IS(T) t == T ||
  return GQ_FOR_EACH_QUANT_TYPE(GQ_IS) false;
#undef GQ_IS
}

}  // namespace qz
}  // namespace gq
