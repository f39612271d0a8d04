// Q4_1: dequantize + small-M matmul instantiations (decoder in ggml_blocks.cuh).
#include "kernels.cuh"

namespace gq {
GQ_INSTANTIATE(Q4_1)
}  // namespace gq
