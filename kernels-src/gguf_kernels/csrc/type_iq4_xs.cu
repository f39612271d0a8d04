// IQ4_XS: dequantize + small-M matmul instantiations (decoder in ggml_blocks.cuh).
#include "kernels.cuh"

namespace gq {
GQ_INSTANTIATE(IQ4_XS)
}  // namespace gq
