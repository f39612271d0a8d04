// Type dispatch of the fast small-M matmul (instantiations in fast_*.cu).
#include <type_traits>

#include "launch.h"

namespace gq {

// f(std::integral_constant<int, T>{}) for the fast path's type T that qtype names, `otherwise` for any other.
template <class R, class F>
R with_fast_type(int qtype, R otherwise, F&& f) {
  switch (qtype) {
#define GQ_CASE(T) \
  case T: return f(std::integral_constant<int, T>{});
    GQ_CASE(Q4_0) GQ_CASE(Q8_0) GQ_CASE(Q4_K) GQ_CASE(Q5_K) GQ_CASE(Q6_K) GQ_CASE(IQ4_XS) GQ_CASE(MXFP4)
#undef GQ_CASE
  }
  return otherwise;
}

cudaError_t launch_gemv_stream_any(int qtype, const GemvArgs& a, DType xt, cudaStream_t stream) {
  return with_fast_type(qtype, cudaErrorNotSupported,
                        [&](auto t) { return launch_gemv_stream<decltype(t)::value>(a, xt, stream); });
}

size_t gemv_stream_ks_part_any(int qtype, int N, int K, int M) {
  return with_fast_type(qtype, (size_t)0, [&](auto t) { return gemv_stream_ks_part<decltype(t)::value>(N, K, M); });
}

size_t gemv_fast_scratch_any(int qtype, int K, int M, int64_t row_bytes) {
  return with_fast_type(qtype, (size_t)0, [&](auto t) { return gemv_fast_scratch<decltype(t)::value>(K, M, row_bytes); });
}

cudaError_t launch_gemv_fast_any(int qtype, const GemvArgs& a, DType xt, void* scratch, size_t scratch_bytes,
                                 cudaStream_t stream) {
  return with_fast_type(qtype, cudaErrorNotSupported, [&](auto t) {
    return launch_gemv_fast<decltype(t)::value>(a, xt, scratch, scratch_bytes, stream);
  });
}

cudaError_t launch_gemv_fast_moe_any(int qtype, const GemvArgs& a, DType xt, int P, int min_chunks,
                                     cudaStream_t stream) {
  return with_fast_type(qtype, cudaErrorNotSupported, [&](auto t) {
    return launch_gemv_fast_moe<decltype(t)::value>(a, xt, P, min_chunks, stream);
  });
}

}  // namespace gq
