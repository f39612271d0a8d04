// Torch ops of the GGUF kernels. Registered under TORCH_EXTENSION_NAME, which the build sets to
// a name derived from a hash of the sources (one op namespace / .so / metadata id per build).
//
//   dequantize(packed [R, rb] u8, qtype, dtype)            -> [R, K]
//   get_rows(packed [R, rb] u8, ids [...] int, qtype, dtype) -> [..., K]
//   matmul(x [..., K], packed [N, rb] u8, qtype)            -> [..., N] in x.dtype
//   moe_matmul(x [T, K] | [T, k, K], packed [E, N, rb] u8, ids [T, k] int, qtype) -> [T, k, N]
//   quantize(weight [..., K] f32/bf16/f16, qtype)          -> [..., rb] u8 (llama.cpp's reference bytes)
//
// Every launch goes on the current stream; scratch comes from torch's allocator; nothing
// reads device memory on the host, so the ops are safe inside CUDA graphs.
#include <Python.h>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/all.h>
#include <torch/library.h>

#include <cstdlib>
#include <type_traits>

#include "launch.h"
#include "quantize_launch.cuh"

namespace {

using gq::DType;

// An op's device made current (CUDAGuard) and named to the launch rules (gq::OpDevice), which read it
// many times a launch.
struct OnDevice {
  c10::cuda::CUDAGuard guard;
  gq::OpDevice op;
  explicit OnDevice(const at::Device& d) : guard(d), op(d.index()) {}
};

// Returns f(std::integral_constant<int, T>{}) for the ggml type T that qtype names, `otherwise` for
// a type the kernels do not have.
template <typename R, typename F>
R with_type(int64_t qtype, R otherwise, F&& f) {
  switch (qtype) {
#define GQ_CASE(T) \
  case gq::T: return f(std::integral_constant<int, gq::T>{});
    GQ_FOR_EACH_TYPE(GQ_CASE)
#undef GQ_CASE
  }
  return otherwise;
}

struct TypeInfo {
  int block, bytes;
  int64_t cols(int64_t row_bytes) const { return row_bytes / bytes * block; }  // elements of a row
};

bool type_info(int64_t qtype, TypeInfo& ti) {
  return with_type(qtype, false, [&](auto t) {
    using Tr = gq::Traits<decltype(t)::value>;
    ti = {Tr::BLOCK, Tr::BYTES};
    return true;
  });
}

cudaError_t dispatch_dequant(int64_t qtype, const uint8_t* w, int64_t rb, int64_t rows_out, int64_t rows_src, int K,
                             const void* ids, int ids64, void* out, DType ot, cudaStream_t s) {
  return with_type(qtype, cudaErrorInvalidValue, [&](auto t) {
    return gq::launch_dequant<decltype(t)::value>(w, rb, rows_out, rows_src, K, ids, ids64, out, ot, s);
  });
}

cudaError_t dispatch_gemv(int64_t qtype, const gq::GemvArgs& a, DType xt, int mt, int64_t gx, cudaStream_t s) {
  return with_type(qtype, cudaErrorInvalidValue,
                   [&](auto t) { return gq::launch_gemv<decltype(t)::value>(a, xt, mt, gx, s); });
}

cudaError_t dispatch_gemv_mma(int64_t qtype, const gq::GemvArgs& a, DType xt, int mt, int64_t gx, cudaStream_t s) {
  return with_type(qtype, cudaErrorInvalidValue,
                   [&](auto t) { return gq::launch_gemv_mma<decltype(t)::value>(a, xt, mt, gx, s); });
}

int env_int(const char* name, int dflt) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : dflt;
}

// The tile kernel, with K split over CTAs (and its fp32 workspace) where it has few CTAs; its weights by tensor map
// where they allow one, unless GGUF_KERNELS_TILE_MAP=0.
cudaError_t dispatch_tile(int64_t qtype, const gq::GemvArgs& a, DType xt, int tt, int64_t tiles,
                          const at::TensorOptions& opts, cudaStream_t s) {
  const int splits = gq::tile_splits(a.N, a.K, tiles);
  at::Tensor ws;
  if (splits > 1) ws = at::empty({(int64_t)splits * a.out_rows * a.N}, opts.dtype(at::kFloat));
  float* wp = splits > 1 ? ws.data_ptr<float>() : nullptr;
  static const bool map = env_int("GGUF_KERNELS_TILE_MAP", 1) != 0;
  return with_type(qtype, cudaErrorInvalidValue,
                   [&](auto t) { return gq::launch_tile<decltype(t)::value>(a, xt, tt, tiles, splits, wp, map, s); });
}

