// IQ1_M: dequantize + small-M and tile matmul instantiations (decoder in iq_blocks.cuh, included first
// so that its specialisations precede the kernels).
#include "iq_blocks.cuh"
#include "tile_kernel.cuh"

namespace gq {
GQ_INSTANTIATE(IQ1_M)
GQ_INSTANTIATE_TILE(IQ1_M)
}  // namespace gq
