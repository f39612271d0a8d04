// Tensor maps (PTX ISA "cp.async.bulk.tensor", CUDA driver API "Tensor Map Object Management"): a box's copy into
// shared memory and the driver's encoder, shared by the stream kernels' stages (gemv_stream_kernel.cuh, with their
// parameter WeightMap) and the tile kernel's weights (tile_kernel.cuh, TileMap).
#pragma once
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace gq {

// One copy of map's box at element x, row y into the shared-window address dst (128-byte aligned), its bytes
// counted on bar (a barrier of mbar_init_n's n arrivals a buffer, cp_async.cuh; NOTES.md v70-v72)
__device__ __forceinline__ void tensor_copy_2d(uint32_t dst, const CUtensorMap* map, int x, int y, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"((uint32_t)__cvta_generic_to_shared(bar))
      : "memory");
}

// gemv_stream_kernel's last parameter (__grid_constant__): for the forms that copy their stages by tensor map
// (stream_bulk: the K split, dense M = 1 ONE) the weights as a 2-D tensor map ([N rows, row_bytes in 4- or 8-byte
// elements], a box of a unit's rows by a stage's pieces) for its one copy a stage (NOTES.md v70-v72), encoded at the
// launch; empty elsewhere (a member of FastArgs, over-aligned, moved every kernel's parameters and changed the SASS of
// kernels that do not use it)
template <bool USED>
struct WeightMap {};
template <>
struct WeightMap<true> {
  CUtensorMap map;
};

// The driver's cuTensorMapEncodeTiled, reached through the runtime's entry point (no link to libcuda), looked up
// once; null where the driver has none
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const auto encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      fn = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

}  // namespace gq
