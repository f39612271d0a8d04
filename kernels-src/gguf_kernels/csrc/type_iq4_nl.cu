// IQ4_NL: dequantize + small-M and tile matmul instantiations (decoder in ggml_blocks.cuh).
#include "tile_kernel.cuh"

namespace gq {
GQ_INSTANTIATE(IQ4_NL)
GQ_INSTANTIATE_TILE(IQ4_NL)
}  // namespace gq
