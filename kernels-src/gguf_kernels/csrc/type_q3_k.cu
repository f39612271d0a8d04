// Q3_K: dequantize + small-M and tile matmul instantiations (decoder in ggml_blocks.cuh).
#include "tile_kernel.cuh"

namespace gq {
GQ_INSTANTIATE(Q3_K)
GQ_INSTANTIATE_TILE(Q3_K)
}  // namespace gq