void check_cuda(cudaError_t e, const char* what) {
  TORCH_CHECK(e == cudaSuccess, "gguf_kernels: ", what, " failed: ", cudaGetErrorString(e));
}

// The kernels' code of a bf16 / fp16 / fp32 dtype; false for any other.
bool dtype_of(at::ScalarType t, DType& d) {
  switch (t) {
    case at::kBFloat16: d = DType::BF16; return true;
    case at::kHalf: d = DType::F16; return true;
    case at::kFloat: d = DType::F32; return true;
    default: return false;
  }
}

DType dtype_code(at::ScalarType t) {
  DType d;
  TORCH_CHECK(dtype_of(t, d), "gguf_kernels: dtype must be bfloat16, float16 or float32, got ", t);
  return d;
}

// Largest M served by the small-M kernels; above it the weight is dequantized (in row chunks)
// and multiplied by cuBLAS. The tensor-core kernel re-reads W once per 16 rows of x, the fp32
// one once per 8 and does every product on FMA units, hence the lower default.
int gemv_max_m(bool mma) {
  static const int v_mma = env_int("GGUF_KERNELS_GEMV_MAX_M", 32);
  static const int v_fma = env_int("GGUF_KERNELS_GEMV_MAX_M", 16);
  return mma ? v_mma : v_fma;
}
// Largest M of the fast small-M kernel (0 turns it off).
int fast_max_m() {
  static const int v = env_int("GGUF_KERNELS_FAST_MAX_M", 8);
  return v;
}
// Most pairs run as pairs (one launch over all of them) before grouping by expert: 64. (v115 gave IQ4_XS 256 while the
// tile kernel decoded it through fp32; since v125's table decode its tiles take Qwen3-30B-A3B's T = 32 as fast or faster:
// session 80, H100, gate 88.2 against the pairs' 87.7 us, down 82.6 against 90.9.) Where the fast pairs decline such a
// case it is grouped as before (P >= moe_group_min()). GGUF_KERNELS_MOE_PAIRS_MAX sets it.
int moe_pairs_max() {
  static const int v = env_int("GGUF_KERNELS_MOE_PAIRS_MAX", 64);
  return v;
}
// Fewest pairs that are grouped by expert (tile kernel) rather than run on gemv_mma_kernel's pairs
// when the stream kernel does not take them, or on the stream kernel when its rows are not whole
// 16-byte pieces and K is shorter than its 8-chunk stage. Same-run A/Bs on the H200 (NOTES.md v9),
// T = 8: gpt-oss-20b's gate (32 pairs, 1530-byte rows) 102 us grouped against 124 as pairs;
// Qwen3-30B-A3B's down projection (64 pairs, K = 768: 3 chunks) Q6_K 49 against 57 as pairs; its gate
// (K = 2048, 8 chunks) stays on the stream kernel (28 against 39 grouped). Since v17 (each CTA's own
// pairs' records, the 4-row form) the Q4_K down projection runs on the stream kernel: 31.5 against 36.1.
int moe_group_min() {
  static const int v = env_int("GGUF_KERNELS_MOE_GROUP_MIN", 32);
  return v;
}
// Dense M served by the tile kernel, from same-run A/Bs on the H200 (NOTES.md v8, v31). Against the
// tensor-core small-M kernel: faster from M = 17 for every type, from M = 9 for Q4_K and Q5_K (v8),
// and since v31 at M = 16 for Q6_K and Q8_0 (0.78-0.97x of its time) and Q4_0 (0.84-0.92x of
// tile_fast_kernel's); since v136 (H100, session 88, M = 9, 12, 16) MXFP4 and IQ4_XS from M = 9 too: 4096 -> 14336 in
// 0.89-0.94x of tile_fast_kernel's time, 14336 -> 4096 in 0.81-0.87x, 4096 -> 4096 (where tile_fast_kernel declined,
// too few CTAs) in 0.79-0.88x of gemv_mma_kernel's; tile_fast_kernel was removed. Against dequantize + cuBLAS
// at M = 64 (two tiles of 32), since v31: 0.69-0.93x of its time for those types and MXFP4 on
// 4096 -> 14336 and 14336 -> 4096, IQ4_XS 1.07x on 4096 -> 14336; IQ4_XS has taken M = 64 since v125 (its tiles
// decode as Q4_K's; session 80, H100, M = 64 against dequantize + cuBLAS: 4096 -> 14336 68.7 against 97.5 us, 14336 ->
// 4096 64.3 against 100.8, 4096 -> 4096 23.6 against 25.2). The types not measured keep M = 17..32.
// GGUF_KERNELS_TILE_MAX_M=0 turns the tile kernel off, for MoE too.
bool tile_measured_type(int64_t qtype) {
  return qtype == gq::Q4_0 || qtype == gq::Q4_K || qtype == gq::Q5_K || qtype == gq::Q6_K || qtype == gq::Q8_0 ||
         qtype == gq::MXFP4 || qtype == gq::IQ4_XS;
}
int tile_min_m(int64_t qtype) {
  static const int v = env_int("GGUF_KERNELS_TILE_MIN_M", 0);
  if (v > 0) return v;
  return tile_measured_type(qtype) ? 9 : 17;
}
int tile_max_m(int64_t qtype) {
  static const int v = env_int("GGUF_KERNELS_TILE_MAX_M", -1);
  if (v >= 0) return v;
  return tile_measured_type(qtype) ? 64 : 32;
}
// Tokens per tile: the smallest of 8, 16, 32, 64 that holds n, at most `cap`. Dense tiles stop at 32
// tokens (M = 64 ran faster as two tiles of 32 than as one of 64 for Q4_K and Q6_K).
int tile_tokens(int64_t n, int cap) {
  int tt = 8;
  while (tt < cap && tt < n) tt *= 2;
  return tt;
}
// Tokens a tile of MoE pairs grouped by expert: the mean pairs per hit expert (same-run A/B on the H200: Qwen3-30B-A3B
// at T = 512, mean 32, took 150 us in tiles of 32 and 167 in tiles of 64; gpt-oss-20b, mean 64: 386 us in tiles of 64
// and 484 in tiles of 32), twice that from a mean of 32 for Q4_K and IQ4_XS, whose tiles of 64 take the experts past
// the mean in one tile (session 80, H100, Qwen3-30B-A3B at T = 512 after v125: IQ4_XS gate 157 -> 147 us, down 162 ->
// 152, Q4_K gate 139 -> 131, down 143 -> 142; Q8_0 and Q6_K lost 15-23% in tiles of 64, MXFP4 level). Tiles of 64
// (NT = 8) hold two stages of x's 64 rows beside the weights' 128: 111 KB for Q4_K and IQ4_XS (160-byte row slots), so
// two CTAs an SM, but 131 KB for Q6_K and 143 KB for Q8_0 (240, 288), one CTA (TileGeom in tile_kernel.cuh).
// GGUF_KERNELS_MOE_TT (8, 16, 32, 64) sets it, for A/B runs.
int moe_tile_tokens(int64_t qtype, int64_t P, int64_t E) {
  static const int v = env_int("GGUF_KERNELS_MOE_TT", 0);
  const int64_t mean = (P + std::min(E, P) - 1) / std::min(E, P);
  const bool wide = (qtype == gq::Q4_K || qtype == gq::IQ4_XS) && mean >= 32;
  return tile_tokens(v > 0 ? v : wide ? 2 * mean : mean, 64);
}
// bf16/fp16 activations use the tensor-core small-M kernel unless GGUF_KERNELS_NO_MMA=1.
bool use_mma(DType xt) {
  static const bool off = env_int("GGUF_KERNELS_NO_MMA", 0) != 0;
  return !off && xt != DType::F32;
}

