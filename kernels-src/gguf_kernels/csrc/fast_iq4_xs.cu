// IQ4_XS: fast small-M and tile matmul instantiation (gemv_fast.cuh).
#include "tile_fast_kernel.cuh"

namespace gq {
GQ_FAST_INSTANTIATE(IQ4_XS)
GQ_TILE_FAST_INSTANTIATE(IQ4_XS)
}  // namespace gq
