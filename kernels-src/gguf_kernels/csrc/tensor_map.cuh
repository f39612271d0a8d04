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

// A 2-D map over `rows` rows of row_bytes from base, taken as super-rows of 2^lg consecutive rows (a map row holds
// 2^lg rows, row_bytes << lg bytes), in elements of e (4 or 8) bytes, a box of box_rows rows (box_rows >> lg
// super-rows) by box_bytes; rows and bytes past the ends read as zeros. The stream kernels' stages (encode_weight_map,
// lg 0 or v133's row pairs) and the tile kernel's (encode_tile_map, super-rows of up to 8) differ only in these. False
// where a super-row is not a whole number of 16-byte pieces, rows are not whole super-rows, base is off 16 bytes, or
// the driver has no encoder or refuses the map.
inline bool encode_rows_map(CUtensorMap& map, const void* base, int e, uint64_t row_bytes, uint64_t rows, int lg,
                            uint32_t box_bytes, uint32_t box_rows, CUtensorMapL2promotion l2) {
  const uint64_t stride = row_bytes << lg;
  if (stride % 16 || rows % (1ull << lg) || reinterpret_cast<uintptr_t>(base) % 16) return false;
  const auto encode = tensor_map_encoder();
  if (!encode) return false;
  const cuuint64_t dims[2] = {stride / e, rows >> lg};
  const cuuint64_t strides[1] = {stride};
  const cuuint32_t box[2] = {box_bytes / e, box_rows >> lg}, step[2] = {1, 1};
  return encode(&map, e == 4 ? CU_TENSOR_MAP_DATA_TYPE_UINT32 : CU_TENSOR_MAP_DATA_TYPE_UINT64, 2,
                const_cast<void*>(base), dims, strides, box, step, CU_TENSOR_MAP_INTERLEAVE_NONE,
                CU_TENSOR_MAP_SWIZZLE_NONE, l2, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace gq