// t contiguous with a 16-byte aligned base (a fresh copy when it is not).
at::Tensor contiguous16(const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  if (reinterpret_cast<uintptr_t>(c.data_ptr()) % 16) c = c.clone();
  return c;
}

// Packed weights: uint8, CUDA, contiguous, 16-byte aligned base (the kernels rely on each
// block keeping its in-row alignment).
at::Tensor prep_packed(const at::Tensor& packed, int64_t qtype, TypeInfo& ti, int min_dim, int max_dim) {
  TORCH_CHECK(type_info(qtype, ti), "gguf_kernels: ggml type ", qtype, " is not supported");
  TORCH_CHECK(packed.is_cuda(), "gguf_kernels: packed must be a CUDA tensor");
  TORCH_CHECK(packed.scalar_type() == at::kByte, "gguf_kernels: packed must be uint8");
  TORCH_CHECK(packed.dim() >= min_dim && packed.dim() <= max_dim, "gguf_kernels: packed has ", packed.dim(), " dims");
  TORCH_CHECK(packed.size(-1) % ti.bytes == 0, "gguf_kernels: row of ", packed.size(-1),
              " bytes is not a whole number of ", ti.bytes, "-byte blocks");
  return contiguous16(packed);
}

at::Tensor prep_act(const at::Tensor& x) {
  TORCH_CHECK(x.is_cuda(), "gguf_kernels: activations must be a CUDA tensor");
  dtype_code(x.scalar_type());
  return contiguous16(x);
}

