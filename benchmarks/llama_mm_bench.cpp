// llama.cpp's own matmul (ggml-cuda MMVQ / MMQ / mul_mat_id) on the cases bench_matmul.py
// times, so both sides come from the same machine and run.
//
//   g++ -O2 -std=c++17 llama_mm_bench.cpp -I<llama.cpp>/ggml/include -L<build>/bin \
//       -lggml -lggml-base -lggml-cuda -Wl,-rpath,<build>/bin -o llama_mm_bench
//   ./llama_mm_bench cases.txt out.json
//
// cases.txt: one case a line, "dense TYPE K N M" or "moe TYPE K N T E TOPK [PAIR_ROWS]" (PAIR_ROWS 1:
// an x row a (token, slot) pair, else one a token). Weights: a tile of
// random rows quantized by ggml_quantize_chunk, repeated, spread over > 2 GB of copies; the
// activations are f32 as llama.cpp feeds them (so the time includes its quantize-activation
// kernel). One ggml graph holds one matmul per copy; the median wall time of a graph compute
// (synchronised) over the copies is reported in microseconds.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cuda.h"
#include "ggml.h"

static ggml_type type_from_name(const std::string& name) {
  for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
    const char* n = ggml_type_name((ggml_type)t);
    if (n && strcasecmp(n, name.c_str()) == 0) return (ggml_type)t;
  }
  if (strcasecmp(name.c_str(), "BF16") == 0) return GGML_TYPE_BF16;
  fprintf(stderr, "unknown type %s\n", name.c_str());
  exit(2);
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s cases.txt out.json\n", argv[0]);
    return 2;
  }
  ggml_backend_t be = ggml_backend_cuda_init(0);
  if (!be) {
    fprintf(stderr, "no CUDA backend\n");
    return 1;
  }
  std::ifstream in(argv[1]);
  std::string line;
  std::mt19937 rng(1234);
  std::normal_distribution<float> nd(0.f, 1.f);
  FILE* out = fopen(argv[2], "w");
  fprintf(out, "{\n");
  bool first = true;
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    std::string kind, tname;
    int64_t K, N, M, E = 1, topk = 1, pair_rows = 0;
    if (!(ss >> kind >> tname >> K >> N >> M)) continue;
    if (kind == "moe") ss >> E >> topk >> pair_rows;  // pair_rows: an x row a (token, slot), as ggml's down projection
    const ggml_type type = type_from_name(tname);
    const size_t row = ggml_row_size(type, K);
    const size_t bytes = row * N * E;
    int C = (int)std::min<double>(kind == "moe" ? 64 : 256, std::max(2.0, std::ceil(2.2e9 / bytes)));
    if (M > 64) C = std::min(C, 4);

    ggml_init_params ip = {ggml_tensor_overhead() * (size_t)(4 * C + 16) + ggml_graph_overhead_custom(4 * C + 16, false),
                           nullptr, true};
    ggml_context* ctx = ggml_init(ip);
    ggml_tensor* x = kind == "moe" ? ggml_new_tensor_3d(ctx, GGML_TYPE_F32, K, pair_rows ? topk : 1, M)
                                   : ggml_new_tensor_2d(ctx, GGML_TYPE_F32, K, M);
    ggml_tensor* ids = kind == "moe" ? ggml_new_tensor_2d(ctx, GGML_TYPE_I32, topk, M) : nullptr;
    std::vector<ggml_tensor*> ws(C);
    ggml_cgraph* gf = ggml_new_graph_custom(ctx, 4 * C + 16, false);
    for (int c = 0; c < C; ++c) {
      ws[c] = kind == "moe" ? ggml_new_tensor_3d(ctx, type, K, N, E) : ggml_new_tensor_2d(ctx, type, K, N);
      ggml_tensor* o = kind == "moe" ? ggml_mul_mat_id(ctx, ws[c], x, ids) : ggml_mul_mat(ctx, ws[c], x);
      ggml_build_forward_expand(gf, o);
    }
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, be);
    if (!buf) {
      fprintf(stderr, "allocation failed for %s\n", line.c_str());
      return 1;
    }
    // weights: a tile of 64 random rows, quantized, repeated
    const int64_t tile_rows = 64;
    std::vector<float> src(tile_rows * K);
    for (auto& v : src) v = nd(rng) * 0.02f;
    std::vector<uint8_t> tile(tile_rows * row);
    if (type == GGML_TYPE_F16 || type == GGML_TYPE_BF16 || type == GGML_TYPE_F32) {
      for (int64_t i = 0; i < tile_rows * K; ++i) {
        if (type == GGML_TYPE_F16) ((ggml_fp16_t*)tile.data())[i] = ggml_fp32_to_fp16(src[i]);
        else if (type == GGML_TYPE_BF16) ((ggml_bf16_t*)tile.data())[i] = ggml_fp32_to_bf16(src[i]);
        else ((float*)tile.data())[i] = src[i];
      }
    } else {
      ggml_quantize_chunk(type, src.data(), tile.data(), 0, tile_rows, K, nullptr);
    }
    std::vector<uint8_t> full(bytes);
    for (size_t off = 0; off < bytes; off += tile.size()) memcpy(full.data() + off, tile.data(), std::min(tile.size(), bytes - off));
    for (int c = 0; c < C; ++c) ggml_backend_tensor_set(ws[c], full.data(), 0, bytes);
    std::vector<float> xs(ggml_nelements(x));
    for (auto& v : xs) v = nd(rng);
    ggml_backend_tensor_set(x, xs.data(), 0, xs.size() * sizeof(float));
    if (ids) {
      std::vector<int32_t> iv(topk * M);
      std::vector<int32_t> perm(E);
      for (int64_t t = 0; t < M; ++t) {
        for (int64_t e = 0; e < E; ++e) perm[e] = (int32_t)e;
        std::shuffle(perm.begin(), perm.end(), rng);
        for (int64_t k = 0; k < topk; ++k) iv[t * topk + k] = perm[k];
      }
      ggml_backend_tensor_set(ids, iv.data(), 0, iv.size() * sizeof(int32_t));
    }
    for (int w = 0; w < 3; ++w) ggml_backend_graph_compute(be, gf);
    ggml_backend_synchronize(be);
    std::vector<double> ts;
    for (int r = 0; r < 11; ++r) {
      auto t0 = std::chrono::high_resolution_clock::now();
      ggml_backend_graph_compute(be, gf);
      ggml_backend_synchronize(be);
      auto t1 = std::chrono::high_resolution_clock::now();
      ts.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / C);
    }
    std::sort(ts.begin(), ts.end());
    const double us = ts[ts.size() / 2];
    printf("%-5s %-7s %6ld -> %6ld M=%4ld%s: %9.1f us\n", kind.c_str(), tname.c_str(), (long)K, (long)N, (long)M,
           kind == "moe" ? " (moe)" : "", us);
    fflush(stdout);
    fprintf(out, "%s  \"[\\\"%s\\\", \\\"%s\\\", %ld, %ld, %ld]\": %.3f", first ? "" : ",\n", kind.c_str(), tname.c_str(),
            (long)K, (long)N, (long)M, us);
    first = false;
    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
  }
  fprintf(out, "\n}\n");
  fclose(out);
  ggml_backend_free(be);
  return 0;
}
