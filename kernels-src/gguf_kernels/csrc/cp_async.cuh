// cp.async (PTX ISA, "cp.async": global -> shared copies that bypass registers, sm_80+): the 16-byte
// copies, their commit groups and waits, shared by the generic kernels (kernels.cuh, tile_kernel.cuh)
// and the fast ones (gemv_fast_kernel.cuh and the kernels built on it).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace gq {

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
// n (0..16) bytes from gmem, the rest of the 16 zero-filled: nothing past gmem + n is read
__device__ __forceinline__ void cp_async16z(void* smem, const void* gmem, int n) {
  const uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

}  // namespace gq