at::Tensor prep_ids(const at::Tensor& ids) {
  TORCH_CHECK(ids.scalar_type() == at::kLong || ids.scalar_type() == at::kInt, "gguf_kernels: ids must be int32 or int64");
  return ids.contiguous();
}

at::Tensor dequantize(const at::Tensor& packed, int64_t qtype, at::ScalarType dtype) {
  TypeInfo ti;
  at::Tensor p = prep_packed(packed, qtype, ti, 2, 2);
  const OnDevice on(p.device());
  const int64_t rows = p.size(0), rb = p.size(1), K = ti.cols(rb);
  at::Tensor out = at::empty({rows, K}, p.options().dtype(dtype));
  check_cuda(dispatch_dequant(qtype, p.data_ptr<uint8_t>(), rb, rows, rows, (int)K, nullptr, 0, out.data_ptr(),
                              dtype_code(dtype), c10::cuda::getCurrentCUDAStream()),
             "dequantize");
  return out;
}

at::Tensor get_rows(const at::Tensor& packed, const at::Tensor& ids, int64_t qtype, at::ScalarType dtype) {
  TypeInfo ti;
  at::Tensor p = prep_packed(packed, qtype, ti, 2, 2);
  TORCH_CHECK(ids.device() == p.device(), "gguf_kernels: ids and packed on different devices");
  at::Tensor id = prep_ids(ids);
  const OnDevice on(p.device());
  const int64_t rb = p.size(1), K = ti.cols(rb);
  std::vector<int64_t> shape(id.sizes().begin(), id.sizes().end());
  shape.push_back(K);
  at::Tensor out = at::empty(shape, p.options().dtype(dtype));
  check_cuda(dispatch_dequant(qtype, p.data_ptr<uint8_t>(), rb, id.numel(), p.size(0), (int)K, id.data_ptr(),
                              id.scalar_type() == at::kLong, out.data_ptr(), dtype_code(dtype),
                              c10::cuda::getCurrentCUDAStream()),
             "get_rows");
  return out;
}

// The small-M and tile kernels' arguments for out [M, N] = xc [M, K] x p [N, rb]^T.
gq::GemvArgs dense_args(const at::Tensor& p, const at::Tensor& xc, const at::Tensor& out) {
  gq::GemvArgs a{};
  a.w = p.data_ptr<uint8_t>(); a.row_bytes = p.size(1); a.N = (int)out.size(1); a.K = (int)xc.size(1);
  a.x = xc.data_ptr(); a.x_stride = xc.size(1); a.x_div = 1;
  a.out = out.data_ptr(); a.out_stride = out.size(1); a.out_rows = out.size(0); a.M = (int)out.size(0);
  a.n_experts = 1; a.mode = gq::GEMV_DENSE;
  return a;
}

