// Quantize kernels of the 256-element types (K-quants, IQ4_XS); see quantize_kernel.cuh.
#include "quantize_kernel.cuh"

namespace gq {
namespace qz {

cudaError_t launch_quantize_256(int64_t qtype, const void* x, QuantIn in, int64_t nblocks, uint8_t* out,
                                cudaStream_t stream) {
  switch (qtype) {
    case Q2_K: return launch_quantize_t<Q2_K>(x, in, nblocks, out, stream);
    case Q3_K: return launch_quantize_t<Q3_K>(x, in, nblocks, out, stream);
    case Q4_K: return launch_quantize_t<Q4_K>(x, in, nblocks, out, stream);
    case Q5_K: return launch_quantize_t<Q5_K>(x, in, nblocks, out, stream);
    case Q6_K: return launch_quantize_t<Q6_K>(x, in, nblocks, out, stream);
    case IQ4_XS: return launch_quantize_t<IQ4_XS>(x, in, nblocks, out, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace qz
}  // namespace gq
