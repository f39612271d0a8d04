// Memory-side probes for the small-M matmul (kernels-src/gguf_kernels/NOTES.md, v5): how fast can a
// kernel read the weight bytes of one matmul, with which access pattern, and how close does the fast
// kernel come. Standalone, no torch (compile here, carry the binary):
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I kernels-src/gguf_kernels/csrc \
//     benchmarks/gemv_probe.cu -o gemv_probe
//   ./gemv_probe probe [cp0|cp1]   reads only: linear, per-warp spans, the fast kernel's copy pipeline
//   ./gemv_probe fast [TYPE]       the fast kernel (GGUF_KERNELS_FAST_* knobs apply)
//   ./gemv_probe m1 [TYPE]         the two M = 1 kernels (16-row tile, stream) side by side
//   ./gemv_probe check             the M = 1 stream kernel against the 16-row tile kernel, same inputs
//   ./gemv_probe nodecode          Q4_0 / Q4_K at M = 1 next to their twins with the decode left out
//   ./gemv_probe one TYPE K N M    one case on the fast path (for ncu: its kernel, nothing else)
// Every timed row reads a different copy of the weights on each launch (copies span 3 GB, so nothing
// stays in the 60 MB L2), launches are captured in a CUDA graph, and the median time per launch over
// the replays is printed with weight GB/s. Results: benchmarks/results/gemv_probe_h200.md.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "gemv_fast_launch.cuh"
#include "cuda_check.h"
#include "launch.h"

// "No decode" twins of Q4_0 and Q4_K (type ids 200 + T, unused by ggml): the same kernels, copies,
// prep records, mma and epilogue, but A is a constant instead of the decoded weights, so the time
// difference to the real type is what decoding costs (NOTES.md v5, next experiment).
namespace gq {
template <int T> constexpr int NODECODE = 200 + T;
template <> struct Traits<NODECODE<Q4_0>> : Traits<Q4_0> {};
template <> struct Traits<NODECODE<Q4_K>> : Traits<Q4_K> {};
namespace fast {
template <int B>
struct FTNoDecode : FT<B> {
  template <class F> static GQ_HD void chunk(const uint8_t*, const uint8_t*, int c, F&& f) {
#pragma unroll
    for (int q = 0; q < FT<B>::CE / FT<B>::GS; ++q) {
      const uint32_t a = H1024 + (uint32_t)(c + q);
      uint32_t A[2][4] = {{a, a, a, a}, {a, a, a, a}};
      f(q, A, 1.f, 1.f, 0.f, 0.f);
    }
  }
};
template <> struct FT<NODECODE<Q4_0>> : FTNoDecode<Q4_0> {};
template <> struct FT<NODECODE<Q4_K>> : FTNoDecode<Q4_K> {};
}  // namespace fast
}  // namespace gq

__device__ __forceinline__ uint32_t mix32(uint64_t i) {
  uint64_t z = i * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
  return (uint32_t)(z ^ (z >> 29));
}
__global__ void fill_random(uint32_t* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = mix32(i + seed);
}
// Tame the scale fields (fp16 at the given offsets, or an e8m0 byte) so sums stay finite.
__global__ void fix_scales(uint8_t* p, size_t nblocks, int block_bytes, int off0, int off1, int e8m0) {
  for (size_t b = blockIdx.x * (size_t)blockDim.x + threadIdx.x; b < nblocks; b += (size_t)gridDim.x * blockDim.x) {
    uint8_t* q = p + b * block_bytes;
    const uint32_t h = mix32(b);
    if (e8m0) { q[off0] = 120 + (h & 7); continue; }
    const uint16_t v = 0x1E00 + (h & 0xFF);
    memcpy(q + off0, &v, 2);
    if (off1 >= 0) { const uint16_t v1 = 0x1C00 + ((h >> 8) & 0xFF); memcpy(q + off1, &v1, 2); }
  }
}