at::Tensor matmul(const at::Tensor& x, const at::Tensor& packed, int64_t qtype) {
  TypeInfo ti;
  at::Tensor p = prep_packed(packed, qtype, ti, 2, 2);
  TORCH_CHECK(x.device() == p.device(), "gguf_kernels: x and packed on different devices");
  const int64_t N = p.size(0), rb = p.size(1), K = ti.cols(rb);
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) == K, "gguf_kernels: x has ", x.size(-1), " columns, weight has ", K);
  const OnDevice on(p.device());
  at::Tensor xc = prep_act(x).reshape({-1, K});
  const int64_t M = xc.size(0);
  std::vector<int64_t> oshape(x.sizes().begin(), x.sizes().end() - 1);
  oshape.push_back(N);
  if (M == 0 || N == 0) return at::empty(oshape, x.options());
  const DType xt = dtype_code(x.scalar_type());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();

  if (use_mma(xt) && M > fast_max_m() && M >= tile_min_m(qtype) && M <= tile_max_m(qtype)) {  // one decode per tile
    const int tt = tile_tokens(M, 32);
    at::Tensor out = at::empty({M, N}, x.options());
    const gq::GemvArgs a = dense_args(p, xc, out);
    const cudaError_t e = dispatch_tile(qtype, a, xt, tt, (M + tt - 1) / tt, p.options(), stream);
    if (e != cudaErrorNotSupported) {
      check_cuda(e, "matmul (tile)");
      return out.reshape(oshape);
    }
  }
  if (M <= gemv_max_m(use_mma(xt))) {
    at::Tensor out = at::empty({M, N}, x.options());
    const gq::GemvArgs a = dense_args(p, xc, out);
    // M <= 8 with rows a multiple of 16 bytes: the stream kernel, else the fast kernel (prep of x +
    // scale-after-mma), where they take the type.
    if (use_mma(xt) && M <= fast_max_m()) {
      gq::GemvArgs sa = a;  // the K split's meeting buffer, where it meets in global memory
      sa.ks_part_bytes = gq::gemv_stream_ks_part_any((int)qtype, (int)N, (int)K, (int)M);
      at::Tensor part = sa.ks_part_bytes ? at::empty({(int64_t)sa.ks_part_bytes}, p.options()) : at::Tensor();
      sa.ks_part = sa.ks_part_bytes ? part.data_ptr() : nullptr;
      const cudaError_t e = gq::launch_gemv_stream_any((int)qtype, sa, xt, stream);
      if (e != cudaErrorNotSupported) {
        check_cuda(e, "matmul (small M, stream)");
        return out.reshape(oshape);
      }
    }
    const size_t fast_bytes = use_mma(xt) && M <= fast_max_m() ? gq::gemv_fast_scratch_any((int)qtype, (int)K, (int)M, rb) : 0;
    if (fast_bytes > 0) {
      at::Tensor scratch = at::empty({(int64_t)fast_bytes}, p.options());
      check_cuda(gq::launch_gemv_fast_any((int)qtype, a, xt, scratch.data_ptr(), fast_bytes, stream),
                 "matmul (small M, fast)");
    } else if (use_mma(xt)) {
      const int mt = M <= 8 ? 8 : gq::MMA_MT;
      check_cuda(dispatch_gemv_mma(qtype, a, xt, mt, (M + mt - 1) / mt, stream), "matmul (small M, mma)");
    } else {
      const int mt = M == 1 ? 1 : gq::GEMV_MT;
      check_cuda(dispatch_gemv(qtype, a, xt, mt, (M + mt - 1) / mt, stream), "matmul (small M)");
    }
    return out.reshape(oshape);
  }

  // Large M: dequantize to the activation dtype (at most ~128M elements at a time) + cuBLAS.
  const int64_t chunk = std::max<int64_t>(1, ((int64_t)1 << 27) / std::max<int64_t>(K, 1));
  if (chunk >= N) {
    at::Tensor w = at::empty({N, K}, x.options());
    check_cuda(dispatch_dequant(qtype, p.data_ptr<uint8_t>(), rb, N, N, (int)K, nullptr, 0, w.data_ptr(), xt, stream),
               "matmul (dequantize)");
    return at::matmul(xc, w.t()).reshape(oshape);
  }
  at::Tensor out = at::empty({M, N}, x.options());
  at::Tensor w = at::empty({chunk, K}, x.options());
  for (int64_t n0 = 0; n0 < N; n0 += chunk) {
    const int64_t nc = std::min(chunk, N - n0);
    at::Tensor wc = w.narrow(0, 0, nc);
    check_cuda(dispatch_dequant(qtype, p.data_ptr<uint8_t>() + n0 * rb, rb, nc, nc, (int)K, nullptr, 0, wc.data_ptr(),
                                xt, stream),
               "matmul (dequantize)");
    at::Tensor oc = out.narrow(1, n0, nc);
    at::mm_out(oc, xc, wc.t());
  }
  return out.reshape(oshape);
}

