// Q8_0: dequantize + small-M matmul instantiations (decoder in ggml_blocks.cuh).
#include "kernels.cuh"

namespace gq {
GQ_INSTANTIATE(Q8_0)
}  // namespace gq
