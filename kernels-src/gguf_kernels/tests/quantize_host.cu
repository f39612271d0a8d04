// The block quantizers of csrc/quantize_blocks.cuh compiled for the host, so they can be checked
// byte for byte against libggml's ggml_quantize_chunk on a machine without a GPU
// (tests/test_quantize_kernels.py builds this with
//   nvcc -O2 -std=c++17 -fmad=false -shared -Xcompiler -fPIC,-ffp-contract=off).
// The phases of the 256-element types run here in loops, in the order the kernel runs them on
// its lanes (csrc/quantize_kernel.cuh).
#include "../csrc/quantize_blocks.cuh"

using namespace gq;
using namespace gq::qz;

namespace {

int8_t g_val[IQ4_KEYS];
uint8_t g_idx[IQ4_KEYS];

Tables tables() {
  static bool init = false;
  if (!init) {
    for (int e = 0; e < IQ4_KEYS; ++e) {
      const int i = iq4_table_index(e);
      g_idx[e] = (uint8_t)i;
      g_val[e] = (int8_t)iq4_kvalue(i);
    }
    init = true;
  }
  return Tables{g_val, g_idx};
}

template <int T>
void run(const float* x, int64_t nblocks, uint8_t* out) {
  using O = QOps<T>;
  const Tables tab = tables();
  if constexpr (O::S == 1) {
    for (int64_t b = 0; b < nblocks; ++b) O::block(x + b * O::BLOCK, out + b * O::BYTES, tab);
  } else {
    constexpr int S = O::S, N = O::N;
    for (int64_t b = 0; b < nblocks; ++b) {
      const float* xb = x + b * O::BLOCK;
      typename O::Sub subs[S];
      float v0[S], v1[S];
      for (int j = 0; j < S; ++j) {
        subs[j] = O::search(xb + j * N, tab);
        v0[j] = O::v0(subs[j]);
        v1[j] = O::v1(subs[j]);
      }
      typename O::Super sp;
      O::super(v0, v1, sp);
      uint8_t codes[256];
      for (int j = 0; j < S; ++j) O::codes(xb + j * N, j, subs[j], sp, codes + j * N, tab);
      for (int k = 0; k < O::BYTES; ++k) out[b * O::BYTES + k] = O::byte(k, codes, sp);
    }
  }
}

}  // namespace

// Quantize `nblocks` consecutive blocks of type `t` (ggml type id). Returns 0, or 1 for a type
// without a quantizer here.
extern "C" int quantize_blocks_host(int t, const float* x, int64_t nblocks, uint8_t* out) {
  switch (t) {
#define GQ_CASE(X) \
  case X: run<X>(x, nblocks, out); return 0;
    GQ_CASE(Q4_0) GQ_CASE(Q4_1) GQ_CASE(Q5_0) GQ_CASE(Q5_1) GQ_CASE(Q8_0) GQ_CASE(Q2_K) GQ_CASE(Q3_K)
    GQ_CASE(Q4_K) GQ_CASE(Q5_K) GQ_CASE(Q6_K) GQ_CASE(IQ4_NL) GQ_CASE(IQ4_XS) GQ_CASE(MXFP4)
#undef GQ_CASE
  }
  return 1;
}

// The fp16 conversions, for an exhaustive check against numpy.
extern "C" void fp16_bits_host(const float* x, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = (uint16_t)fp16_bits(x[i]);
}
extern "C" void fp16_to_f32_host(const uint16_t* h, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = fp16_to_f32(h[i]);
}
