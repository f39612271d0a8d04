// Q4_0: fast small-M and tile matmul instantiation (gemv_fast.cuh).
#include "tile_fast_kernel.cuh"

namespace gq {
GQ_FAST_INSTANTIATE(Q4_0)
GQ_TILE_FAST_INSTANTIATE(Q4_0)
}  // namespace gq