__global__ void empty_kernel() {}
// What a decode step runs before a projection (RMSNorm): one CTA per token rewrites its x row. With
// PROBE_PRE=1 each timed matmul follows one, so that a programmatic dependent launch of the matmul
// overlaps this kernel and not the previous matmul.
__global__ void rewrite_x(uint16_t* x, int K) {
  uint16_t* r = x + (size_t)blockIdx.x * K;
  for (int i = threadIdx.x; i < K; i += blockDim.x) r[i] = r[i] ^ 0;
}

// Grid-stride 16-byte reads, 4 independent loads in flight per thread.
__global__ void read_linear(const uint4* __restrict__ p, size_t n, uint32_t* sink) {
  uint32_t acc = 0;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = __ldg(p + i + j * stride);
#pragma unroll
    for (int j = 0; j < 4; ++j) acc ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
  }
  for (; i < n; i += stride) acc ^= __ldg(p + i).x;
  if (acc == 0x9E3779B9u) *sink = acc;
}

// A warp reads its own contiguous span (ROWS whole rows), 8 loads of 512 bytes in flight.
__global__ void read_warp_span(const uint8_t* __restrict__ w, int64_t span, int64_t total, uint32_t* sink) {
  const int lane = threadIdx.x & 31;
  const int64_t warp = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5;
  const int64_t start = warp * span, end = min(start + span, total);
  uint32_t acc = 0;
  int64_t o = start + 16 * lane;
  for (; o + 7 * 512 < end; o += 8 * 512) {
    uint4 v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = __ldg(reinterpret_cast<const uint4*>(w + o + j * 512));
#pragma unroll
    for (int j = 0; j < 8; ++j) acc ^= v[j].x ^ v[j].w;
  }
  for (; o < end; o += 512) acc ^= __ldg(reinterpret_cast<const uint4*>(w + o)).x;
  if (acc == 0x9E3779B9u) *sink = acc;
}

__device__ __forceinline__ void cp16(void* smem, const void* gmem) {
  const uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}

// The fast kernel's copy pipeline with the decode left out: CTA = 16 rows, W warps split K in
// chunks of UCB bytes per row, S stages. cmap 0: two lanes per row, alternate 16-byte pieces (one
// instruction touches 16 rows x 32 bytes); 1: lanes walk the 16 x P pieces in memory order.
__global__ void cp_tile(const uint8_t* __restrict__ w, int64_t row_bytes, int N, int UCB, int S, int RS, int cmap,
                        uint32_t* sink) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, W = blockDim.x >> 5;
  const int n0 = blockIdx.x * 16, P = UCB / 16;
  const int nch = (int)(row_bytes / UCB);
  const int mych = nch > warp ? (nch - warp + W - 1) / W : 0;
  uint8_t* buf = smem + (size_t)warp * S * 16 * RS;
  auto issue = [&](int i, int st) {
    if (i >= mych) return;
    const int64_t off = (int64_t)(warp + i * W) * UCB;
    uint8_t* dst = buf + st * 16 * RS;
    if (cmap) {
      int r = lane / P, pc = lane - r * P;
      while (r < 16) {
        cp16(dst + r * RS + 16 * pc, w + (int64_t)min(n0 + r, N - 1) * row_bytes + off + 16 * pc);
        pc += 32;
        while (pc >= P) { pc -= P; ++r; }
      }
    } else {
      const int crow = lane >> 1;
      const uint8_t* src = w + (int64_t)min(n0 + crow, N - 1) * row_bytes + off;
      for (int pc = lane & 1; pc < P; pc += 2) cp16(dst + crow * RS + 16 * pc, src + 16 * pc);
    }
  };
  for (int s = 0; s < S - 1; ++s) { issue(s, s); asm volatile("cp.async.commit_group;\n" ::); }
  uint32_t acc = 0;
  int cur = 0;
  for (int i = 0; i < mych; ++i) {
    if (S >= 4) asm volatile("cp.async.wait_group 2;\n" ::);
    else if (S == 3) asm volatile("cp.async.wait_group 1;\n" ::);
    else asm volatile("cp.async.wait_group 0;\n" ::);
    __syncwarp();
    issue(i + S - 1, cur == 0 ? S - 1 : cur - 1);
    asm volatile("cp.async.commit_group;\n" ::);
    acc ^= *reinterpret_cast<const uint32_t*>(buf + cur * 16 * RS + (lane >> 1) * RS + 4 * (lane & 1));
    __syncwarp();
    cur = cur + 1 == S ? 0 : cur + 1;
  }
  asm volatile("cp.async.wait_group 0;\n" ::);
  if (acc == 0x9E3779B9u) *sink = acc;
}

