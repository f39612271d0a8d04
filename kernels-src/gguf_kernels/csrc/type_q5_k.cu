// Q5_K: dequantize + small-M and tile matmul instantiations (decoder in ggml_blocks.cuh).
#include "tile_kernel.cuh"

namespace gq {
GQ_INSTANTIATE(Q5_K)
GQ_INSTANTIATE_TILE(Q5_K)
}  // namespace gq
