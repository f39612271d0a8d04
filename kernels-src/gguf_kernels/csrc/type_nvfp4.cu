// NVFP4: dequantize + small-M and tile matmul instantiations (decoder in ggml_blocks.cuh).
#include "tile_kernel.cuh"

namespace gq {
GQ_INSTANTIATE(NVFP4)
GQ_INSTANTIATE_TILE(NVFP4)
}  // namespace gq
