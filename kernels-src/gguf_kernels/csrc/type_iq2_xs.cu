// IQ2_XS: dequantize + small-M and tile matmul instantiations (decoder in iq_blocks.cuh, included first
// so that its specialisations precede the kernels).
#include "iq_blocks.cuh"
#include "tile_kernel.cuh"

namespace gq {
GQ_INSTANTIATE(IQ2_XS)
GQ_INSTANTIATE_TILE(IQ2_XS)
}  // namespace gq
