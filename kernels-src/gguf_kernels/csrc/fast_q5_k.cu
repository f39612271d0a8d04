// Q5_K: fast small-M and tile matmul instantiation (gemv_fast.cuh).
#include "tile_fast_kernel.cuh"

namespace gq {
GQ_FAST_INSTANTIATE(Q5_K)
GQ_TILE_FAST_INSTANTIATE(Q5_K)
}  // namespace gq
