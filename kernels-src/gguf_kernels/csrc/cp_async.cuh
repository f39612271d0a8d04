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

// mbarrier (PTX ISA "mbarrier") and 1-D bulk copies (PTX ISA "cp.async.bulk": 16-byte aligned source, destination
// and size), for the stream kernels' stages and the K split's meeting (gemv_fast_kernel.cuh) and the tile kernel's
// weight rows (tile_kernel.cuh). Rows that no tensor map spans (a map's row stride is a multiple of 16 bytes: Q6_K's
// ragged rows in gemv_stream_kernel's BULK forms, every tile row) are one 1-D bulk copy a row and stage, its bytes
// announced on the stage's barrier before it is issued, and one arrival once all are.
__device__ __forceinline__ void mbar_init_n(uint64_t* bar, int n) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n"
               "fence.mbarrier_init.release.cluster;\n" ::"r"((uint32_t)__cvta_generic_to_shared(bar)), "r"(n)
               : "memory");
}
__device__ __forceinline__ void mbar_expect_bytes(uint64_t* bar, uint32_t bytes) {
  asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(
                   (uint32_t)__cvta_generic_to_shared(bar)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"((uint32_t)__cvta_generic_to_shared(bar)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.release.cta.shared::cta.b64 st, [%0];\n}\n" ::"r"(
                   (uint32_t)__cvta_generic_to_shared(bar))
               : "memory");
}
__device__ __forceinline__ void bulk_copy_1d(uint32_t dst, const uint8_t* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"((uint32_t)__cvta_generic_to_shared(bar))
               : "memory");
}
__device__ __forceinline__ void mbar_wait_cluster(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done) {
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
                 " selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"((uint32_t)__cvta_generic_to_shared(bar)), "r"(parity)
                 : "memory");
  }
}

}  // namespace gq
