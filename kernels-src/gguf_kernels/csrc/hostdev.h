// Host+device basics shared by the block decoders (ggml_blocks.cuh), the quantizers
// (quantize_blocks.cuh) and the fast matmul's layout code: the qualifier of code that also runs
// on the CPU (the host tests compile these headers for the host) and float <-> bits casts.
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define GQ_HD __host__ __device__ __forceinline__
#else
#define GQ_HD inline
#endif

// GQ_DEV_HOST(d, h): expression d in device code, h in host code.
#if defined(__CUDA_ARCH__)
#define GQ_DEV_HOST(d, h) (d)
#else
#define GQ_DEV_HOST(d, h) (h)
#endif

namespace gq {

template <typename To, typename From>
inline To host_bit_cast(From v) {
  static_assert(sizeof(To) == sizeof(From), "bit cast between different sizes");
  To t;
  std::memcpy(&t, &v, sizeof t);
  return t;
}

// A type as a value (for generic lambdas that dispatch on an element type).
template <typename X> struct Tag { using type = X; };

GQ_HD float as_float(uint32_t u) { return GQ_DEV_HOST(__uint_as_float(u), host_bit_cast<float>(u)); }
GQ_HD uint32_t as_uint(float f) { return GQ_DEV_HOST(__float_as_uint(f), host_bit_cast<uint32_t>(f)); }

// Entry i of an id table of int32 or int64 (MoE expert ids, get_rows ids).
GQ_HD int64_t load_id(const void* ids, int ids64, int64_t i) {
  return ids64 ? reinterpret_cast<const int64_t*>(ids)[i] : (int64_t)reinterpret_cast<const int32_t*>(ids)[i];
}

}  // namespace gq