at::Tensor moe_matmul(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& ids, int64_t qtype) {
  TypeInfo ti;
  at::Tensor p = prep_packed(packed, qtype, ti, 3, 3);
  TORCH_CHECK(x.device() == p.device() && ids.device() == p.device(), "gguf_kernels: tensors on different devices");
  TORCH_CHECK(ids.dim() == 2, "gguf_kernels: ids must be [T, top_k]");
  const int64_t E = p.size(0), N = p.size(1), rb = p.size(2), K = ti.cols(rb);
  const int64_t T = ids.size(0), top_k = ids.size(1), P = T * top_k;
  TORCH_CHECK((x.dim() == 2 && x.size(0) == T) || (x.dim() == 3 && x.size(0) == T && x.size(1) == top_k),
              "gguf_kernels: x must be [T, K] or [T, top_k, K]");
  TORCH_CHECK(x.size(-1) == K, "gguf_kernels: x has ", x.size(-1), " columns, experts have ", K);
  const OnDevice on(p.device());
  at::Tensor out = at::empty({T, top_k, N}, x.options());
  if (P == 0 || N == 0) return out;
  at::Tensor xc = prep_act(x);
  at::Tensor id = prep_ids(ids);
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();

  gq::GemvArgs a{};
  a.w = p.data_ptr<uint8_t>(); a.row_bytes = rb; a.expert_bytes = N * rb; a.N = (int)N; a.K = (int)K;
  a.x = xc.data_ptr(); a.x_stride = K; a.x_div = x.dim() == 2 ? (int)top_k : 1;
  a.out = out.data_ptr(); a.out_stride = N; a.out_rows = P; a.M = 0; a.n_experts = (int)E;
  a.ids = id.data_ptr(); a.ids64 = id.scalar_type() == at::kLong;
  const DType xt = dtype_code(x.scalar_type());
  const bool mma = use_mma(xt);
  const bool tile = mma && tile_max_m(qtype) > 0;
  if (P <= moe_pairs_max()) {
    a.mode = gq::GEMV_PAIRS;
    // from moe_group_min() pairs: the stream kernel only on rows of whole 16-byte pieces or with full
    // 8-chunk stages, else grouped by expert
    const bool group = tile && P >= moe_group_min();
    if (mma) {  // the fast M = 1 kernel over all pairs at once, where it takes the case
      const cudaError_t e = gq::launch_gemv_fast_moe_any((int)qtype, a, xt, (int)P, group ? 8 : 1, stream);
      if (e != cudaErrorNotSupported) {
        check_cuda(e, "moe_matmul (fast pairs)");
        return out;
      }
    }
    if (!group) {
      check_cuda(mma ? dispatch_gemv_mma(qtype, a, xt, 8, P, stream) : dispatch_gemv(qtype, a, xt, 1, P, stream),
                 "moe_matmul (pairs)");
      return out;
    }
  }
  // Pairs grouped by expert.
  const int mt = tile ? moe_tile_tokens(qtype, P, E) : mma ? gq::MMA_MT : gq::GEMV_MT;
  const int64_t max_chunks = (P + mt - 1) / mt + E + 1;
  at::Tensor sorted = at::empty({P}, id.options().dtype(at::kInt));
  at::Tensor chunks = at::empty({max_chunks, 4}, id.options().dtype(at::kInt));
  check_cuda(gq::launch_moe_route(id.data_ptr(), a.ids64, (int)P, (int)E, mt, sorted.data_ptr<int>(),
                                  reinterpret_cast<int4*>(chunks.data_ptr<int>()), (int)max_chunks, stream),
             "moe_matmul (route)");
  a.mode = gq::GEMV_CHUNKS;
  a.sorted = sorted.data_ptr<int>();
  a.chunks = reinterpret_cast<const int4*>(chunks.data_ptr<int>());
  check_cuda(tile  ? dispatch_tile(qtype, a, xt, mt, max_chunks, p.options(), stream)
             : mma ? dispatch_gemv_mma(qtype, a, xt, mt, max_chunks, stream)
                   : dispatch_gemv(qtype, a, xt, mt, max_chunks, stream),
             "moe_matmul (chunks)");
  return out;
}

