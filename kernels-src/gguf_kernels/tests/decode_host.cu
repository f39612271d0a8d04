// The block decoders of csrc/ggml_blocks.cuh compiled for the host, so they can be checked
// against gguf-py on a machine without a GPU (tests/test_kernel_loader.py builds this with
// `nvcc -shared` when nvcc is on PATH).
#include "../csrc/iq_blocks.cuh"

using namespace gq;

template <int T>
static void run(const uint8_t* data, int rows, int row_bytes, int K, float* out) {
  const int nunits = (K + 63) / 64;
  for (int r = 0; r < rows; ++r)
    for (int u = 0; u < nunits; ++u)
      for (int p = 0; p < 4; ++p) {
        float v[16];
        const bool full = u * 64 + 64 <= K;
        decode<T>(data + (size_t)r * row_bytes, u, p, full, v);
        for (int q = 0; q < 4; ++q)
          for (int i = 0; i < 4; ++i) {
            const int e = u * 64 + 16 * q + 4 * p + i;
            if (e < K) out[(size_t)r * K + e] = v[4 * q + i];
          }
      }
}

extern "C" int decode_rows(int t, const uint8_t* d, int rows, int rb, int K, float* out) {
  switch (t) {
#define GQ_CASE(X) \
  case X: run<X>(d, rows, rb, K, out); return 0;
    GQ_CASE(Q4_0) GQ_CASE(Q4_1) GQ_CASE(Q5_0) GQ_CASE(Q5_1) GQ_CASE(Q8_0) GQ_CASE(Q2_K) GQ_CASE(Q3_K)
    GQ_CASE(Q4_K) GQ_CASE(Q5_K) GQ_CASE(Q6_K) GQ_CASE(IQ4_NL) GQ_CASE(IQ4_XS) GQ_CASE(MXFP4)
    GQ_CASE(NVFP4) GQ_CASE(IQ2_XXS) GQ_CASE(IQ2_XS) GQ_CASE(IQ2_S) GQ_CASE(IQ3_XXS) GQ_CASE(IQ3_S) GQ_CASE(IQ1_S)
    GQ_CASE(IQ1_M)
#undef GQ_CASE
  }
  return 1;
}

// The bf16 pairs of kvalues_iq4nl that the tile kernel's IQ4_XS decode builds from qs words (iq4_bf16_pairs), for
// words[i]: out[4i + j] = v[j].
extern "C" void iq4_bf16_pairs_of(const uint32_t* words, int n, uint32_t* out) {
  for (int i = 0; i < n; ++i) {
    uint32_t v[4];
    iq4_bf16_pairs(words[i], 0u, v);
    for (int j = 0; j < 4; ++j) out[4 * i + j] = v[j];
  }
}
