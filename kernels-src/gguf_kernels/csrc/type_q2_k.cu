// Q2_K: dequantize + small-M matmul instantiations (decoder in ggml_blocks.cuh).
#include "kernels.cuh"

namespace gq {
GQ_INSTANTIATE(Q2_K)
}  // namespace gq
