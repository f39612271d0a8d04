// IQ4_XS: dequantize + small-M and tile matmul instantiations (decoder in ggml_blocks.cuh).
#include "tile_kernel.cuh"

namespace gq {
GQ_INSTANTIATE(IQ4_XS)
GQ_INSTANTIATE_TILE(IQ4_XS)
}  // namespace gq
