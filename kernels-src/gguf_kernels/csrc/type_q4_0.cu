// Q4_0: dequantize + small-M and tile matmul instantiations (decoder in ggml_blocks.cuh).
#include "tile_kernel.cuh"

namespace gq {
GQ_INSTANTIATE(Q4_0)
GQ_INSTANTIATE_TILE(Q4_0)
}  // namespace gq
