// Q4_0: dequantize + small-M matmul instantiations (decoder in ggml_blocks.cuh).
#include "kernels.cuh"

namespace gq {
GQ_INSTANTIATE(Q4_0)
}  // namespace gq
