// Q4_K: fast small-M matmul instantiation (gemv_fast.cuh).
#include "gemv_fast_launch.cuh"

namespace gq {
GQ_FAST_INSTANTIATE(Q4_K)
}  // namespace gq
