// Plain C++ interface between the torch binding and the CUDA kernels (no torch headers here,
// so the .cu files compile quickly and without torch).
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <cuda_runtime.h>

#include "qtypes.h"

namespace gq {

// What the launch rules read of a device, read once a device: one process may drive several GPUs
// (a model split with device_map="auto"), not necessarily of one kind.
struct DevProps {
  int sms;       // multiprocessors (grids are sized by it)
  int regs;      // registers an SM
  int smem;      // shared memory an SM
  int reserved;  // shared memory the driver reserves a CTA
  int threads;   // threads an SM
  int optin;     // dynamic shared memory a CTA may opt in to (227 KB on the H200, 163 KB on the A100)
};
constexpr int kMaxDevices = 64;  // devices a process tracks (also the width of smem_attrs_once's mask)
// The device of the op being launched on this thread, or -1: set by the torch binding for an op's
// length (OpDevice, beside the CUDAGuard that makes it current), so that the launch rules' reads of
// the current device (10-20 a stream launch) do not each ask the runtime.
inline int& op_device() {
  thread_local int dev = -1;
  return dev;
}
class OpDevice {
 public:
  explicit OpDevice(int dev) : prev_(op_device()) { op_device() = dev; }
  ~OpDevice() { op_device() = prev_; }
  OpDevice(const OpDevice&) = delete;
  OpDevice& operator=(const OpDevice&) = delete;

 private:
  int prev_;
};
inline int current_device() {
  if (op_device() >= 0) return op_device();
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    dev = 0;
  }
  return dev;
}
// Whether `dev` has a slot in the per-device tables (beyond them: read or set every time).
inline bool tracked_device(int dev) { return dev >= 0 && dev < kMaxDevices; }
inline DevProps read_dev_props(int dev) {
  DevProps p{};
  const auto get = [dev](int& v, cudaDeviceAttr attr, int fallback) {  // the H200's, where a read fails
    if (cudaDeviceGetAttribute(&v, attr, dev) != cudaSuccess || v <= 0) {
      cudaGetLastError();
      v = fallback;
    }
  };
  get(p.sms, cudaDevAttrMultiProcessorCount, 132);
  get(p.regs, cudaDevAttrMaxRegistersPerMultiprocessor, 65536);
  get(p.smem, cudaDevAttrMaxSharedMemoryPerMultiprocessor, 233472);
  get(p.reserved, cudaDevAttrReservedSharedMemoryPerBlock, 1024);
  get(p.threads, cudaDevAttrMaxThreadsPerMultiProcessor, 2048);
  get(p.optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 232448);
  return p;
}
// The current device's properties.
inline const DevProps& dev_props() {
  static DevProps props[kMaxDevices];
  static std::once_flag once[kMaxDevices];
  const int dev = current_device();
  if (!tracked_device(dev)) {  // beyond the table: read every time
    thread_local DevProps p;
    p = read_dev_props(dev);
    return p;
  }
  std::call_once(once[dev], [dev] { props[dev] = read_dev_props(dev); });
  return props[dev];
}
inline int num_sms() { return dev_props().sms; }

// Raises `kernel`'s dynamic shared-memory limit to `bytes` (and, carveout >= 0, sets its preferred
// shared-memory carve-out) once a device. Function attributes hold on the device that was current
// when they were set, so each launch site keeps `done`, a mask of the devices it has set.
template <typename F>
cudaError_t smem_attrs_once(std::atomic<uint64_t>& done, F kernel, size_t bytes, int carveout = -1) {
  const int dev = current_device();
  const uint64_t bit = tracked_device(dev) ? uint64_t{1} << dev : 0;
  if (bit && (done.load(std::memory_order_acquire) & bit)) return cudaSuccess;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
  if (e == cudaSuccess && carveout >= 0)
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, carveout);
  if (e != cudaSuccess) {
    cudaGetLastError();  // not sticky: the caller reports it
    return e;
  }
  done.fetch_or(bit, std::memory_order_release);
  return cudaSuccess;
}

enum class DType : int { BF16 = 0, F16 = 1, F32 = 2 };

// Modes of the small-M kernel.
enum GemvMode : int {
  GEMV_DENSE = 0,   // rows of x are 0..M-1, one weight matrix
  GEMV_PAIRS = 1,   // one (token, slot) pair per grid.x, expert read from ids (MT = 1)
  GEMV_CHUNKS = 2,  // up to MT pairs of one expert per grid.x, from moe_route's table
};

struct GemvArgs {
  const uint8_t* w;       // packed weights, [E,] N rows of row_bytes
  int64_t row_bytes;
  int64_t expert_bytes;   // N * row_bytes (MoE)
  int N, K;
  const void* x;          // activations, row r at x + r * x_stride elements
  int64_t x_stride;
  int x_div;              // MoE: x row = pair / x_div (top_k for [T, K] inputs, 1 for [T, k, K])
  void* out;              // output row r at out + r * out_stride elements
  int64_t out_stride;
  int64_t out_rows;       // rows of out (dense: M; MoE: pairs), for split-K workspaces
  int M;                  // dense: rows of x
  const void* ids;        // MoE pairs mode: [P] expert ids (int32 or int64)
  int ids64;
  int n_experts;
  const int* sorted;      // chunks mode: pair indices grouped by expert
  const int4* chunks;     // chunks mode: {expert or -1, start in sorted, count, 0}
  int mode;
  void* ks_part;          // dense M = 3..8: the K split's meeting buffer over a plain grid (any content), or null
  size_t ks_part_bytes;   // its bytes (gemv_stream_ks_part_any)
};

constexpr int GEMV_ROWS_PER_CTA = 16;  // 8 warps x 2 rows
constexpr int GEMV_MT = 8;             // activation rows per CTA in the multi-row variant