struct Pool {
  uint8_t* base = nullptr;
  size_t copy_bytes = 0;
  int copies = 0;
  const uint8_t* copy(int i) const { return base + (size_t)(i % copies) * copy_bytes; }
};

// Median microseconds per launch of `one(i, stream)` over graph replays of R launches.
static float time_graph(const std::function<void(int, cudaStream_t)>& one, int R) {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (int i = 0; i < 3; ++i) one(i, s);  // warm-up outside the graph (module load, attributes)
  CK(cudaStreamSynchronize(s));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < R; ++i) one(i, s);
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<float> t;
  for (int rep = 0; rep < 23; ++rep) {
    CK(cudaEventRecord(a, s));
    CK(cudaGraphLaunch(ge, s));
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    if (rep >= 3) t.push_back(ms * 1000.f / R);
  }
  CK(cudaGetLastError());
  std::sort(t.begin(), t.end());
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
  return t[t.size() / 2];
}

static void row(const std::string& name, double bytes, float us) {
  std::printf("| %-52s | %7.2f | %6.0f |\n", name.c_str(), us, bytes / us / 1e3);
}

// n bf16 activations in [-1, 1) from a fixed seed, to device memory at x.
static void upload_bf16(void* x, size_t n, uint32_t seed) {
  std::vector<uint16_t> h(n);
  for (auto& v : h) {
    seed = seed * 1664525u + 1013904223u;
    const float f = ((seed >> 8) / 16777216.0f) * 2.f - 1.f;
    uint32_t u;
    std::memcpy(&u, &f, 4);
    v = (uint16_t)(u >> 16);
  }
  CK(cudaMemcpy(x, h.data(), n * 2, cudaMemcpyHostToDevice));
}

struct TypeInfo {
  const char* name;
  int qtype, block_elems, block_bytes, off0, off1, e8m0;
  int64_t row_bytes(int K) const { return (int64_t)K / block_elems * block_bytes; }
};
static const TypeInfo TYPES[] = {
    {"Q4_0", gq::Q4_0, 32, 18, 0, -1, 0},   {"Q8_0", gq::Q8_0, 32, 34, 0, -1, 0},
    {"Q4_K", gq::Q4_K, 256, 144, 0, 2, 0},  {"Q5_K", gq::Q5_K, 256, 176, 0, 2, 0},
    {"IQ4_XS", gq::IQ4_XS, 256, 136, 0, -1, 0}, {"MXFP4", gq::MXFP4, 32, 17, 0, -1, 1},
};

// f(std::integral_constant<int, T>) for the fast path's type T
template <class F>
static void with_type(int qtype, F&& f) {
  switch (qtype) {
    case gq::Q4_0: f(std::integral_constant<int, gq::Q4_0>()); break;
    case gq::Q8_0: f(std::integral_constant<int, gq::Q8_0>()); break;
    case gq::Q4_K: f(std::integral_constant<int, gq::Q4_K>()); break;
    case gq::Q5_K: f(std::integral_constant<int, gq::Q5_K>()); break;
    case gq::IQ4_XS: f(std::integral_constant<int, gq::IQ4_XS>()); break;
    case gq::MXFP4: f(std::integral_constant<int, gq::MXFP4>()); break;
  }
}

