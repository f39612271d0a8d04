// Q2_K: dequantize + small-M and tile matmul instantiations (decoder in ggml_blocks.cuh).
#include "tile_kernel.cuh"

namespace gq {
GQ_INSTANTIATE(Q2_K)
GQ_INSTANTIATE_TILE(Q2_K)
}  // namespace gq
