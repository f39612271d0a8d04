// IQ3_S: dequantize + small-M and tile matmul instantiations (decoder in iq_blocks.cuh, included first
// so that its specialisations precede the kernels).
#include "iq_blocks.cuh"
#include "tile_kernel.cuh"

namespace gq {
GQ_INSTANTIATE(IQ3_S)
GQ_INSTANTIATE_TILE(IQ3_S)
}  // namespace gq
