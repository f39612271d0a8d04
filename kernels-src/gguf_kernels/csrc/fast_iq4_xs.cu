// IQ4_XS: fast small-M matmul instantiation (gemv_fast.cuh).
#include "gemv_fast_launch.cuh"

namespace gq {
GQ_FAST_INSTANTIATE(IQ4_XS)
}  // namespace gq
