// Plain C++ interface of the quantize kernels (no torch headers; included by the torch binding).
#pragma once
#include <cstdint>
#include <cuda_runtime.h>

#include "launch.h"

namespace gq {

// Input element type of launch_quantize.
using QuantIn = DType;

// Whether launch_quantize has a kernel for ggml type `qtype`.
bool quantize_supported_type(int64_t qtype);

// Quantizes `nblocks` consecutive ggml blocks of type `qtype` (block size 32 or 256 elements)
// from `x` (contiguous, 16-byte aligned) into `out` (nblocks * type_size bytes, 16-byte aligned),
// byte-exact with llama.cpp's reference quantizer (ggml_quantize_chunk without imatrix).
cudaError_t launch_quantize(int64_t qtype, const void* x, QuantIn in, int64_t nblocks, uint8_t* out,
                            cudaStream_t stream);

}  // namespace gq
