// MXFP4: dequantize + small-M and tile matmul instantiations (decoder in ggml_blocks.cuh).
#include "tile_kernel.cuh"

namespace gq {
GQ_INSTANTIATE(MXFP4)
GQ_INSTANTIATE_TILE(MXFP4)
}  // namespace gq