// The whole pool as random valid blocks of one type.
static void fill_blocks(uint8_t* base, size_t bytes, const TypeInfo& ti, uint64_t seed) {
  fill_random<<<4096, 256>>>(reinterpret_cast<uint32_t*>(base), bytes / 4, seed);
  fix_scales<<<4096, 256>>>(base, bytes / ti.block_bytes, ti.block_bytes, ti.off0, ti.off1, ti.e8m0);
  CK(cudaGetLastError());
}

// A dense matmul's arguments: x [M, K] (rows K apart) by weight rows of rb bytes, out [M, N].
static gq::GemvArgs dense_args(const uint8_t* w, int64_t rb, int N, int K, int M, const void* x, void* out) {
  gq::GemvArgs a = {};
  a.w = w; a.row_bytes = rb; a.N = N; a.K = K; a.x = x; a.x_stride = K;
  a.out = out; a.out_stride = N; a.M = M; a.mode = gq::GEMV_DENSE;
  return a;
}

template <int T>
static void fast_rows(const TypeInfo& ti, const Pool& pool, int N, int K, int M, const void* x, void* out,
                      bool tile = false) {
  const int64_t row_bytes = ti.row_bytes(K);
  const size_t sb = gq::gemv_fast_scratch<T>(K, M, row_bytes);
  if (!sb) { std::printf("| %s fast path does not take K=%d M=%d |\n", ti.name, K, M); return; }
  void* scratch;
  CK(cudaMalloc(&scratch, sb));
  static const bool pre = std::getenv("PROBE_PRE") && std::atoi(std::getenv("PROBE_PRE"));
  auto one = [&](int i, cudaStream_t s) {
    if (pre) rewrite_x<<<M, 256, 0, s>>>((uint16_t*)x, K);
    const gq::GemvArgs a = dense_args(pool.copy(i), row_bytes, N, K, M, x, out);
    CK(gq::fast::launch_with<T>(a, gq::DType::BF16, scratch, sb, tile, s));
  };
  const float us = time_graph(one, 64);
  // checksum of one output (same data every run: compares copy mappings across processes)
  std::vector<uint16_t> h((size_t)M * N);
  one(0, 0);
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(h.data(), out, h.size() * 2, cudaMemcpyDeviceToHost));
  uint64_t sum = 1469598103934665603ull;
  for (uint16_t v : h) sum = (sum ^ v) * 1099511628211ull;
  char name[96];
  std::snprintf(name, sizeof name, "fast %s %d->%d M=%d%s%s [%016llx]", ti.name, K, N, M,
                tile ? " tile" : " stream", pre ? " pre" : "", (unsigned long long)sum);
  row(name, (double)N * row_bytes, us);
  CK(cudaFree(scratch));
}

