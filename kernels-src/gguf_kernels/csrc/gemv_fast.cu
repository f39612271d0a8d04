// Type dispatch of the fast small-M matmul (instantiations in fast_*.cu).
#include "launch.h"

namespace gq {

#define GQ_FAST_TYPES(X) X(Q4_0) X(Q8_0) X(Q4_K) X(Q5_K) X(Q6_K) X(IQ4_XS) X(MXFP4)

cudaError_t launch_gemv_stream_any(int qtype, const GemvArgs& a, DType xt, cudaStream_t stream) {
  switch (qtype) {
#define GQ_CASE(T) \
  case T: return launch_gemv_stream<T>(a, xt, stream);
    GQ_FAST_TYPES(GQ_CASE)
#undef GQ_CASE
  }
  return cudaErrorNotSupported;
}

size_t gemv_fast_scratch_any(int qtype, int K, int M, int64_t row_bytes) {
  switch (qtype) {
#define GQ_CASE(T) \
  case T: return gemv_fast_scratch<T>(K, M, row_bytes);
    GQ_FAST_TYPES(GQ_CASE)
#undef GQ_CASE
  }
  return 0;
}

cudaError_t launch_gemv_fast_any(int qtype, const GemvArgs& a, DType xt, void* scratch, size_t scratch_bytes,
                                 cudaStream_t stream) {
  switch (qtype) {
#define GQ_CASE(T) \
  case T: return launch_gemv_fast<T>(a, xt, scratch, scratch_bytes, stream);
    GQ_FAST_TYPES(GQ_CASE)
#undef GQ_CASE
  }
  return cudaErrorNotSupported;
}

size_t tile_fast_scratch_any(int qtype, int N, int K, int M, int64_t row_bytes) {
  switch (qtype) {
#define GQ_CASE(T) \
  case T: return tile_fast_scratch<T>(N, K, M, row_bytes);
    GQ_FAST_TYPES(GQ_CASE)
#undef GQ_CASE
  }
  return 0;
}

cudaError_t launch_tile_fast_any(int qtype, const GemvArgs& a, DType xt, void* scratch, size_t scratch_bytes,
                                 cudaStream_t stream) {
  switch (qtype) {
#define GQ_CASE(T) \
  case T: return launch_tile_fast<T>(a, xt, scratch, scratch_bytes, stream);
    GQ_FAST_TYPES(GQ_CASE)
#undef GQ_CASE
  }
  return cudaErrorNotSupported;
}

cudaError_t launch_gemv_fast_moe_any(int qtype, const GemvArgs& a, DType xt, int P, int min_chunks,
                                     cudaStream_t stream) {
  switch (qtype) {
#define GQ_CASE(T) \
  case T: return launch_gemv_fast_moe<T>(a, xt, P, min_chunks, stream);
    GQ_FAST_TYPES(GQ_CASE)
#undef GQ_CASE
  }
  return cudaErrorNotSupported;
}

}  // namespace gq
