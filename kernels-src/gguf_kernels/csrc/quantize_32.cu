// Quantize kernels of the 32-element types and the launch dispatch; see quantize_kernel.cuh.
#include "quantize_kernel.cuh"

namespace gq {
namespace qz {

cudaError_t launch_quantize_256(int64_t qtype, const void* x, QuantIn in, int64_t nblocks, uint8_t* out,
                                cudaStream_t stream);

}  // namespace qz

bool quantize_supported_type(int64_t qtype) { return qz::quantize_supported((int)qtype); }

cudaError_t launch_quantize(int64_t qtype, const void* x, QuantIn in, int64_t nblocks, uint8_t* out,
                            cudaStream_t stream) {
  using namespace qz;
  switch (qtype) {
    case Q4_0: return launch_quantize_t<Q4_0>(x, in, nblocks, out, stream);
    case Q4_1: return launch_quantize_t<Q4_1>(x, in, nblocks, out, stream);
    case Q5_0: return launch_quantize_t<Q5_0>(x, in, nblocks, out, stream);
    case Q5_1: return launch_quantize_t<Q5_1>(x, in, nblocks, out, stream);
    case Q8_0: return launch_quantize_t<Q8_0>(x, in, nblocks, out, stream);
    case IQ4_NL: return launch_quantize_t<IQ4_NL>(x, in, nblocks, out, stream);
    case MXFP4: return launch_quantize_t<MXFP4>(x, in, nblocks, out, stream);
    default: return launch_quantize_256(qtype, x, in, nblocks, out, stream);
  }
}

}  // namespace gq