// Small-M matmul: out[m, n] = sum_k x[m, k] * W[n, k]. `mt` is 1 or GEMV_MT; grid_x is the
// number of row groups (dense: ceil(M / mt); pairs: P; chunks: table size).
template <int T>
cudaError_t launch_gemv(const GemvArgs& a, DType xt, int mt, int64_t grid_x, cudaStream_t stream);

// Same contract on tensor cores, bf16/fp16 activations only; mt is 8 or 16 (rows of x per
// grid.x entry). The CTA size and its split of K are chosen per launch.
constexpr int MMA_MT = 16;
template <int T>
cudaError_t launch_gemv_mma(const GemvArgs& a, DType xt, int mt, int64_t grid_x, cudaStream_t stream);

// Tile matmul on tensor cores (tile_kernel.cuh), bf16/fp16 x: tt (8, 16, 32 or 64) tokens per
// grid.y entry and 128 weight rows per CTA, each weight decoded once per tile. Dense: tiles =
// ceil(M / tt); chunks: moe_route's table made with mt = tt.
// splits > 1 divides K among that many CTAs, which need ws: splits * a.out_rows * N floats.
// cudaErrorNotSupported when it does not take the case (fp32 x, tt, more than 65535 tiles).
// map: tiles may copy their weights by tensor map where the weights allow one (v130 tiles of 8, v132 the rest;
// GGUF_KERNELS_TILE_MAP=0 turns it off).
template <int T>
cudaError_t launch_tile(const GemvArgs& a, DType xt, int tt, int64_t tiles, int splits, float* ws, bool map,
                        cudaStream_t stream);
constexpr int TILE_ROWS = 128;   // weight rows per CTA of the tile kernel
constexpr int TILE_CHUNK = 256;  // elements of K per stage of the tile kernel
// K splits for a tile launch: enough CTAs for about 1.5 waves of one CTA per SM, each split at
// least 4 chunks, at most 8 splits.
inline int tile_splits(int N, int K, int64_t tiles) {
  const int64_t ctas = (int64_t)((N + TILE_ROWS - 1) / TILE_ROWS) * tiles;
  const int chunks = (K + TILE_CHUNK - 1) / TILE_CHUNK;
  int s = 1;
  while (s < 8 && ctas * s * 2 < 3 * (int64_t)num_sms() && chunks >= 8 * s) s *= 2;
  return s;
}

// Fast small-M matmul (gemv_fast.cuh): M <= 8, bf16/fp16 x, rows a multiple of 16 bytes and of the
// type's chunk, types Q4_0, Q8_0, Q4_K, Q5_K, Q6_K, IQ4_XS, MXFP4. launch_gemv_stream() runs
// gemv_stream_kernel (no scratch) or returns cudaErrorNotSupported; where it does not take the case,
// gemv_fast_scratch() gives the bytes of device scratch gemv_fast_kernel needs (its prep records), 0
// when that kernel does not take it either (Q6_K), and launch_gemv_fast() runs the prep kernel and
// that matmul. Both matmul kernels start as programmatic dependent launches (GGUF_KERNELS_PDL=0: not).
template <int T>
cudaError_t launch_gemv_stream(const GemvArgs& a, DType xt, cudaStream_t stream);
template <int T>
size_t gemv_fast_scratch(int K, int M, int64_t row_bytes);
template <int T>
size_t gemv_stream_ks_part(int N, int K, int M);
template <int T>
cudaError_t launch_gemv_fast(const GemvArgs& a, DType xt, void* scratch, size_t scratch_bytes, cudaStream_t stream);
// MoE pairs (a.mode == GEMV_PAIRS, P pairs) on the fast path's M = 1 kernel: cudaErrorNotSupported
// when it does not take the case (type, K, dtype, the x rows' records too large, or rows that are not
// whole 16-byte pieces with K shorter than min_chunks of the kernel's chunks: their stages of 8 chunks a
// row then leave lanes idle; whole-piece rows take the 4-row form at any K).
template <int T>
cudaError_t launch_gemv_fast_moe(const GemvArgs& a, DType xt, int P, int min_chunks, cudaStream_t stream);
cudaError_t launch_gemv_stream_any(int qtype, const GemvArgs& a, DType xt, cudaStream_t stream);
// Bytes of GemvArgs::ks_part that launch_gemv_stream_any will use for this dense matmul (0: none).
size_t gemv_stream_ks_part_any(int qtype, int N, int K, int M);
size_t gemv_fast_scratch_any(int qtype, int K, int M, int64_t row_bytes);
cudaError_t launch_gemv_fast_any(int qtype, const GemvArgs& a, DType xt, void* scratch, size_t scratch_bytes,
                                 cudaStream_t stream);
cudaError_t launch_gemv_fast_moe_any(int qtype, const GemvArgs& a, DType xt, int P, int min_chunks,
                                     cudaStream_t stream);

// out[r, :] = dequant(W[src(r), :]) with src(r) = ids ? ids[r] : r; ids outside
// [0, rows_src) give a row of zeros.
template <int T>
cudaError_t launch_dequant(const uint8_t* w, int64_t row_bytes, int64_t rows_out, int64_t rows_src, int K,
                           const void* ids, int ids64, void* out, DType ot, cudaStream_t stream);

// Groups P (token, slot) pairs by expert on the device (counting sort in one CTA) and writes
// the chunk table for GEMV_CHUNKS. max_chunks >= ceil(P / mt) + E + 1.
cudaError_t launch_moe_route(const void* ids, int ids64, int P, int E, int mt, int* sorted, int4* chunks,
                             int max_chunks, cudaStream_t stream);

}  // namespace gq