// The M <= 4 kernel (gemv_stream_kernel) against the 16-row tile kernel on the same inputs: both
// approximate the exact product to the output's rounding, so they must agree to ~1e-3.
template <int T>
static void check_m(const TypeInfo& ti, uint8_t* w, int N, int K, int M, const void* x, void* out) {
  const int64_t row_bytes = ti.row_bytes(K);
  const size_t sb = gq::gemv_fast_scratch<T>(K, M, row_bytes);
  if (!sb) { std::printf("| check %s K=%d: fast path does not take it |\n", ti.name, K); return; }
  void* scratch;
  CK(cudaMalloc(&scratch, sb));
  std::vector<float> h[2];
  for (int tile = 0; tile < 2; ++tile) {
    const gq::GemvArgs a = dense_args(w, row_bytes, N, K, M, x, out);
    CK(cudaMemset(out, 0xFF, (size_t)M * N * 2));  // poison: NaN in bf16
    CK(gq::fast::launch_with<T>(a, gq::DType::BF16, scratch, sb, tile == 1, 0));
    CK(cudaDeviceSynchronize());
    std::vector<uint16_t> raw((size_t)M * N);
    CK(cudaMemcpy(raw.data(), out, raw.size() * 2, cudaMemcpyDeviceToHost));
    for (uint16_t r : raw) { const uint32_t u = (uint32_t)r << 16; float f; std::memcpy(&f, &u, 4); h[tile].push_back(f); }
  }
  double num = 0, den = 0;
  int bad = 0;
  for (size_t i = 0; i < h[0].size(); ++i) {
    if (!std::isfinite(h[0][i]) || !std::isfinite(h[1][i])) ++bad;
    num += (double)(h[0][i] - h[1][i]) * (h[0][i] - h[1][i]);
    den += (double)h[1][i] * h[1][i];
  }
  const double rel = std::sqrt(num / std::max(den, 1e-30));
  std::printf("| check %s N=%d K=%d M=%d: stream vs tile rel %.2e, non-finite %d | %s |\n", ti.name, N, K, M, rel, bad,
              (bad == 0 && rel < 5e-3) ? "ok" : "FAIL");
  CK(cudaFree(scratch));
}

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "all";
  const std::string only = argc > 2 ? argv[2] : "";  // probe: cp0 / cp1 (one cp_tile row); fast: a type name
  const size_t pool_bytes = (size_t)3 << 30;
  Pool pool;
  CK(cudaMalloc(&pool.base, pool_bytes));
  uint32_t* sink;
  CK(cudaMalloc(&sink, 4));
  fill_random<<<4096, 256>>>(reinterpret_cast<uint32_t*>(pool.base), pool_bytes / 4, 12345);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  std::printf("| probe | us | GB/s |\n| --- | ---: | ---: |\n");
  void *x, *out;  // activations and outputs: up to 8 tokens of the widest K or N
  CK(cudaMalloc(&x, (size_t)8 * 14336 * 2));
  CK(cudaMalloc(&out, (size_t)8 * 14336 * 2));
  upload_bf16(x, (size_t)8 * 14336, 7);

  if ((what == "all" || what == "probe") && only.empty()) {
    const int N = 14336;
    const int64_t rb = 2304;  // Q4_0, K = 4096
    const size_t bytes = (size_t)N * rb;
    pool.copy_bytes = (bytes + 4095) / 4096 * 4096;
    pool.copies = (int)(pool_bytes / pool.copy_bytes);
    row("empty kernel, 896 x 64 threads", 0, time_graph([&](int, cudaStream_t s) { empty_kernel<<<896, 64, 0, s>>>(); }, 64));
    for (int blocks : {132, 264, 528, 1056})
      for (int th : {256, 512}) {
        char nm[96];
        std::snprintf(nm, sizeof nm, "read_linear %d x %d (33 MB)", blocks, th);
        row(nm, bytes, time_graph([&](int i, cudaStream_t s) {
              read_linear<<<blocks, th, 0, s>>>(reinterpret_cast<const uint4*>(pool.copy(i)), bytes / 16, sink);
            }, 64));
      }
    for (int rows : {1, 4, 16}) {
      const int64_t span = rows * rb;
      const int64_t warps = (bytes + span - 1) / span;
      char nm[96];
      std::snprintf(nm, sizeof nm, "read_warp_span %d rows per warp, 128-thread CTAs", rows);
      row(nm, bytes, time_graph([&](int i, cudaStream_t s) {
            read_warp_span<<<(unsigned)((warps + 3) / 4), 128, 0, s>>>(pool.copy(i), span, (int64_t)bytes, sink);
          }, 64));
    }
  }
  if (what == "all" || what == "probe") {
    const int N = 14336;
    const int64_t rb = 2304;
    const size_t bytes = (size_t)N * rb;
    pool.copy_bytes = bytes;
    pool.copies = (int)(pool_bytes / pool.copy_bytes);
    struct Cfg { int W, S, U; };
    for (Cfg c : {Cfg{2, 4, 4}, Cfg{2, 4, 1}, Cfg{4, 3, 2}, Cfg{1, 4, 4}, Cfg{8, 2, 1}, Cfg{16, 2, 1}, Cfg{8, 3, 1},
                  Cfg{4, 2, 1}, Cfg{4, 3, 1}})
      for (int cmap : {0, 1}) {
        if (!only.empty() && (only != "cp" + std::to_string(cmap) || c.U != 4 || c.W != 2)) continue;
        const int UCB = 144 * c.U, RS = 16 * ((UCB / 16) | 1);
        const size_t smem = (size_t)c.W * c.S * 16 * RS;
        CK(cudaFuncSetAttribute(cp_tile, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
        char nm[96];
        std::snprintf(nm, sizeof nm, "cp_tile W=%d S=%d U=%d cmap=%d (%zu KB smem)", c.W, c.S, c.U, cmap, smem / 1024);
        row(nm, bytes, time_graph([&](int i, cudaStream_t s) {
              cp_tile<<<(N + 15) / 16, 32 * c.W, smem, s>>>(pool.copy(i), rb, N, UCB, c.S, RS, cmap, sink);
            }, 64));
      }
  }

  if (what == "all" || what == "fast") {
    struct Shape { int K, N; };
    for (const TypeInfo& ti : TYPES) {
      if (!only.empty() && only != ti.name) continue;
      fill_blocks(pool.base, pool_bytes, ti, 12345);
      for (Shape sh : {Shape{4096, 14336}, Shape{14336, 4096}, Shape{4096, 4096}})
        for (int M : {1, 8}) {
          if (M == 8 && sh.K != 4096) continue;
          if (!only.empty() && (M != 1 || sh.N != 14336)) continue;
          const int64_t rb = ti.row_bytes(sh.K);
          pool.copy_bytes = (size_t)sh.N * rb;  // whole rows: every copy starts on a block, 16-byte aligned
          pool.copies = (int)(pool_bytes / pool.copy_bytes);
          with_type(ti.qtype, [&](auto t) { fast_rows<decltype(t)::value>(ti, pool, sh.N, sh.K, M, x, out); });
        }
    }
  }
  if (what == "all" || what == "m1") {  // both kernels side by side, M = 1, 2, 4
    struct Shape { int K, N; };
    for (const TypeInfo& ti : TYPES) {
      if (!only.empty() && only != ti.name) continue;
      fill_blocks(pool.base, pool_bytes, ti, 12345);
      for (Shape sh : {Shape{4096, 14336}, Shape{14336, 4096}, Shape{4096, 4096}, Shape{4096, 1024}}) {
        const int64_t rb = ti.row_bytes(sh.K);
        pool.copy_bytes = (size_t)sh.N * rb;
        pool.copies = (int)(pool_bytes / pool.copy_bytes);
        for (int M : {1, 2, 4, 8})
          for (bool tile : {true, false})
            with_type(ti.qtype, [&](auto t) { fast_rows<decltype(t)::value>(ti, pool, sh.N, sh.K, M, x, out, tile); });
      }
    }
  }
  if (what == "all" || what == "nodecode") {
    struct Shape { int K, N; };
    for (const TypeInfo& ti : TYPES) {
      if (ti.qtype != gq::Q4_0 && ti.qtype != gq::Q4_K) continue;
      fill_blocks(pool.base, pool_bytes, ti, 12345);
      TypeInfo twin = ti;
      twin.name = ti.qtype == gq::Q4_0 ? "Q4_0 (no decode)" : "Q4_K (no decode)";
      for (Shape sh : {Shape{4096, 14336}, Shape{14336, 4096}}) {
        pool.copy_bytes = (size_t)sh.N * (ti.row_bytes(sh.K));
        pool.copies = (int)(pool_bytes / pool.copy_bytes);
        if (ti.qtype == gq::Q4_0) {
          fast_rows<gq::Q4_0>(ti, pool, sh.N, sh.K, 1, x, out);
          fast_rows<gq::NODECODE<gq::Q4_0>>(twin, pool, sh.N, sh.K, 1, x, out);
        } else {
          fast_rows<gq::Q4_K>(ti, pool, sh.N, sh.K, 1, x, out);
          fast_rows<gq::NODECODE<gq::Q4_K>>(twin, pool, sh.N, sh.K, 1, x, out);
        }
      }
    }
  }
  if (what == "one" && argc > 5) {
    const int K = std::atoi(argv[3]), N = std::atoi(argv[4]), M = std::atoi(argv[5]);
    for (const TypeInfo& ti : TYPES) {
      if (only != ti.name) continue;
      fill_blocks(pool.base, pool_bytes, ti, 12345);
      pool.copy_bytes = (size_t)N * (ti.row_bytes(K));
      pool.copies = (int)(pool_bytes / pool.copy_bytes);
      with_type(ti.qtype, [&](auto t) { fast_rows<decltype(t)::value>(ti, pool, N, K, M, x, out); });
    }
  }
  if (what == "layer" && argc > 3) {  // ./gemv_probe layer TYPE M
    const int M = std::atoi(argv[3]);
    // One Llama-3-8B decoder layer's projections in the order a decode step runs them: a kernel that
    // writes x (RMSNorm, attention, the gated activation) before q, o, gate and down; k, v and up
    // follow a matmul directly. Each replayed layer reads its own copy of the weights.
    struct Op { int K, N; bool pre; };
    const Op ops[] = {{4096, 4096, true}, {4096, 1024, false}, {4096, 1024, false}, {4096, 4096, true},
                      {4096, 14336, true}, {4096, 14336, false}, {14336, 4096, true}};
    for (const TypeInfo& ti : TYPES) {
      if (only != ti.name) continue;
      fill_blocks(pool.base, pool_bytes, ti, 12345);
      size_t layer = 0, sb = 0;
      for (const Op& o : ops) {
        const int64_t rb = ti.row_bytes(o.K);
        layer += (size_t)o.N * rb;
        with_type(ti.qtype, [&](auto t) { sb = std::max(sb, gq::gemv_fast_scratch<decltype(t)::value>(o.K, M, rb)); });
      }
      pool.copy_bytes = layer;
      pool.copies = (int)(pool_bytes / layer);
      void* scratch;
      CK(cudaMalloc(&scratch, std::max<size_t>(sb, 16)));
      const float us = time_graph([&](int i, cudaStream_t s) {
        const uint8_t* w = pool.copy(i);
        for (const Op& o : ops) {
          const int64_t rb = ti.row_bytes(o.K);
          if (o.pre) rewrite_x<<<M, 256, 0, s>>>((uint16_t*)x, o.K);
          const gq::GemvArgs a = dense_args(w, rb, o.N, o.K, M, x, out);
          with_type(ti.qtype, [&](auto t) {
            CK(gq::fast::launch_with<decltype(t)::value>(a, gq::DType::BF16, scratch, sb, false, s));
          });
          w += (size_t)o.N * rb;
        }
      }, 16);
      char nm[96];
      std::snprintf(nm, sizeof nm, "layer %s M=%d (7 matmuls, 4 x-writing kernels)", ti.name, M);
      row(nm, (double)layer, us);
      CK(cudaFree(scratch));
    }
  }
  if (what == "all" || what == "check") {
    struct Shape { int N, K; };
    for (const TypeInfo& ti : TYPES) {
      fill_blocks(pool.base, pool_bytes, ti, 999);
      for (Shape sh : {Shape{14336, 4096}, Shape{4095, 14336}, Shape{1000, 768}, Shape{999, 1024}, Shape{48, 512},
                       Shape{1024, 4096}, Shape{3, 2048}})
        for (int M : {1, 2, 3, 4, 5, 8})
          with_type(ti.qtype, [&](auto t) { check_m<decltype(t)::value>(ti, pool.base, sh.N, sh.K, M, x, out); });
    }
  }
  CK(cudaDeviceSynchronize());
  return 0;
}