// Packs rows into ggml blocks, byte-exact with ggml_quantize_chunk (no imatrix).
at::Tensor quantize(const at::Tensor& weight, int64_t qtype) {
  TypeInfo ti;
  TORCH_CHECK(type_info(qtype, ti) && gq::quantize_supported_type(qtype), "gguf_kernels: quantize: ggml type ", qtype,
              " is not supported");
  TORCH_CHECK(weight.is_cuda(), "gguf_kernels: quantize: weight must be a CUDA tensor");
  TORCH_CHECK(weight.dim() >= 1, "gguf_kernels: quantize: weight must be [..., K], got a scalar");
  gq::QuantIn in;
  TORCH_CHECK(dtype_of(weight.scalar_type(), in),
              "gguf_kernels: quantize: weight must be float32, bfloat16 or float16, got ",
              c10::toString(weight.scalar_type()));
  const int64_t K = weight.size(-1);
  TORCH_CHECK(K % ti.block == 0, "gguf_kernels: quantize: rows of ", K, " elements are not a multiple of the block size ",
              ti.block);
  const OnDevice on(weight.device());
  std::vector<int64_t> shape(weight.sizes().begin(), weight.sizes().end() - 1);
  shape.push_back(K / ti.block * ti.bytes);
  at::Tensor out = at::empty(shape, weight.options().dtype(at::kByte));
  const int64_t nblocks = weight.numel() / ti.block;
  if (nblocks == 0) return out;
  at::Tensor w = contiguous16(weight);
  check_cuda(gq::launch_quantize(qtype, w.data_ptr(), in, nblocks, out.data_ptr<uint8_t>(),
                                 c10::cuda::getCurrentCUDAStream()),
             "quantize");
  return out;
}

}  // namespace

#define GQ_STR_(x) #x
#define GQ_STR(x) GQ_STR_(x)
#define GQ_CAT_(a, b) a##b
#define GQ_CAT(a, b) GQ_CAT_(a, b)
#define GQ_TORCH_LIBRARY(ns, m) TORCH_LIBRARY(ns, m)
#define GQ_TORCH_LIBRARY_IMPL(ns, k, m) TORCH_LIBRARY_IMPL(ns, k, m)

GQ_TORCH_LIBRARY(TORCH_EXTENSION_NAME, m) {
  m.def("dequantize(Tensor packed, int qtype, ScalarType dtype) -> Tensor");
  m.def("get_rows(Tensor packed, Tensor ids, int qtype, ScalarType dtype) -> Tensor");
  m.def("matmul(Tensor x, Tensor packed, int qtype) -> Tensor");
  m.def("moe_matmul(Tensor x, Tensor packed, Tensor ids, int qtype) -> Tensor");
  m.def("quantize(Tensor weight, int qtype) -> Tensor");
}

GQ_TORCH_LIBRARY_IMPL(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("dequantize", &dequantize);
  m.impl("get_rows", &get_rows);
  m.impl("matmul", &matmul);
  m.impl("moe_matmul", &moe_matmul);
  m.impl("quantize", &quantize);
}

// Importable as a Python module (the ops register when the .so is loaded).
PyMODINIT_FUNC GQ_CAT(PyInit_, TORCH_EXTENSION_NAME)(void) {
  static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, GQ_STR(TORCH_EXTENSION_NAME), nullptr, 0, nullptr};
  return PyModule_Create(&module);
}
