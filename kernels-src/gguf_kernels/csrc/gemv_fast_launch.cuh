// Host side of the fast small-M matmul: environment knobs, launches (dependent, clustered), and the
// rules that pick a kernel and its geometry for each call (gemv_fast_kernel.cuh, gemv_stream_kernel.cuh).
#pragma once
#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_set>

#include "gemv_stream_kernel.cuh"
#include "launch.h"

namespace gq {
namespace fast {

// An integer knob from the environment: its value, or `unset` when it is not set.
inline int env_knob(const char* name, int unset = 0) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : unset;
}
// A default-on path's switch: off when `name` is set to 0.
inline bool env_off(const char* name) { return std::getenv(name) && !env_knob(name); }

// A matmul kernel here starts as a programmatic dependent launch (PDL) of the kernel before it on the
// stream (`pdl`), so that its CTAs are placed, and start, while that kernel's last CTAs run; each
// waits (griddepcontrol.wait) before it reads anything. A plain launch where the launch with the
// attribute fails, or GGUF_KERNELS_PDL=0.
inline bool knob_pdl_off() {
  static const bool v = env_off("GGUF_KERNELS_PDL");
  return v;
}
// Clusters of z CTAs along x.
inline cudaLaunchAttribute cluster_attr(int z) {
  cudaLaunchAttribute at = {};
  at.id = cudaLaunchAttributeClusterDimension;
  at.val.clusterDim.x = z;
  at.val.clusterDim.y = at.val.clusterDim.z = 1;
  return at;
}
// A launch that needs attribute `need` (clusters of CTAs, a cooperative grid: no plain launch then, the kernel
// relies on it) or none (nullptr), with programmatic serialization beside it where `pdl` and the driver
// takes both; cudaErrorNotSupported where the driver takes no launch with `need`.
template <typename K, typename... A>
cudaError_t launch_kernel_with(const cudaLaunchAttribute* need, K kernel, dim3 grid, dim3 block, size_t smem,
                               cudaStream_t stream, bool pdl, A... a) {
  pdl = pdl && !knob_pdl_off();
  if (pdl || need) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[2];
    int n = 0;
    if (need) attr[n++] = *need;
    if (pdl) {
      attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attr[n].val.programmaticStreamSerializationAllowed = 1;
      ++n;
    }
    cfg.attrs = attr;
    cfg.numAttrs = n;
    if (cudaLaunchKernelEx(&cfg, kernel, a...) == cudaSuccess) return cudaGetLastError();
    cudaGetLastError();
    if (need) {  // without PDL (the needed attribute comes first), else not at all
      cfg.numAttrs = 1;
      if (pdl && cudaLaunchKernelEx(&cfg, kernel, a...) == cudaSuccess) return cudaGetLastError();
      cudaGetLastError();
      return cudaErrorNotSupported;
    }
  }
  kernel<<<grid, block, smem, stream>>>(a...);
  return cudaGetLastError();
}
template <typename K, typename... A>
cudaError_t launch_kernel(K kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t stream, bool pdl, A... a) {
  return launch_kernel_with(nullptr, kernel, grid, block, smem, stream, pdl, a...);
}

// Bytes of a row of K elements, whole blocks packed.
template <int T>
constexpr int64_t packed_row_bytes(int K) {
  return (int64_t)K / Traits<T>::BLOCK * Traits<T>::BYTES;
}
// Rows of whole chunks of K, packed.
template <int T>
bool rows_chunked(int K, int64_t row_bytes) {
  if constexpr (!FT<T>::OK) {
    return false;
  } else {
    return K > 0 && K % FT<T>::CE == 0 && row_bytes == packed_row_bytes<T>(K);
  }
}
// Rows both kernels here take: rows_chunked, a multiple of 16 bytes long (so every row, and every stage of the
// stream kernel but Q6_K's, starts 16-byte aligned).
template <int T>
bool rows_fit(int K, int64_t row_bytes) {
  return rows_chunked<T>(K, row_bytes) && row_bytes % 16 == 0;
}
// Q6_K rows of whole chunks that are a multiple of 4 bytes but not of 16 (K a multiple of 512, not of 2048: Qwen3-14B's
// 5120 and 17408, Qwen3-32B's 25600, Qwen2.5-7B's 3584 and 18944), which gemv_stream_kernel's MT = 2 forms (ONE at
// M = 1, the plain launch at M = 2) and its K split take: each row's stage copied from the 16-byte boundary below
// its own start (the kernel's MR form) up to the one above its end, so the weights must start and end on one (no
// copy reads past them); its chunks start 4-byte aligned in every row, as Q6_K's stages already do (MIS).
template <int T>
bool rows_mis(int N, int K, int64_t row_bytes, const void* w) {
  return FT<T>::MIS && rows_chunked<T>(K, row_bytes) && row_bytes % 16 != 0 && row_bytes % 4 == 0 &&
         (N * row_bytes) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0;
}
// Ragged rows gemv_stream_kernel<..., RAG> takes at M = 1 (and MoE pairs): whole blocks, packed, rows and
// experts starting 4-byte aligned, so its decoders' word alignments stay compile-time constants; MXFP4
// only rows of 4k + 2 bytes (K = 2880: even rows 4-byte aligned, odd ones 2 bytes past, chunk_ragged),
// its rows of 4k bytes (K = 768) stay on gemv_mma_kernel. Only the types whose blocks are not a
// multiple of 16 bytes have such rows.
template <int T>
constexpr bool may_rag() {
  return FT<T>::OK && Traits<T>::BYTES % 16 != 0;
}
// The types whose MoE pairs take ragged flat items (gemv_stream_kernel<T, XT, true, 1, true, true>)
template <int T>
constexpr bool flat_rag() {
  return T == MXFP4 || T == IQ4_XS;
}
template <int T>
bool rows_rag(int N, int K, int64_t row_bytes, int64_t expert_bytes) {
  if constexpr (!may_rag<T>()) {
    return false;
  } else {
    return N >= 2 && K > 0 && K % Traits<T>::BLOCK == 0 && row_bytes == packed_row_bytes<T>(K) &&
           row_bytes % 4 == (T == MXFP4 ? 2 : 0) && expert_bytes % 4 == 0;
  }
}

// Scratch bytes for the prep records of gemv_fast_kernel, or 0 when it does not take (T, K, M, row_bytes).
template <int T>
size_t scratch_bytes(int K, int M, int64_t row_bytes) {
  // Q6_K (16-element groups: twice the B records, 4 instructions per weight) measured no faster than
  // gemv_mma_kernel at M = 1 and slower at M = 8 on this kernel (NOTES.md v4): only the stream kernel
  // takes it, unless GGUF_KERNELS_FAST_Q6K=1.
  static const int q6k = env_knob("GGUF_KERNELS_FAST_Q6K");
  const int max_m = T == Q6_K ? (q6k ? 8 : 0) : 8;
  if (M < 1 || M > max_m || !rows_fit<T>(K, row_bytes)) return 0;
  return Prep<T>::scratch(K, M);
}

struct Choice { int W, S, U; };

// gemv_fast_kernel's dynamic shared memory: at most 200 KB (the bound its launch rules were measured
// under), less where the device's opt-in limit is lower.
inline size_t gemv_fast_smem_cap() { return std::min<size_t>(200 * 1024, (size_t)dev_props().optin); }
template <int T>
cudaError_t gemv_fast_attrs() {
  static std::atomic<uint64_t> done{0};
  return smem_attrs_once(done, gemv_fast_kernel<T>, gemv_fast_smem_cap());
}

// Resident CTAs per SM for (W warps, smem bytes) on the current device, from the occupancy calculator
// (registers, shared memory, threads), cached per (device, U, W, S, M) without a lock (choose() asks
// up to 15 of them a launch): 0 = not asked yet, else the count + 1.
template <int T>
int ctas_per_sm(int W, int S, int M, int U, size_t smem) {
  static std::atomic<int> cache[kMaxDevices][3][5][3][8];
  const int dev = current_device();
  int wi = 0;
  while ((1 << wi) < W) ++wi;
  std::atomic<int>* v = tracked_device(dev) ? &cache[dev][U >= 4 ? 2 : U - 1][wi][S - 2][M - 1] : nullptr;
  if (v) {
    const int c = v->load(std::memory_order_relaxed);
    if (c) return c - 1;
  }
  int n = 0;
  if ((smem > 48 * 1024 && gemv_fast_attrs<T>() != cudaSuccess) ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, gemv_fast_kernel<T>, 32 * W, smem) != cudaSuccess) {
    cudaGetLastError();
    n = 0;
  }
  if (v) v->store(n + 1, std::memory_order_relaxed);
  return n;
}

template <int T>
size_t stage_bytes(int M, int U) {
  using L = FT<T>;
  return 16 * (size_t)rs_bytes<T>(U) + (size_t)U * (L::CE / L::GS) * (M * 32 * L::STEPS + Prep<T>::gr(M));
}
template <int T>
size_t smem_bytes(int W, int S, int M, int U) {
  return std::max<size_t>((size_t)W * S * stage_bytes<T>(M, U), (size_t)W * 4 * 32 * 4);
}

// Experiment knobs (0 = automatic): GGUF_KERNELS_FAST_U (type chunks per stage), _W (warps per CTA),
// _S (stages).
inline int knob_u() { static const int v = env_knob("GGUF_KERNELS_FAST_U"); return v; }
inline int knob_w() { static const int v = env_knob("GGUF_KERNELS_FAST_W"); return v; }
// _S below 2 is ignored: the stage loops issue the next stage's copy into buffer (cur - 1) mod S before reading
// buffer cur, so one buffer would be overwritten while read, and a one-stage unit read before its copy lands (session
// 97: S = 1 timed "faster" on every MoE row on wrong numbers)
inline int knob_s() {
  static const int v = env_knob("GGUF_KERNELS_FAST_S");
  return v >= 2 ? v : 0;
}

// Pick warps per CTA (split of K) and stages: prefer configurations where every CTA is resident at
// once (one wave), and among those the most weight bytes in flight per SM, discounted below 16 warps
// an SM (NOTES.md v15: 8 warps of 2 stages beat 4 warps of 4 stages, the same bytes in flight, by
// 8-17% at M = 5..8 on 14336 -> 4096 and 4096 -> 4096 for Q4_0, Q4_K and Q5_K).
// U: type chunks per stage (each stage asks for U * CB contiguous bytes of every row at once). Measured
// (NOTES.md v4b): U = 2 helped Q8_0 (~8%), U = 4 vs 1 was within noise for Q4_0/Q4_K, U >= 2 hurt Q6_K
// (fewer warps per SM); so the smallest U with runs of >= 400 bytes, for M <= 4 (at M = 8 the B
// records make U > 1 stages too large for one wave). GGUF_KERNELS_FAST_U overrides.
template <int T>
int choose_u(int K, int M) {
  using L = FT<T>;
  const int nch = K / L::CE;
  const int want = knob_u();
  if (want == 1 || want == 2 || want == 4) return nch % want == 0 ? want : 1;
  if (M > 4) return 1;
  for (int U = 1; U <= 4; U *= 2)
    if (nch % U == 0 && U * L::CB >= 400) return U;
  return nch % 4 == 0 ? 4 : (nch % 2 == 0 ? 2 : 1);
}

template <int T>
Choice choose(int N, int K, int M, int sms) {
  using L = FT<T>;
  const int U = choose_u<T>(K, M);
  const int tiles = (N + 15) / 16, nch = K / (U * L::CE);
  Choice best{1, 2, U};
  double best_score = -1.0;
  for (int W = 1; W <= 16; W *= 2) {
    if (W > 1 && W > nch) break;
    if (knob_w() && W != knob_w()) continue;
    for (int S = 2; S <= 4; ++S) {
      if (knob_s() && S != knob_s()) continue;
      const size_t smem = smem_bytes<T>(W, S, M, U);
      if (smem > gemv_fast_smem_cap()) continue;
      const int per_sm = ctas_per_sm<T>(W, S, M, U, smem);
      if (per_sm < 1) continue;
      const int mych = (nch + W - 1) / W;
      const bool one_wave = tiles <= sms * per_sm;
      const double warps_sm = std::min<double>((double)tiles * W / sms, (double)per_sm * W);
      const double inflight = warps_sm * std::min(S - 1, mych) * 16.0 * U * L::CB;
      // fewer warps per SM leave the decode latency-bound (v4: 6.8 warps/SM for IQ4_XS; v15)
      const double score = (one_wave ? 1e12 : 0.0) + inflight * std::min(1.0, warps_sm / 16.0) - 1e-3 * smem;
      if (score > best_score) { best_score = score; best = {W, S, U}; }
    }
  }
  return best;
}

// Dynamic shared memory a gemv_stream_kernel CTA may ask: the device's opt-in limit (227 KB on the H200),
// or GGUF_KERNELS_FAST_SMEM_KB below it (200: the cap of v6..v22, for A/B runs). The last 27 KB let
// Q6_K's 8 tokens at M = 5..8 sit beside 8 warps' stages (4096 -> 14336: 212 KB, the plain launch) or a
// 4-way K split (14336 -> 4096: 213 KB): 35.3 -> 24.7 us and 32.1 -> 27.9 us at M = 5 (NOTES v23).
// Dynamic shared memory that keeps a CTA alone on its SM (just over half the SM's, less the driver's
// reserve a CTA): what the stream kernels' dependent launches and K splits ask at least (NOTES.md v13).
inline size_t one_cta_an_sm_smem() {
  const DevProps& sm = dev_props();
  return (size_t)(sm.smem / 2 - sm.reserved + 16);
}
inline size_t stream_smem_cap() {
  static const int knob_kb = env_knob("GGUF_KERNELS_FAST_SMEM_KB", -1);
  const size_t optin = (size_t)dev_props().optin;
  return knob_kb >= 0 ? std::min((size_t)knob_kb * 1024, optin) : optin;
}
// Raises gemv_stream_kernel<...>'s dynamic shared memory to stream_smem_cap() on the current device,
// with all of the SM's shared memory as carve-out (else the driver may keep L1 and fit fewer CTAs
// than stream_ctas_per_sm counts). Once a device and instantiation.
template <int T, typename XT, bool MOE, int MT, bool RAG, bool ONE, bool KS = false, bool GZ = false, bool GU = false,
          bool MR = false>
cudaError_t stream_attrs() {
  static std::atomic<uint64_t> done{0};
  return smem_attrs_once(done, gemv_stream_kernel<T, XT, MOE, MT, RAG, ONE, KS, GZ, GU, MR>, stream_smem_cap(), 100);
}
// Resident CTAs per SM of gemv_stream_kernel<T, XT, MOE, MT> with WPC warps and `smem` bytes: registers,
// shared memory and threads, from the function's attributes (read once) and the current device's
// (stream_attrs gives the launch the carve-out this count assumes).
template <int T, typename XT, bool MOE, int MT, bool RAG, bool ONE = false, bool MR = false>
int stream_ctas_per_sm(int WPC, size_t smem) {
  static int regs = 0;
  const DevProps& sm = dev_props();
  if (!regs) {
    const auto kernel = gemv_stream_kernel<T, XT, MOE, MT, RAG, ONE, false, false, false, MR>;
    cudaFuncAttributes fa;
    // (without a device, e.g. the probes on a host: the kernel's cap, which the stream kernels reach or nearly)
    regs = cudaFuncGetAttributes(&fa, kernel) == cudaSuccess ? std::max(fa.numRegs, 1)
                                                             : stream_reg_cap<T, MOE, MT, RAG, ONE>();
    cudaGetLastError();
  }
  // registers: a warp's are allocated in units of 256 from one of the SM's 4 sub-partitions, which a
  // CTA's warps fill in turn (19 warps of 104 registers do not fit, though 19 x 104 x 32 < 65,536)
  const int warp_regs = (regs * 32 + 255) / 256 * 256;
  return std::min({sm.regs / 4 / warp_regs * 4 / WPC, (int)(sm.smem / (smem + sm.reserved)), sm.threads / (32 * WPC)});
}

// gemv_stream_kernel's launch for `units` units and `fixed` bytes of records: WPC warps per CTA, S = 2
// stages, one wave of CTAs, the units spread evenly over just enough CTAs. WPC: the largest of 16, 8,
// 4 whose shared memory fits, since every CTA builds its own records (NOTES.md v7, a sweep of 4 / 8 /
// 16 warps x 2 / 3 stages: 16 warps in one CTA per SM beat 4 warps in five CTAs by 1-10% at M = 1
// and 10-15% at M = 2, 4, though that means more rounds of units per warp; 3 stages no better); or 19
// at M = 1 for types under 8 bits a weight, where rounds x warps (the busiest SM's share) is smaller:
// an SM runs its warps' stages at about a fixed rate, so 4096 -> 14336 (7168 units) in 3 rounds of
// 19 warps on 126 SMs beats 4 rounds of 16 on 112 by 4-8% (NOTES.md v10; Q8_0, bound by DRAM, lost 3%).
// Few units: fewer warps per CTA, one unit each, over more SMs. {0, ...}: the records do not fit, or
// this kernel would lose to the tile kernel (v7 measurements): when fewer than half the warps that
// fit have a unit and a unit is more than 16 stages (a warp's stages run one after another: 14336 ->
// 4096 at M = 4, 512 units of 28 stages, took 30 us against the tile kernel's 27), or when the CTA's
// threads have more than 8 groups of activations each to turn into records (4096 -> 1024 at M = 4:
// 128 units, one warp per CTA, 16 groups a thread, 15 us against 7), or more than 4 and more than
// the stages each warp then streams (Q6_K, same call against gemv_mma_kernel: 8 groups a thread and
// 4 stages, 4096 -> 4096 at M = 4, 14.1 us against 11.2; 8 and 2, 4096 -> 1024 at M = 2, 9.2 against
// 6.9; 7 and 7, 14336 -> 4096 at M = 2, 25.6 against 29.9).
// work: the busiest SM's stages; spread: the dense M = 1 launch on every SM, its units dealt warp-major (v120)
struct StreamChoice { int WPC, S, ctas; size_t smem; int split; int64_t work; bool spread = false; };
inline bool knob_split_off() {
  static const bool v = env_off("GGUF_KERNELS_FAST_SPLIT");
  return v;
}
// GGUF_KERNELS_FAST_SPREAD=0: dense M = 1 keeps its rounds of units packed on `ctas` CTAs (before v120; A/B timing)
inline bool knob_spread_off() {
  static const bool v = env_off("GGUF_KERNELS_FAST_SPREAD");
  return v;
}
// Launches also counted on 12 warps a CTA (choose_stream): v138, dense M = 1 of Q6_K and Q8_0, both forms; v140, the
// dense MT = 2 kernel (M = 2) of IQ4_XS and MXFP4
template <int T, bool MOE, int MT, bool ONE>
constexpr bool stream_count12() {
  return !MOE && (((MT == 1 || ONE) && (T == Q6_K || T == Q8_0)) || (MT == 2 && !ONE && (T == IQ4_XS || T == MXFP4)));
}
template <int T, typename XT, bool MOE, int MT, bool RAG, bool ONE = false, bool MR = false>
StreamChoice choose_stream(int units, size_t fixed, int nst, int groups) {
  const int sms = num_sms();
  const int S = knob_s() ? knob_s() : 2;
  constexpr bool FLAT = stream_flat(MOE, MT, ONE);  // stages of 16 items, and the item sums (MR: BR's, v113)
  constexpr size_t stage = FLAT ? 16 * flat_slot_bytes<T, RAG, FLAT && MR>() : 2 * MT * stream_rs<T, MT, RAG>();
  // tensor-map copies (NOTES.md v72, v73): the records padded to 128 bytes, a barrier a stage buffer
  constexpr bool BULK = stream_bulk<T, MOE, MT, RAG, ONE, false, MR>();
  const size_t fx = stream_recs_end(fixed, BULK);
  const auto smem_for = [&](int WPC) {
    return fx + (size_t)WPC * (S * (stage + (BULK ? kStageBarBytes : 0)) + (FLAT ? flat_sum_bytes<T, RAG>() : 0));
  };
  StreamChoice best{0, 0, 0, 0, 0, 0};
  int best_rounds = 0, best_cap = 0, best_n = 0;
  int64_t best_work = 0;  // rounds x warps per SM: the busiest SM's share of the units
  constexpr bool M1 = (MT == 1 || ONE) && FT<T>::CB < FT<T>::CE;  // 19 (ONE: 14 too) warps considered
  // v137: dense M = 1 of IQ4_XS and MXFP4 with at least 48 rows an SM, both forms (row pairs, ONE's 4-row units) on
  // 12 warps a CTA, where they took 16 or 14: their table decodes run fewer stages a second an SM with more warps
  // (knob sweep, H100, session 89, us: 5120 -> 17408 23.0 -> 20.9 / 21.9 -> 20.1, 3584 -> 18944 17.7 -> 15.8 /
  // 18.0 -> 15.8, 4096 -> 14336 14.5 -> 13.9 / 14.2 -> 13.8, 8192 -> 28672 -3% / -1%; 2560 -> 9728 level;
  // fewer rows are where 12 warps leave SMs short: 14336 -> 4096 and 4096 -> 4096 keep their launches)
  constexpr bool TABLE_M1 = !MOE && (MT == 1 || ONE) && (T == IQ4_XS || T == MXFP4);
  const bool w12 = TABLE_M1 && (int64_t)units * (ONE ? 4 : 2) >= 48LL * sms;
  // WPC warps a CTA, taken where it gives the busiest SM fewer units than the launch chosen so far (or none fits yet)
  const auto consider = [&](int WPC) {
    const size_t smem = smem_for(WPC);
    const int n = smem > stream_smem_cap() ? 0 : stream_ctas_per_sm<T, XT, MOE, MT, RAG, ONE, MR>(WPC, smem);
    if (n <= 0) return false;
    const int rounds = (units + n * sms * WPC - 1) / (n * sms * WPC);
    const int64_t work = (int64_t)rounds * WPC * n;
    if (!best.WPC || work < best_work) {
      best_rounds = rounds;
      best_n = n;
      best_cap = n * sms * WPC;
      best_work = work;
      best = {WPC, S, (units + rounds * WPC - 1) / (rounds * WPC), smem, 0, work * nst};
    }
    return true;
  };
  for (int WPC : {19, 16, 14, 12, 8, 4}) {
    // 14: where 16 warps' stages do not fit beside the records (ONE; MoE over hit experts, 8 tokens' records);
    // 12: MoE's ragged flat items, whose 160 registers fit 12 warps an SM, not 14 (v41), and w12
    constexpr bool R160 = RAG && MOE && ONE;
    if (knob_w() ? WPC != knob_w()
        : w12    ? WPC != 12
                 : (WPC == 19 && !M1) || (WPC == 14 && !ONE && !(MOE && MT == 8)) || (WPC == 12 && !R160)) continue;
    if (!consider(WPC)) continue;
    if (WPC != 19 && !(ONE && WPC == 16)) break;
  }
  // v138: dense M = 1 of Q6_K and Q8_0 also on 12 warps a CTA, where that gives the busiest SM fewer stages than the
  // launch above (knob sweep, H100, session 89, us: Q6_K 5120 -> 17408 31.0 -> 29.1, 3584 -> 18944 24.1 -> 22.6,
  // 2560 -> 9728 13.5 -> 12.4 (Q6_K's rows there are not 16-byte multiples: ONE alone, 126 -> 108, 84 -> 72, 56 -> 48
  // stages), Q8_0 -1..-2.5% there; where 12 warps count more stages, as on 4096 -> 14336 and 4096 -> 8192, Q6_K lost
  // 5-7% with them)
  // (v140: from two rounds; one is left to the few-units sizing below, which splits MT = 2's stages over the warps.
  // A/B on the H100, session 91, M = 2: IQ4_XS -1.9..-8.0% on five shapes, MXFP4 -0.4..-2.9%)
  if (stream_count12<T, MOE, MT, ONE>() && !knob_w() && best.WPC && best_rounds >= 2) consider(12);
  // (v139 put gpt-oss's MoE units over the hit experts, MT = 8 on ragged rows, on 8 warps from two rounds of 16: the
  // lane-pair copies' shared-memory wavefronts throttled 16 warps. v142's copies of 16 lanes a row lifted that, and
  // 16 warps won again: T = 3, 6, 7, 8 5-9% faster than 8, T = 8 59.3 -> 55.0 us; H100, session 92)
  int64_t per_warp = (int64_t)best_rounds * nst;  // stages of the busiest warp
  if (best.WPC && best_rounds == 1 && units < best.WPC * sms) {
    // Few units: fewer warps per CTA, a unit each, on more SMs; or, MT = 2 and 4 (NOTES.md v10), where
    // that leaves at most 4 warps per SM or chains of 8 stages and more, all the warps, each CTA's stages
    // split evenly over them, if that at least halves the busiest warp's chain (MT = 8 lost 4-35% split,
    // MT = 2 with 8 warps of 4 stages 11%). Not ONE, whose kernel does not split: sized as split, its
    // units sat on the first CTAs (NOTES.md v33).
    const int few = std::max(1, (units + sms - 1) / sms);
    const int64_t items = (int64_t)units * nst;
    const int W = (int)std::min<int64_t>(best.WPC, (items + sms - 1) / sms);  // on as many SMs as there are
    const int G = (int)std::min<int64_t>({best_cap / best.WPC, (items + W - 1) / W, units});  // CTAs
    const size_t smem = smem_for(W) + sizeof(float) * split_slot(MT) * ((units + G - 1) / G);
    const int64_t pw = (items + (int64_t)G * W - 1) / ((int64_t)G * W);
    if ((MT == 2 || MT == 4) && !MOE && !ONE && !knob_split_off() && (few <= 4 || nst >= 8) && nst >= 2 * pw &&
        smem <= stream_smem_cap() && stream_ctas_per_sm<T, XT, MOE, MT, RAG, ONE, MR>(W, smem) * sms >= G) {
      best = {W, S, G, smem, 1, pw * W};
      per_warp = pw;
    } else {
      // MT = 8 (what the K split turned away): warps enough that each thread builds at most 8 groups of
      // records, where that many fit (Q6_K 4096 -> 14336 at M = 8: 8 warps, not 7)
      int w = few;
      while (MT == 8 && !MOE && w < best.WPC && (groups + 32 * w - 1) / (32 * w) > 8) ++w;
      best = {w, S, (units + w - 1) / w, smem_for(w), 0, (int64_t)nst * w};
    }
  }
  if (!best.WPC) return best;
  // v120: dense M = 1 in two rounds of units and more, packed on fewer CTAs than SMs (IQ4_XS 2560 -> 9728: 4864 row
  // pairs, three rounds of 16 warps on 102 CTAs, 30 SMs idle): a CTA on every SM, whose warps the kernel deals the
  // units warp-major (FastArgs::spread), so that each SM reads ceil(units / SMs) of them or one less (37 there,
  // against 48) and no warp more than its rounds; only where that lowers the busiest SM's units. `work` stays the
  // packed launch's, so that choose_one_or_old makes the choices it was timed on (spread counts would flip some on a
  // stage or two: 4096 -> 14336's row pairs 55 an SM against ONE's 56). Only there: warp-major dealing on a packed
  // launch cost Q6_K / MXFP4 4096 -> 14336 5% / 2% on the H100 (session 77)
  if (stream_may_spread(MOE, MT, ONE) && !best.split && best_rounds >= 2 && best_n == 1 && best.ctas < sms &&
      (units + sms - 1) / sms < best_rounds * best.WPC && !knob_spread_off()) {
    best.ctas = sms;
    best.spread = true;
  }
  const int per_thread = (groups + 32 * best.WPC - 1) / (32 * best.WPC);  // records each thread builds
  // MR (Q6_K rows that are not 16-byte multiples) up to 12 groups a thread: gemv_mma_kernel is what it declines to
  // (not BR, MR on flat items: 8, as v112's ragged flat items)
  constexpr int max_groups = MR && !FLAT ? 12 : 8;
  if ((!best.split && 2 * units < best_cap && nst > 16) || per_thread > max_groups ||
      (per_thread > 4 && per_thread > per_warp))
    return StreamChoice{0, 0, 0, 0, 0, 0};
  return best;
}

template <int T, typename XT, bool MOE, int MT, bool RAG, bool ONE = false, bool MR = false>
StreamChoice stream_choice(const FastArgs& a, int units, size_t fixed) {
  const int nch = StreamRecs<T>::chunks(a.K), nst = stream_unit_stages<T, MOE, MT, RAG, ONE, MR>(a.K);
  return choose_stream<T, XT, MOE, MT, RAG, ONE, MR>(units, fixed, nst,
                                                 (MOE ? a.nx : ONE ? 1 : MT) * nch * (FT<T>::CE / FT<T>::GS));
}
// The plain MT-token launch of a dense matmul: units of 2 MT rows, each CTA holding MT tokens' records of all of K.
template <int T, typename XT, int MT, bool RAG = false, bool MR = false>
StreamChoice dense_choice(const FastArgs& a) {
  return stream_choice<T, XT, false, MT, RAG, false, MR>(a, (a.N + 2 * MT - 1) / (2 * MT),
                                                         MT * stream_rec_stride<T, MT>(a.K));
}
// The stream kernels launched so far (as a graph's kernel nodes name their functions): they trigger
// their dependents at their start. `add`: record f; else whether f is one.
inline bool stream_kernel_seen(const void* f, bool add) {
  static std::mutex mu;
  static std::unordered_set<const void*> seen;
  std::lock_guard<std::mutex> lock(mu);
  if (add) seen.insert(f);
  return seen.count(f) > 0;
}
// Whether the kernel before this launch on `stream` is a stream kernel, so that a dependent launch
// overlaps its last CTAs; after any other kernel (torch's, which never trigger) it cost 0.4 us (NOTES.md
// v13). Known while the stream is captured into a CUDA graph, from the node the launch will follow;
// outside capture, where each launch waits on the host and nothing overlaps, false.
// GGUF_KERNELS_PDL=2: a dependent launch after any kernel (v13's rule, for A/B runs).
inline bool follows_stream_kernel(cudaStream_t stream) {
  static const bool any = env_knob("GGUF_KERNELS_PDL") == 2;
  if (any) return true;
#if CUDART_VERSION >= 13000
  cudaStreamCaptureStatus st;
  const cudaGraphNode_t* deps = nullptr;
  const cudaGraphEdgeData* edges = nullptr;  // asked for, so that edges with data are not a lossy query
  size_t n = 0;
  if (cudaStreamGetCaptureInfo(stream, &st, nullptr, nullptr, &deps, &edges, &n) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  if (st != cudaStreamCaptureStatusActive || n != 1) return false;
  cudaGraphNodeType type;
  cudaKernelNodeParams p = {};
  if (cudaGraphNodeGetType(deps[0], &type) != cudaSuccess || type != cudaGraphNodeTypeKernel ||
      cudaGraphKernelNodeGetParams(deps[0], &p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return stream_kernel_seen(p.func, false);
#else
  return false;
#endif
}
// MoE local (gemv_stream_kernel): the most x rows one of `ctas` CTAs meets in its range of the P pairs' units
// (N rows of each pair in units of RU rows), x_div pairs an x row.
inline int local_rows(int P, int N, int RU, int x_div, int ctas) {
  const int hN = (N + RU - 1) / RU, units = P * hN;
  int most = 0;
  for (int b = 0; b < ctas; ++b) {
    const int u0 = (int)((int64_t)b * units / ctas), u1 = (int)((int64_t)(b + 1) * units / ctas);
    if (u1 > u0) most = std::max(most, (u1 - 1) / hN / x_div - u0 / hN / x_div + 1);
  }
  return most;
}
// GGUF_KERNELS_FAST_MAP_L2: the weight maps' L2 promotion, 0 none, 1 64 B, 2 128 B (the default), 3 256 B. No row's
// stage is a multiple of 256 bytes (Q8_0's 1088); against 256 B, 128 B is 0.1-1.25 us faster a call on 55 of 70 rows
// (four target shapes and 8192 -> 8192, M = 1, 8; Q8_0 at M = 8 most), 0.15-0.25 slower on 8192 -> 8192 M = 8 (Q4_0,
// Q4_K) and up to 0.35 on 13824 -> 5120 (NOTES.md v77)
inline CUtensorMapL2promotion map_l2_promotion() {
  static const int v = env_knob("GGUF_KERNELS_FAST_MAP_L2", 2);
  return v == 0 ? CU_TENSOR_MAP_L2_PROMOTION_NONE
         : v == 1 ? CU_TENSOR_MAP_L2_PROMOTION_L2_64B
         : v == 2 ? CU_TENSOR_MAP_L2_PROMOTION_L2_128B
                  : CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
}
// The weights as a 2-D tensor map for the stage copies of gemv_stream_kernel's MT-token form (NOTES.md v70-v72):
// N rows of row_bytes in elements of stream_map_elem bytes, a box of a unit's 2 MT rows by a stage's stream_rs bytes,
// rows past N read as zeros. False where it cannot be encoded (the launch then takes no such form). The MR forms
// (rows_mis) copy their stages a row at a time (bulk_copy_1d) and take none, but the K split's on rows of 16k + 8
// bytes (v133; `pairs`, from encode_ks_map, which asks mr_pairs), whose map is of row pairs ([N / 2 pairs, 2
// row_bytes], a box of the unit's MT pairs; rows_mis makes N even there).
template <int T, int MT>
bool encode_weight_map(const FastArgs& a, WeightMap<true>& wm, bool pairs = false) {
  return encode_rows_map(wm.map, a.w, stream_map_elem<T, MT>(), (uint64_t)a.row_bytes, (uint64_t)a.N, pairs ? 1 : 0,
                         (uint32_t)stream_rs<T, MT, false>(), 2 * MT, map_l2_promotion());
}
// The K split's weight map, for its cooperative grid and its clusters alike: MR rows that do not pair take none (a 1-D
// copy a row); false where one is needed and cannot be encoded
template <int T, int MT, bool MR>
bool encode_ks_map(const FastArgs& a, WeightMap<true>& wm) {
  return (MR && !mr_pairs(a.row_bytes)) || encode_weight_map<T, MT>(a, wm, MR);
}
template <int T, typename XT, bool MOE, int MT, bool RAG, bool ONE = false, bool MR = false>
cudaError_t launch_choice(FastArgs a, StreamChoice ch, cudaStream_t stream) {
  if (!ch.WPC) return cudaErrorNotSupported;
  a.S = ch.S;
  a.split = ch.split;
  a.spread = ch.spread;
  // MoE over hit experts: the units were counted for the most hits, so a CTA on every SM
  if constexpr (MOE && MT == 8) ch.ctas = num_sms();
  if (MOE && a.local) {  // the records of the rows the chosen CTAs meet (a.nx was the guess for one a SM)
    const int RU = stream_unit_rows<T, MOE, MT, RAG, ONE, MR>(a.K);
    const int rows = local_rows(a.P, a.N, RU, a.x_div, ch.ctas);
    ch.smem += ((int64_t)rows - a.nx) * (int64_t)stream_rec_stride<T, MT>(a.K);
    a.nx = rows;
  }
  // A dependent launch only after a stream kernel, and where the CTAs are one per SM, with shared memory
  // padded to more than half an SM's so that no two share one: the block scheduler places a dependent
  // grid's CTAs on the SMs as the previous kernel's CTAs leave, and it put two on an SM that another
  // kernel's CTA had left early (IQ4_XS 14336 -> 4096 at M = 1: 17.3 -> 27.7 us; NOTES.md v13).
  const auto kernel = gemv_stream_kernel<T, XT, MOE, MT, RAG, ONE, false, false, false, MR>;
  const bool pdl = ch.ctas <= num_sms() && follows_stream_kernel(stream);
  static const bool recorded = stream_kernel_seen(reinterpret_cast<const void*>(kernel), true);  // once a kernel
  (void)recorded;
  const cudaError_t e = stream_attrs<T, XT, MOE, MT, RAG, ONE, false, false, false, MR>();
  if (e != cudaSuccess) return e;
  const size_t smem = pdl ? std::max(ch.smem, one_cta_an_sm_smem()) : ch.smem;
  if constexpr (stream_bulk<T, MOE, MT, RAG, ONE, false, MR>()) {  // its stages by tensor map (NOTES.md v72, v73)
    WeightMap<true> wm;
    if (!MR && !encode_weight_map<T, MT>(a, wm)) return cudaErrorNotSupported;
    return launch_kernel(kernel, dim3(ch.ctas), dim3(32 * ch.WPC), smem, stream, pdl, a, wm);
  } else {
    return launch_kernel(kernel, dim3(ch.ctas), dim3(32 * ch.WPC), smem, stream, pdl, a, WeightMap<false>{});
  }
}
template <int T, typename XT, bool MOE, int MT, bool RAG, bool ONE = false, bool MR = false>
cudaError_t launch_stream(FastArgs a, int units, size_t fixed, cudaStream_t stream) {
  return launch_choice<T, XT, MOE, MT, RAG, ONE, MR>(a, stream_choice<T, XT, MOE, MT, RAG, ONE, MR>(a, units, fixed),
                                                     stream);
}
inline bool knob_one_off() {
  static const bool v = env_off("GGUF_KERNELS_FAST_ONE");
  return v;
}
// GGUF_KERNELS_FAST_ONE1=0: dense M = 1 row pairs keep their former epilogue (and Q4_0, Q4_K, Q5_K v11's
// stage rule against ONE)
inline bool knob_one1_off() {
  static const bool v = env_off("GGUF_KERNELS_FAST_ONE1");
  return v;
}
inline bool knob_one_force() {  // GGUF_KERNELS_FAST_ONE=2: ONE wherever it takes the case (A/B timing)
  static const bool v = env_knob("GGUF_KERNELS_FAST_ONE") == 2;
  return v;
}
// M = 1, or MoE pairs (one x row a unit), on aligned rows: the MT = 1 form (row pairs, a stage of 8
// chunks; MoE pairs with K of at most 4 chunks: the MT = 2 mapping with both tokens the pair's row) or
// ONE, whichever gives the busiest SM fewer stages (ties: the former, unless ONE keeps at least 12
// warps an SM, or 8 for IQ4_XS and MXFP4, whose table decodes ONE cuts most: 4096 -> 4096 -16%, where
// Q4_0 lost 9% and Q5_K 2%; NOTES.md v11). MoE pairs with K of at most 8 chunks, where the former's
// units are one stage each, take ONE wherever it takes them: its units of 4 rows pay the once-a-unit
// work half as often (Qwen3-30B-A3B's gate, K = 2048, Q4_K at T = 8: 27.1 -> 21.0 us, same call;
// NOTES.md v15). Dense Q4_0, Q4_K and Q5_K, whose row pairs keep one value a lane (ONE1, v32), take ONE
// only where it gives the busiest SM under 0.85 of the former's stages (ONE / former, same call: 5120 ->
// 13824 at 0.82 of the stages 0.92-0.96x the time, 1536 -> 8960 at 0.895 1.11-1.17x, 4096 -> 14336 at
// 0.98 1.07-1.10x), Q5_K under all of them since ONE's stages came by tensor map (v78: 4096 -> 14336 14.45
// -> 14.15 us, where Q4_0 and Q4_K were still no faster); they and Q8_0 not with fewer than 8 warps a CTA
// (few units: 4864 -> 896, 2 warps a CTA, 1.30-1.37x; NOTES.md v33). Q5_K's ties go to ONE with 12 warps a CTA
// (v79: 8192 -> 8192 15.1 -> 14.4 us) or with 8 where a warp streams at most 4 stages (v80, N = 4096 with ONE's 8
// warps: K = 4096, 4 stages, 5.73 -> 5.53 us; 6, 8 stages +0.13, +0.23; 10-14 +0.9..+1.4, as are 4 warps
// a CTA and fewer). GGUF_KERNELS_FAST_ONE=0: the former only.
// The two forms and which one the launch takes, apart from the launch so that benchmarks/choice_probe.cu reads
// the same choice
struct OneOrOld { StreamChoice old, one; bool mt2, take_one; };
template <int T, typename XT, bool MOE>
OneOrOld choose_one_or_old(const FastArgs& a, size_t fixed) {
  const int P = MOE ? a.P : 1, u2 = P * ((a.N + 3) / 4), u1 = P * ((a.N + 1) / 2);
  const int nch = StreamRecs<T>::chunks(a.K);
  OneOrOld c = {};
  c.mt2 = MOE && nch <= 4;
  c.old = c.mt2 ? stream_choice<T, XT, MOE, 2, false>(a, u2, fixed) : stream_choice<T, XT, MOE, 1, false>(a, u1, fixed);
  if (knob_one_off()) return c;
  const StreamChoice one = c.one = stream_choice<T, XT, MOE, 2, false, true>(a, u2, fixed);
  constexpr int tie_warps = T == IQ4_XS || T == MXFP4 ? 8 : 12;
  constexpr bool one1_rule = !MOE && (T == Q4_0 || T == Q4_K);  // the 0.85 threshold (Q5_K left it: v78-v80)
  constexpr int min_warps = !MOE && (one1_rule || T == Q5_K || T == Q8_0) ? 8 : 1;
  // Q5_K's ties at 8 warps a CTA (v80): whether a warp streams at most 4 stages under ONE (a unit's stages x
  // the units a warp), asked only there
  const auto short_chain = [&] {
    const int64_t warps = (int64_t)one.ctas * one.WPC;
    return (int64_t)stream_unit_stages<T, MOE, 2, false, true>(a.K) * ((u2 + warps - 1) / warps) <= 4;
  };
  // Ties with Q6_K's and Q8_0's row pairs on 12 warps go to ONE too, whether v138's count or the few-units sizing gave
  // them 12 (Q6_K 8192 -> 3072, v138's, 24 stages the busiest SM both: ONE's 6 warps of 4 stages 9.87 us, the pairs'
  // 12 warps of 2 stages 10.46; Q6_K 3072 -> 3072, the sizing's, which main had left to the pairs: ONE +0.8%, inside
  // the call's drift; H100, session 90). v141: Q6_K's row pairs on more warps too (4096 -> 4096: the pairs' 16 warps
  // and ONE's 8 tie at 16 stages; ONE 7.10 us against 7.92, knob rows, H100, session 91). Not Q8_0's: 14336 -> 4096's
  // tie at 112 stages, the pairs' 16 warps against ONE's 8, went 23.3 -> 24.4 us on ONE.
  const bool tie_one = one.WPC >= tie_warps || (!MOE && T == Q5_K && one.WPC >= 8 && short_chain()) ||
                       (stream_count12<T, MOE, 1, false>() && (T == Q6_K ? c.old.WPC >= 12 : c.old.WPC == 12));
  const bool fewer = one1_rule && !knob_one1_off() ? 20 * one.work < 17 * c.old.work
                                                   : one.work < c.old.work || (one.work == c.old.work && tie_one);
  c.take_one = one.WPC && (knob_one_force() || (MOE && nch <= 8) || !c.old.WPC || (fewer && one.WPC >= min_warps));
  return c;
}
template <int T, typename XT, bool MOE>
cudaError_t launch_stream_one_or_old(const FastArgs& a, size_t fixed, cudaStream_t stream) {
  const OneOrOld c = choose_one_or_old<T, XT, MOE>(a, fixed);
  if (c.take_one) return launch_choice<T, XT, MOE, 2, false, true>(a, c.one, stream);
  if (c.mt2) return launch_choice<T, XT, MOE, 2, false>(a, c.old, stream);
  if constexpr (!MOE) {  // dense row pairs with one kept value a lane (ONE1, NOTES.md v32), the same geometry
    if (!knob_one1_off()) return launch_choice<T, XT, MOE, 1, false, true>(a, c.old, stream);
  }
  return launch_choice<T, XT, MOE, 1, false>(a, c.old, stream);
}

// M <= stream_max_m() (default 8) goes to gemv_stream_kernel (MT = 1, 2, 4 or 8 tokens) unless
// GGUF_KERNELS_FAST_TILE=1 or the records of K do not fit one CTA; then gemv_fast_kernel, where
// scratch_bytes() > 0.
inline int knob_tile() { static const int v = env_knob("GGUF_KERNELS_FAST_TILE"); return v; }
inline int stream_max_m() {
  static const int v = env_knob("GGUF_KERNELS_FAST_STREAM_MAX_M", 8);
  return v;
}
template <int T, int MT, bool RAG = false>
cudaError_t launch_stream_dense(const FastArgs& a, DType xt, cudaStream_t stream) {
  using BF = __nv_bfloat16;
  return xt == DType::BF16 ? launch_choice<T, BF, false, MT, RAG>(a, dense_choice<T, BF, MT, RAG>(a), stream)
                           : launch_choice<T, __half, false, MT, RAG>(a, dense_choice<T, __half, MT, RAG>(a), stream);
}
// M = 5..8 (and 3, 4: ks_first), tried before the plain launch: the MT = 8 kernel with K split over a cluster of Z
// CTAs (KS; NOTES.md v16, v17), each holding the records of its slice, one unit a warp, the slices' sums
// met in rank 0's shared memory. Where 8 tokens' records of all of K do not fit a CTA (14336 -> 4096,
// 4096 -> 4096, 4096 -> 1024) it replaces the 16-row tile kernel; where they fit (4096 -> 14336) it
// doubles the warps an SM of the plain launch (7 -> 14). Z: the smallest of 2, 4, 8 that gives 8 warps a
// CTA (one CTA an SM, one wave of clusters), whose slices are whole chunks and 16-byte runs of every row
// (Q6_K's 420-byte chunks: 4-byte runs, copied from the 16-byte boundary below as its stages are).
// GGUF_KERNELS_FAST_KS: 0 off, 2 / 4 / 8 that Z wherever it fits.
inline int knob_ks() {
  static const int v = env_knob("GGUF_KERNELS_FAST_KS", -1);
  return v;
}
// Whether M tokens try the K split before the plain launch: M = 5..8 always; M = 3, 4 where the plain
// MT = 4 launch has at most 4 units an SM, and for the table types (MXFP4, IQ4_XS) everywhere. Same
// call on the H200 (NOTES.md v18), plain / split, us: 14336 -> 4096 M = 4 Q4_K 29.0 / 21.4, Q8_0 32.4 /
// 22.6, MXFP4 34.7 / 24.7; 4096 -> 1024 Q4_0 4.9 / 4.0; 4096 -> 14336 (1792 units) Q8_0 M = 3 18.7 /
// 20.3, MXFP4 M = 4 21.3 / 19.2; M = 2 lost on 19 of 24 rows. GGUF_KERNELS_FAST_KS_MIN_M: the split
// from that M on, everywhere (A/B runs).
template <int T>
bool ks_first(int M, int N) {
  static const int v = env_knob("GGUF_KERNELS_FAST_KS_MIN_M", -1);
  if (v >= 0) return M >= v;
  return M >= 5 || (M >= 3 && ((N + 7) / 8 <= 4 * num_sms() || T == MXFP4 || T == IQ4_XS));
}
// Clusters of z CTAs (WPC warps, smem bytes; a grid of `clusters` of them) of `kernel` that can run at
// once on the current device, asked once per case (the launch path runs on every matmul outside CUDA
// graphs). Every instantiation shares one function type, so the kernel's address is in the key.
template <typename Kern>
int active_clusters(Kern kernel, int clusters, int z, int WPC, size_t smem) {
  static std::mutex mu;
  static std::map<std::tuple<const void*, int, size_t, int, int, int>, int> seen;
  const auto key = std::make_tuple(reinterpret_cast<const void*>(kernel), current_device(), smem, clusters, WPC, z);
  std::lock_guard<std::mutex> lock(mu);
  const auto it = seen.find(key);
  if (it != seen.end()) return it->second;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(clusters * z);
  cfg.blockDim = dim3(32 * WPC);
  cfg.dynamicSmemBytes = smem;
  cudaLaunchAttribute at = cluster_attr(z);
  cfg.attrs = &at;
  cfg.numAttrs = 1;
  int n = 0;
  if (cudaOccupancyMaxActiveClusters(&n, kernel, &cfg) != cudaSuccess) {
    cudaGetLastError();
    n = 0;
  }
  return seen[key] = n;
}
// The most warps that share a unit of a K split's CTA: two for Q6_K, MXFP4 and IQ4_XS, one for the
// others, which two made slower (NOTES.md v48: Q4_0 and Q8_0 7-14% at 4096 -> 4096, M = 8): each CTA then
// builds the records of twice the slice, 2.2-4.5 us at 14336 -> 4096 (NOTES.md session 38, bound build
// v49b). GGUF_KERNELS_FAST_KS_H: that many for every type (1: as before v48).
template <int T>
int ks_max_h() {
  static const int v = env_knob("GGUF_KERNELS_FAST_KS_H", -1);
  return v > 0 ? v : (T == Q6_K || T == MXFP4 || T == IQ4_XS) ? 2 : 1;
}
// The K split over a plain grid (a.gz, NOTES.md v53, v55): its Z slices meet at the grid barrier of a
// cooperative launch, so the CTAs need not sit Z to a GPC (clusters of 4 fit 30 to the H200's 132 SMs,
// leaving 9 warps a CTA at 14336 -> 4096 where the grid has 8 on 128 SMs). The barrier costs ~1 us more
// than the clusters' meeting, so by default only where the geometry wins more (ks_grid_auto);
// GGUF_KERNELS_FAST_KS_GRID=1 takes it wherever it fits, 0 never.
inline int knob_ks_grid() {
  static const int v = env_knob("GGUF_KERNELS_FAST_KS_GRID", -1);
  return v;
}
// Where no cluster launch can take M tokens, whether the grid of v86 goes before the plain launch:
// GGUF_KERNELS_FAST_KS_PLAIN=1 never (the plain launch keeps every case it takes), 0 always, else ks_units_first and,
// at M = 2, stream_plain_idle (v92).
inline int knob_ks_plain() {
  static const int v = env_knob("GGUF_KERNELS_FAST_KS_PLAIN", -1);
  return v;
}
// Where the grid is taken by default (v56, H200, M = 3..8 against clusters in one call): Q4_K and Q5_K
// from K = 8192 (-0.2 to -0.7 us there, -1.7 to -2.3 at 14336 -> 4096, where clusters of 4 sit 30 to
// the GPU and leave 9 warps a CTA); Q6_K from K = 12288 (-2.5 to -3.0 us; +0.5 to +1.6 at 8192). Since its
// stages became tensor-map copies (v70, session 49, 14336 -> 4096): also Q4_0, MXFP4 and IQ4_XS from
// K = 12288 at every M (-0.05 to -1.6 us; MXFP4 / IQ4_XS had it from M = 6). Q8_0 (+1.0 to +1.3 us there)
// and every K = 4096 (+0.3 to +1.6) still lose to the barrier's cost. Q4_K and Q5_K below K = 12288 only from
// N = 4096 (v85, session 57, M = 8, us, grid / clusters: Llama-70B's k and v, 8192 -> 1024, whose 64 units
// leave the grid's 8 slices 4 warps a CTA, Q4_K 6.82 / 5.51, Q5_K 7.19 / 6.23; 8192 -> 2048 7.76 / 6.65,
// 8.45 / 7.75; 8192 -> 4096 ties, and keeps the grid).
template <int T>
constexpr bool ks_grid_auto(int N, int K) {
  return ((T == Q4_K || T == Q5_K) && (K >= 12288 || (K >= 8192 && N >= 4096))) ||
         ((T == Q6_K || T == Q4_0 || T == MXFP4 || T == IQ4_XS) && K >= 12288);
}
// v87 (H200, one build, the grid against the plain launch where no cluster launch fits): the grid, padded to
// 8 tokens, takes the same time at M = 2..4, while the plain launch's grows with M. At M = 3, 4 the grid wins
// on 8192 -> 28672 and 4096 -> 128256 by 4-26 us (5-27%) except for Q4_0 and Q8_0 (+1.5-14 us); at M = 2 it
// wins for MXFP4 and IQ4_XS on all three (-0.9 to -7.9 us), and for Q4_0 and Q4_K only at 28672 -> 8192 (-5.3,
// -6.5), where the plain launch holds 2 tokens' records of K = 28672 (it loses 6.5-17 us at the smaller K). Session
// 59, same knob, 25-131 M elements: at M = 3, 4 the grid won for Q4_K and Q5_K from 3584 -> 18944 (68 M) by 3.1-16.7
// us and lost or tied below (Q4_K 4096 -> 14336 +0.9 / +0.1, 2560 -> 9728 +2.1 / +1.9), so from 2^26 elements
// (8192 -> 8192 itself unmeasured); at M = 2 MXFP4 and IQ4_XS won on 5120 -> 17408 (-6.1 / -8.8) and lost on 4096 ->
// 14336 (+1.2 / +1.6); Q4_K and Q5_K won on 25600 -> 5120 (-15.0 / -16.9), not on 17408 -> 5120 (the grid's M = 3
// time, 23.3 / 27.7 us, against the plain launch's 22.4 / 27.4 at M = 2), so from K = 24576; Q4_0 only from N = 8192
// (27648 -> 5120: +1.4). Not at M = 5..8, which none of this measured: the plain MT = 8 launch can beat the grid's
// M = 3, 4 time there (Q6_K 4096 -> 128256: 151 us at M = 8 in session 56's table, the grid 171). v92 (session 62,
// main -> grid, us): Q6_K from 2^25 elements, at M = 3, 4 4096 -> 11008 27.9 -> 16.8, 4096 -> 12288 28.0 -> 17.7, 4096
// -> 14336 28.4 -> 21.9, 8192 -> 8192 29.7 -> 20.7, and at M = 2 by 3-19% (14336 -> 4096 22.5 -> 18.2); not on 2048 ->
// 8192 (16.8 M, +1.0), nor at M = 2 on rows that are not 16-byte multiples (3072 -> 16384 23.1 -> 28.3). v100 (the same
// call's forced grid, main -> grid, us): Q5_K at M = 4 from 2^25 elements too, 4096 -> 11008 16.1 -> 15.7, 4096 -> 12288
// 16.8 -> 16.1, 4096 -> 14336 20.2 -> 19.5, 8192 -> 8192 22.5 -> 21.3; not at M = 3 (-0.8 to +0.35 us), nor on
// 2048 -> 8192 (+1.2). Session 66 (the grid against GGUF_KERNELS_FAST_KS_PLAIN=1 in one call, us): the grid kept
// for Q5_K at M = 4 where K >= 4096 and N >= 8192 (those four, -0.4 to -1.1), not on 3072 -> 16384 (15.19 -> 16.27)
// nor 5120 -> 7168 (14.25 -> 14.50). v104 (session 69, H100, main -> GGUF_KERNELS_FAST_KS_PLAIN=0, two runs each, us):
// Q6_K at M = 2 on rows that are not 16-byte multiples, since v102 made the grid's copies of them cheaper, from 2^24
// elements where K >= 4096: 5120 -> 5120 18.4 -> 16.2, 5120 -> 7168 19.4 -> 17.5, 5120 -> 8192 19.7 -> 19.1; not
// 3072 -> 16384 (23.5 -> 27.0) nor 5120 -> 1024 (6.3 -> 11.9). MXFP4 and IQ4_XS: the grid goes first here, but
// ks_grid_decide keeps the plain launch where the grid's plan is several units a warp and more than 4 (v103,
// ks_units_plain_first).
template <int T>
constexpr bool ks_units_first(int N, int K, int M) {
  const long long n = (long long)N * K;
  if (M > 4) return false;
  if (n <= (1LL << 26)) {
    if (T == Q6_K)  // rows not 16-byte multiples at M = 2 from 2^24 elements where K >= 4096 (v104), else from 2^25
      return M > 2 || packed_row_bytes<T>(K) % 16 == 0 ? n > (1LL << 25) : M == 2 && n > (1LL << 24) && K >= 4096;
    return T == Q5_K && M == 4 && K >= 4096 && N >= 8192 && n > (1LL << 25);
  }
  if (M >= 3) return T != Q4_0 && T != Q8_0;
  return T == MXFP4 || T == IQ4_XS || (K >= 24576 && (T == Q4_K || T == Q5_K || (T == Q4_0 && N >= 8192)));
}
// Whether K's nch chunks split into Z slices (the knob ks > 0 forcing Z = ks): slices of whole chunks,
// starting 16-byte aligned in every row (Q6_K: 4-byte, its stages' copies start at the 16-byte boundary
// below, kph). Both forms of the K split (clusters, grid) take the same slices.
template <int T>
bool ks_slices_fit(int nch, int Z, int ks) {
  using L = FT<T>;
  return (ks <= 0 || Z == ks) && nch % Z == 0 && (nch / Z * L::CB) % (L::MIS ? 4 : 16) == 0;
}
// The grid's slices of unequal chunk counts (NOTES.md v90): where nch chunks do not split into Z equal slices, the
// first nch - Z (c - 1) ranks take c = ceil(nch / Z) chunks and the rest c - 1, so that 8 tokens' records of a slice
// fit where two equal slices' do not (25600 = 50 chunks of 512 into 4 or 8; 18944 = 74 of 256, 37 of 512). Every
// chunk starts 16-byte aligned in a row (Q6_K: 4-byte, as its equal slices), so any chunk may start a slice.
// GGUF_KERNELS_FAST_KS_UNEVEN=0: equal slices only (A/B runs).
template <int T>
bool ks_slices_uneven(int nch, int Z, int ks) {
  using L = FT<T>;
  static_assert(!L::OK || L::CB % (L::MIS ? 4 : 16) == 0, "every chunk starts a slice aligned");
  static const int v = env_knob("GGUF_KERNELS_FAST_KS_UNEVEN", -1);
  return v != 0 && (ks <= 0 || Z == ks) && nch > Z && nch % Z != 0;
}
// Whether the grid may take Z slices of nch chunks: equal ones, or (uneven) unequal ones, on at least Z SMs.
template <int T>
bool ks_grid_slices(int nch, int Z, bool uneven) {
  return (uneven ? ks_slices_uneven<T>(nch, Z, knob_ks()) : ks_slices_fit<T>(nch, Z, knob_ks())) && num_sms() >= Z;
}
// The activation groups of a slice of sch chunks that each thread of a K split's CTA of WPC warps converts (MT = 8).
template <int T>
int ks_groups_a_thread(int sch, int WPC) {
  using L = FT<T>;
  return (8 * sch * (L::CE / L::GS) + 32 * WPC - 1) / (32 * WPC);
}
struct KsGridPlan {
  int Z = 0, ctas = 0, WPC = 0;  // Z = 0: no plan
  size_t smem = 0, part_bytes = 0;  // part_bytes: the meeting buffer's (GemvArgs::ks_part), Z x 128 floats a unit
  bool units = false;  // several units a warp (GU, v86)
  int sch = 0, kx = 0;  // chunks of the larger slice, and the ranks that take it (Z: all, equal slices)
  void slices(int nch, int z) {  // Z = z slices of nch chunks, the first kx of sch, the rest of sch - 1
    Z = z;
    sch = (nch + z - 1) / z;
    kx = nch - z * (sch - 1);
  }
};
// The units of 16 rows (MT = 8) that the busiest warp of plan p over N rows takes (its chain: that many slices'
// chunks).
inline int ks_units_a_warp(const KsGridPlan& p, int N) {
  const int units = (N + 15) / 16, warps = p.ctas * p.WPC;
  return (units + warps - 1) / warps;
}
// Where the grid takes 8 slices of 16 warps a CTA over the fewest that give 8 (v83, session 56, H200, M = 8,
// 14336 -> 4096, us, Z = 4 of 8 warps -> Z = 8 of 16): Q4_0 17.65 -> 14.52, Q4_K 18.34 -> 15.81, Q5_K 20.29 ->
// 18.32; the slices' records are half as large and twice the warps hide each stage's latency. The other
// types' Z = 8 plans do not fit (shared memory, groups a thread) and keep theirs.
template <int T>
constexpr bool ks_grid_deep(int K) {
  return (T == Q4_0 || T == Q4_K || T == Q5_K) && K >= 12288;
}
// The grid's plan for M tokens: CTAs a slice and warps a CTA (one unit each, one CTA an SM), on the
// clusters' rules (slices of whole chunks and 16-byte runs; the fewest slices that give 8 warps a CTA, or 8
// slices where ks_grid_deep and they fit).
template <int T>
KsGridPlan ks_grid_plan_z(int N, int K, int Z, bool uneven = false) {
  using L = FT<T>;
  constexpr int MT = 8;
  const int nch = K / L::CE, units = (N + 2 * MT - 1) / (2 * MT);
  if (!ks_grid_slices<T>(nch, Z, uneven)) return {};
  KsGridPlan p;
  p.slices(nch, Z);
  p.part_bytes = (size_t)units * Z * kKsSums * 4;
  p.WPC = (units + num_sms() / Z - 1) / (num_sms() / Z);
  p.ctas = (units + p.WPC - 1) / p.WPC;
  // (the records padded to 128 bytes, each stage buffer's barrier after the stages: NOTES.md v70)
  p.smem = std::max(stream_recs_end(MT * stream_rec_stride<T, MT>(p.sch * L::CE), true) +
                        (size_t)p.WPC * 2 * (2 * MT * stream_rs<T, MT, false>() + kStageBarBytes),
                    one_cta_an_sm_smem());
  if (p.WPC > 16 || p.smem > stream_smem_cap() || ks_groups_a_thread<T>(p.sch, p.WPC) > 8) return {};
  return p;
}
// Several units a warp (GU, v86): 16 warps a CTA (or the most whose stages fit beside the records, at least
// min_wpc) on every SM Z can take, the Z whose busiest warp reads the fewest chunks (rounds of units x the slice's
// chunks; ties: fewer slices, less to meet); each thread building at most max_groups groups of records.
template <int T>
KsGridPlan ks_grid_plan_units(int N, int K, int min_wpc, int max_groups, bool uneven = false) {
  using L = FT<T>;
  constexpr int MT = 8;
  const int nch = K / L::CE, units = (N + 2 * MT - 1) / (2 * MT);
  KsGridPlan best;
  int64_t best_chain = 0;
  for (int Z : {2, 4, 8}) {
    if (!ks_grid_slices<T>(nch, Z, uneven)) continue;
    KsGridPlan p;
    p.slices(nch, Z);
    const size_t recs = stream_recs_end(MT * stream_rec_stride<T, MT>(p.sch * L::CE), true);
    const size_t per_warp = 2 * (2 * MT * stream_rs<T, MT, false>() + kStageBarBytes);
    const auto smem = [&](int WPC) { return std::max(recs + WPC * per_warp, one_cta_an_sm_smem()); };
    p.WPC = 16;
    while (p.WPC >= min_wpc && smem(p.WPC) > stream_smem_cap()) --p.WPC;
    if (p.WPC < min_wpc || ks_groups_a_thread<T>(p.sch, p.WPC) > max_groups) continue;
    p.ctas = num_sms() / Z;
    const int64_t chain = (int64_t)ks_units_a_warp(p, N) * p.sch;
    if (best.Z && chain >= best_chain) continue;
    best_chain = chain;
    p.smem = smem(p.WPC);
    p.part_bytes = (size_t)units * Z * kKsSums * 4;
    p.units = true;
    best = p;
  }
  return best;
}
// v103 (session 69, H100, the grid against GGUF_KERNELS_FAST_KS_PLAIN=1 in one call, us): MXFP4 and IQ4_XS keep the
// plain launch they take where the grid's plan gives a warp more than 4 units (a unit's stream of 2-4 chunks padded
// to 8 tokens, 7-16 times over). M = 2, 8192 -> 28672 (7 units a warp): MXFP4 64.3 -> 53.4, IQ4_XS 64.5 -> 57.5 (the
// H200 in session 68: 61.9 -> 57.0); 4096 -> 128256 (8): 125.2 -> 104.0, 123.5 -> 109.3. M = 3, 4: MXFP4 -7% (8192
// -> 28672) and -9% (4096 -> 128256); IQ4_XS -3.5% on 4096 -> 128256 but +1..1.5% on 8192 -> 28672 (H200: +3..5%),
// so from 8 units there. Two units a warp keep the grid (5120 -> 17408: +5% at M = 2, +20% at M = 3, 4 on the plain
// launch; 5120 -> 25600: +12%, +2..7%). v106 (session 70, H100, the same knob): from K = 12288 at M = 2 only, 16384 ->
// 53248 MXFP4 198.2 -> 172.4, IQ4_XS 200.9 -> 193.0; 12288 -> 49152 134.0 -> 116.4, 135.9 -> 128.1; at M = 3, 4 the
// grid ties on the first and wins on the second (plain +6..12%).
template <int T>
constexpr bool ks_units_plain_first(int K, int units_a_warp, int M) {
  return (T == MXFP4 || T == IQ4_XS) && (K < 12288 || M == 2) && units_a_warp > (T == IQ4_XS && M > 2 ? 7 : 4);
}
// A call's arguments as far as the launch rules ask them before the call exists: N rows of K.
inline FastArgs plain_args(int N, int K) {
  FastArgs a = {};
  a.N = N;
  a.K = K;
  return a;
}
// The plain MT-token launch's choice for N rows of K, as launch_stream_dense would make it; bf16's registers stand for
// fp16's.
template <int T, int MT>
StreamChoice plain_choice(int N, int K) {
  return dense_choice<T, __nv_bfloat16, MT>(plain_args(N, K));
}
// M = 2 on the plain launch (v107). MT = 2's stages hold 4 chunks of a row (MT = 4's 2, MT = 8's 1), so where K's
// chunks are not a multiple of 4 its last stage has lanes without a chunk that still issue the decode and mma (ncu,
// IQ4_XS 5120 -> 152064, 10 chunks in 3 stages: 1.2x the warp instructions a weight of 4096 -> 128256), and its units
// of 4 rows round to whole waves differently. The MT = 4 and 8 kernels take the 2 tokens padded (zero records, columns
// not stored). Session 70, M = 2, us, MT = 2 -> 4 (H200, the grid kept out; the host's busiest-SM stages of MT = 4
// against MT = 2's in brackets): 2560 -> 9728 Q4_K 10.4 -> 7.8, Q8_0 11.7 -> 9.1, IQ4_XS 17.0 -> 11.1 (0.47-0.52); 1536
// -> 8960 -15..-31% (0.42-0.56); 3072 -> 8192 MXFP4 / IQ4_XS -15% (0.75); 5120 -> 152064 MXFP4 / IQ4_XS 169.7 -> 153.7,
// 185.9 -> 167.7 (0.83). At equal stages MT = 4 lost 5-16% (4096 -> 14336 at 0.875 too), where it leaves fewer than 8
// warps a CTA (IQ4_XS 5120 -> 5120 at 0.83: +14%) and (H100, main -> v107) where its few units are split over the warps
// of each CTA (9728 -> 2560, 320 units: Q4_0, Q4_K, Q5_K, Q8_0 +7..10%); Q4_0, whose decode is the cheapest, lost at
// 0.69 and 0.75 (4096 -> 11008 / 12288, +2 / +4%) and won at 0.52 (-15%). So MT = 4 from 0.85 (Q4_0: 0.6) with 8 warps,
// unsplit. MT = 8 for MXFP4 and IQ4_XS from 2 / 3 with 8 warps (3584 -> 18944, 7 chunks, 0.66: 23.3 -> 19.6, 24.3 ->
// 23.2; the others' there +-5%; v91 on the H200: -13..-17%).
// v121 (H100, session 77's knob rows, MT = 8 against the default): the 2 / 3 rule also for Q4_K, Q5_K and Q8_0 (3584 ->
// 18944, 126 stages against 192: 0.96 / 0.91 / 0.95; Q4_0 there +3%, so not Q4_0), and MXFP4 / IQ4_XS also with 5
// warps a CTA where MT = 8 gives the busiest SM at most 0.85 of the stages of the kernel taken otherwise (1536 ->
// 8960: 15 against MT = 4's 18, 0.87 / 0.91; 2560 -> 9728: 25 against 30, 0.95 / 0.98).
// GGUF_KERNELS_FAST_M2_MT: 2, 4 or 8, that kernel wherever it takes the case (MT = 2 otherwise);
// GGUF_KERNELS_FAST_M2_WIDE8=0: v107's MT = 8 rule alone (A/B timing).
struct MtChoice {  // the plain launch's kernel at M = 2 (m2_choice) or M = 3, 4 (m34_choice): its MT and plan
  int MT;
  StreamChoice c;
};
template <int T, typename XT>
MtChoice m2_choice(const FastArgs& a) {
  static const int knob = env_knob("GGUF_KERNELS_FAST_M2_MT", -1);
  static const bool wide = !env_off("GGUF_KERNELS_FAST_M2_WIDE8");
  constexpr bool IQ = T == MXFP4 || T == IQ4_XS;
  const StreamChoice c2 = dense_choice<T, XT, 2>(a);
  MtChoice m{2, c2};
  if (knob == 4 || knob < 0) {
    const StreamChoice c4 = dense_choice<T, XT, 4>(a);
    if (c4.WPC && (knob == 4 || (c4.WPC >= 8 && !c4.split && 20 * c4.work <= (T == Q4_0 ? 12 : 17) * c2.work)))
      m = {4, c4};
  }
  if (knob == 8 || (knob < 0 && (IQ || (wide && T != Q4_0)))) {
    const StreamChoice c8 = dense_choice<T, XT, 8>(a);
    if (c8.WPC && (knob == 8 || (c8.WPC >= 8 && 3 * c8.work <= 2 * c2.work) ||
                   (wide && IQ && c8.WPC >= 5 && 20 * c8.work <= 17 * m.c.work)))
      return {8, c8};
  }
  return m;
}
// m2_choice for N rows of K, as plain_choice.
template <int T>
MtChoice plain_m2(int N, int K) {
  return m2_choice<T, __nv_bfloat16>(plain_args(N, K));
}
// Whether the plain MT-token launch takes M tokens of K on N rows (its records of all of K in each CTA).
template <int T>
bool stream_plain_takes(int N, int K, int M) {
  // rows_mis: the plain launch's MT = 2 form only (MT = 4 and 8 copy 16-byte pieces at one offset for all rows)
  if (M > 2 && !rows_fit<T>(K, packed_row_bytes<T>(K))) return false;
  const auto takes = [&](auto mt) { return plain_choice<T, decltype(mt)::value>(N, K).WPC > 0; };
  return M <= 2 ? takes(std::integral_constant<int, 2>{}) : M <= 4 ? takes(std::integral_constant<int, 4>{})
                                                                     : takes(std::integral_constant<int, 8>{});
}
// Whether the plain launch at M = 2 (m2_choice's kernel; MT = 2 when v92 was measured) on rows of 16-byte multiples
// leaves enough SMs without a CTA (its units in whole rounds of WPC warps on fewer CTAs: Q8_0 17408 -> 5120, 1280
// units, two rounds of 8 warps on 80 CTAs) that the grid of one unit a warp wins (v92, H200, M = 2, main -> grid, us):
// more than a quarter for Q5_K, Q6_K, MXFP4 and IQ4_XS (4096 -> 11008, 86 CTAs: Q5_K 16.6 -> 15.8, MXFP4 15.5 -> 14.1,
// IQ4_XS 19.2 -> 17.2; 4096 -> 12288, 96 CTAs: 16.7 -> 16.0, 15.7 -> 14.4, 19.4 -> 17.5; Q6_K 4096 -> 6144 12.9 ->
// 12.1); at least 3 / 8 for Q4_K and Q8_0, which lost at 86 and 96 CTAs (Q4_K +0.2 / +0.4, Q8_0 -0.2 / +0.8) and won at
// 76 and 80 (2560 -> 9728 10.5 -> 10.0, 11.8 -> 11.0; Q8_0 17408 -> 5120 36.7 -> 29.2); never for Q4_0 (+0.1 / +1.0 /
// +1.4 at 76 / 86 / 96). Rows that are not 16-byte multiples keep the plain launch (Q6_K 5120 -> 5120 +1.2).
template <int T>
bool stream_plain_idle(int N, int K) {
  if (T == Q4_0 || packed_row_bytes<T>(K) % 16) return false;
  const StreamChoice c = plain_m2<T>(N, K).c;
  const int idle = num_sms() - c.ctas;
  return c.WPC && (T == Q4_K || T == Q8_0 ? 8 * idle >= 3 * num_sms() : 4 * idle > num_sms());
}
// Dynamic shared memory of a CTA of the clusters' K split with WPC warps over slices of K / Z, two stages a
// warp (the records padded to 128 bytes, each stage buffer's barrier after the meeting's: NOTES.md v71).
template <int T>
size_t ks_cluster_smem(int K, int Z, int WPC) {
  constexpr int MT = 8;
  return std::max(stream_recs_end(MT * stream_rec_stride<T, MT>(K / Z), true) +
                      (size_t)WPC * (2 * (2 * MT * stream_rs<T, MT, false>() + kStageBarBytes) + ks_meet_bytes(Z)),
                  one_cta_an_sm_smem());
}
// Whether the clusters' K split keeps a launch of WPC warps a CTA: each thread building at most 8 groups of
// records, and (by default) 8 warps a CTA or Z = 8.
template <int T>
bool ks_cluster_keeps(int nch, int Z, int WPC) {
  return ks_groups_a_thread<T>(nch / Z, WPC) <= 8 && !(knob_ks() < 0 && WPC < 8 && Z < 8);
}
// Whether the clusters' K split may take M tokens of N x K, by launch_stream_ks's rules: past ks_first, a Z and H
// whose CTAs (H warps a unit on num_sms() / Z clusters, an upper bound on the clusters granted, so a lower bound on
// the warps they need) fit in 16 warps and the shared memory, with 8 warps or Z = 8 (by default). False: no cluster
// launch will (v88: ks_first and the 8-warp rule were left out, so M = 3, 4 on 17408 -> 5120 and 25600 -> 5120,
// which the plain launch declines, fell to the 16-row tiles although a grid plan fits).
template <int T>
bool ks_clusters_may_take(int N, int K, int M) {
  using L = FT<T>;
  constexpr int MT = 8;
  if (!ks_first<T>(M, N)) return false;
  const int nch = K / L::CE, units = (N + 2 * MT - 1) / (2 * MT);
  for (int Z : {2, 4, 8}) {
    if (!ks_slices_fit<T>(nch, Z, knob_ks()) || num_sms() < Z) continue;
    for (int H = 1; H <= ks_max_h<T>(); H *= 2) {
      const int WPC = H * ((units + num_sms() / Z - 1) / (num_sms() / Z));
      if (WPC > 16 || ks_cluster_smem<T>(K, Z, WPC) > stream_smem_cap()) break;
      if (ks_cluster_keeps<T>(nch, Z, WPC)) return true;
    }
  }
  return false;
}
// The grid's plan for M tokens of N x K by the rules above (Z = 0: none), one unit a warp or several.
template <int T>
KsGridPlan ks_grid_decide(int N, int K, int M) {
  const int ks = knob_ks(), kg = knob_ks_grid();
  if (kg == 0 || ks == 0 || M > 8 || M < 2) return {};
  if (ks_first<T>(M, N) && (kg > 0 || ks_grid_auto<T>(N, K))) {
    // ks_grid_deep: 8 slices first (kKsGridMaxZ), each Z's plan computed once
    static constexpr int order[2][3] = {{2, 4, kKsGridMaxZ}, {kKsGridMaxZ, 2, 4}};
    for (int Z : order[ks < 0 && ks_grid_deep<T>(K)]) {
      const KsGridPlan p = ks_grid_plan_z<T>(N, K, Z);
      if (p.Z && !(ks < 0 && p.WPC < 8 && Z < kKsGridMaxZ)) return p;
    }
  }
  // where no cluster launch can take the case and the plain launch declines, which then fell to the 16-row
  // tiles after a prep kernel (Llama-70B's 28672 -> 8192 at M = 2..8, 0.65-0.92x llama.cpp at M = 2..4; 8192 ->
  // 28672 at M = 8): the grid anyway, one unit a warp where that fits (the fewest slices), else several (v86);
  // and before the plain launch where the grid wins (v87)
  const int kp = knob_ks_plain();
  const bool grid_first = kp == 0 || (kp < 0 && ks_units_first<T>(N, K, M));
  if (ks_clusters_may_take<T>(N, K, M)) return {};
  const bool plain = stream_plain_takes<T>(N, K, M);
  // v92: at M = 2, where the plain launch leaves SMs without a CTA (stream_plain_idle), the grid of one unit a warp
  const bool idle = kp < 0 && M == 2 && plain && !grid_first && stream_plain_idle<T>(N, K);
  if (plain && !grid_first && !idle) return {};
  for (int Z : {2, 4, 8}) {
    const KsGridPlan p = ks_grid_plan_z<T>(N, K, Z);
    if (p.Z) return p;
  }
  if (idle) return {};
  const KsGridPlan u = ks_grid_plan_units<T>(N, K, 8, 8);
  if (u.Z) return kp < 0 && plain && ks_units_plain_first<T>(K, ks_units_a_warp(u, N), M) ? KsGridPlan{} : u;
  // v90: slices of unequal chunk counts, where no equal ones leave 8 warps a CTA (by the same two plans, one unit a
  // warp with at least 8 warps a CTA, or 8 slices, as the clusters keep them: 18944 -> 3584 has 7 at Z = 4, 14 at 8).
  // Before a plain launch that takes the case (grid_first: MXFP4, IQ4_XS at M = 2) only from K = 12288, where the
  // slices hold at least 3 chunks (3584 -> 18944 would split 7 chunks 4 ways: v87's grid lost at K = 4096)
  if (!plain || K >= 12288) {
    for (int Z : {2, 4, 8}) {
      const KsGridPlan p = ks_grid_plan_z<T>(N, K, Z, true);
      if (p.Z && (p.WPC >= 8 || Z == 8)) return p;
    }
    const KsGridPlan v = ks_grid_plan_units<T>(N, K, 8, 8, true);
    if (v.Z) return v;
  }
  if (plain) return {};
  // v88: where 8 tokens' records of a slice leave no room for 8 warps (two slices at most: MXFP4 and IQ4_XS on
  // 17408 -> 5120, 34 chunks of 512), down to 5 warps, each thread building more groups of records, against the
  // 16-row tiles after a prep kernel (H200, M = 3, 4, 8, us, tiles / grid: MXFP4 46.8-58.7 / 32.1-37.0, IQ4_XS
  // 51.9-61.0 / 40.5-45.2). Fewer lost: 18944 -> 3584 at 3 warps (Q4_0) 27.0-27.2 / 55.4-64.4, at 2 (Q8_0)
  // 38.6-44.8 / 62.0-75.4. Not before a plain launch that takes the case (MXFP4 17408 -> 5120 at M = 2: 26.0 us).
  return ks_grid_plan_units<T>(N, K, 5, 1 << 20);
}
// The plan for a call, asked twice (the binding sizes the meeting buffer, the launch takes the plan): the last
// case's answer kept a thread, since v86's checks (the plain launch's choice among them) are not free.
template <int T>
KsGridPlan ks_grid_plan(int N, int K, int M) {
  thread_local int key[4] = {-1, 0, 0, 0};
  thread_local KsGridPlan plan;
  const int dev = current_device();
  if (key[0] != dev || key[1] != N || key[2] != K || key[3] != M) {
    plan = ks_grid_decide<T>(N, K, M);
    key[0] = dev; key[1] = N; key[2] = K; key[3] = M;
  }
  return plan;
}
template <int T, typename XT, bool MR = false>
cudaError_t launch_stream_ks(const FastArgs& a0, cudaStream_t stream) {
  using L = FT<T>;
  constexpr int MT = 8;
  const int ks = knob_ks();
  const KsGridPlan g = ks_grid_plan<T>(a0.N, a0.K, a0.M);  // (past ks_first only where nothing else takes M)
  if (ks == 0 || a0.M > 8 || (!g.Z && !ks_first<T>(a0.M, a0.N))) return cudaErrorNotSupported;
  const int nch = a0.K / L::CE, units = (a0.N + 2 * MT - 1) / (2 * MT);
  const auto kernel = gemv_stream_kernel<T, XT, false, MT, false, false, true, false, false, MR>;
  if (stream_attrs<T, XT, false, MT, false, false, true, false, false, MR>() != cudaSuccess) return cudaErrorNotSupported;
  static const bool recorded = stream_kernel_seen(reinterpret_cast<const void*>(kernel), true);
  (void)recorded;
  // both forms copy their stages by tensor map (NOTES.md v70, v71), encoded once a launch is chosen (a call the
  // split turns away encodes none): no K split where it cannot be
  WeightMap<true> wm;
  const auto gz_kernel = gemv_stream_kernel<T, XT, false, MT, false, false, true, true, false, MR>;
  const auto gu_kernel = gemv_stream_kernel<T, XT, false, MT, false, false, true, true, true, MR>;  // v86
  const auto grid_kernel = g.units ? gu_kernel : gz_kernel;
  if (g.Z && a0.part && a0.part_bytes >= g.part_bytes &&
      (g.units ? stream_attrs<T, XT, false, MT, false, false, true, true, true, MR>()
               : stream_attrs<T, XT, false, MT, false, false, true, true, false, MR>()) == cudaSuccess) {
    static const bool grid_recorded = stream_kernel_seen(reinterpret_cast<const void*>(gz_kernel), true) &&
                                      stream_kernel_seen(reinterpret_cast<const void*>(gu_kernel), true);
    (void)grid_recorded;
    FastArgs a = a0;
    a.K = g.sch * L::CE;
    a.kx = g.kx;
    a.S = 2;
    a.split = 1;
    a.gz = g.Z;
    // a cooperative launch (all its CTAs resident at once: one an SM, at most the SM count), as a
    // dependent launch where the driver takes both attributes; else the clusters below
    cudaLaunchAttribute coop = {};
    coop.id = cudaLaunchAttributeCooperative;
    coop.val.cooperative = 1;
    if (!encode_ks_map<T, MT, MR>(a0, wm)) return cudaErrorNotSupported;
    const cudaError_t e = launch_kernel_with(&coop, grid_kernel, dim3(g.ctas * g.Z), dim3(32 * g.WPC), g.smem, stream,
                                             follows_stream_kernel(stream), a, wm);
    if (e != cudaErrorNotSupported) return e;
  }
  if (!ks_first<T>(a0.M, a0.N)) return cudaErrorNotSupported;  // (a grid plan past ks_first that did not launch)
  for (int Z : {2, 4, 8}) {
    if (!ks_slices_fit<T>(nch, Z, ks)) continue;
    // H warps a unit (a.split), each reading 1 / H of the slice: where one a unit leaves a CTA fewer than
    // 8 warps (14336 -> 4096 and 4096 -> 4096 at Z = 2: 4), H = 2 gives it 8 on every SM, where Z = 4's
    // clusters sit 30 to the H200 and 9 warps a CTA (NOTES.md v48)
    FastArgs a = a0;
    a.K = a0.K / Z;
    a.S = 2;  // (ks_cluster_smem's stages)
    for (int H = 1; H <= ks_max_h<T>(); H *= 2) {
      a.split = H;
      int clusters = num_sms() / Z, WPC = 0;
      size_t smem = 0;
      bool fits = false;
      for (int it = 0; it < 4 && clusters > 0 && !fits; ++it) {  // as many clusters as can run at once
        WPC = H * ((units + clusters - 1) / clusters);
        smem = ks_cluster_smem<T>(a0.K, Z, WPC);
        if (WPC > 16 || smem > stream_smem_cap()) break;
        const int n = active_clusters(kernel, clusters, Z, WPC, smem);
        fits = n >= clusters;
        if (!fits) clusters = n;
      }
      if (!fits) break;  // (more warps a unit only ask for more)
      if (!ks_cluster_keeps<T>(nch, Z, WPC)) continue;
      const bool pdl = clusters * Z <= num_sms() && follows_stream_kernel(stream);
      const cudaLaunchAttribute cl = cluster_attr(Z);
      if (!encode_ks_map<T, MT, MR>(a0, wm)) return cudaErrorNotSupported;
      return launch_kernel_with(&cl, kernel, dim3(clusters * Z), dim3(32 * WPC), smem, stream, pdl, a, wm);
    }
  }
  return cudaErrorNotSupported;
}
// GemvArgs as FastArgs (MoE: the pairs' fields too; P, nx and local are the launch's to set).
inline FastArgs fast_args(const GemvArgs& ga, DType xt) {
  FastArgs a = {};
  a.w = ga.w; a.row_bytes = ga.row_bytes; a.N = ga.N; a.K = ga.K; a.M = ga.M; a.x = ga.x; a.x_stride = ga.x_stride;
  a.out = ga.out; a.out_stride = ga.out_stride;
  a.out_bf16 = xt == DType::BF16;
  a.ids = ga.ids; a.ids64 = ga.ids64; a.n_experts = ga.n_experts; a.x_div = ga.x_div; a.expert_bytes = ga.expert_bytes;
  a.part = static_cast<float*>(ga.ks_part); a.part_bytes = ga.ks_part_bytes;
  return a;
}
// rows_mis (Q6_K rows that are not 16-byte multiples): ONE at M = 1 (its stages a 1-D copy a row), the K split where
// it takes M tokens, else the plain MT = 2 launch at M = 2; the rest falls to gemv_mma_kernel, as before. The K split
// not on fewer units (16 rows) than SMs: there its grid of several units a warp, the one plan that fit 5120 -> 1024
// at M = 4, 8 (64 units), took 15.6 / 16.3 us against gemv_mma_kernel's 9.0 / 9.4 (H200), where it won from 320
// units (5120 -> 5120 M = 4, 8: 20.1 / 16.4 against 25.1 / 27.4).
template <int T, typename XT>
cudaError_t launch_stream_mis(const FastArgs& a, cudaStream_t stream) {
  if (a.M == 1) {
    const StreamChoice one = stream_choice<T, XT, false, 2, false, true, true>(a, (a.N + 3) / 4, stream_rec_stride<T, 1>(a.K));
    return launch_choice<T, XT, false, 2, false, true, true>(a, one, stream);
  }
  if (a.M > 2 && (a.N + 15) / 16 < num_sms()) return cudaErrorNotSupported;
  const cudaError_t e = launch_stream_ks<T, XT, true>(a, stream);
  if (e != cudaErrorNotSupported || a.M > 2) return e;
  return launch_choice<T, XT, false, 2, false, false, true>(a, dense_choice<T, XT, 2, false, true>(a), stream);
}
// M = 3, 4 on the plain launch: the MT = 8 kernel (padded: records of M tokens, M tokens' columns stored) where it
// gives the busiest SM at most 0.6 of the MT = 4 kernel's stages, else MT = 4. The two take the same bytes and mma a
// stage (8 rows x 2 chunks, 16 x 1), but their units round to whole waves differently: 3584 -> 18944 (Qwen2.5-7B's
// gate / up) leaves MT = 4 two rounds of 16 warps, the second an eighth full, where MT = 8 has one of 9 warps (0.49-0.56
// of its stages). v91, H200, M = 3 / 4, us, MT = 4 -> MT = 8: 3584 -> 18944 Q4_0 19.3 / 19.7 -> 17.0 / 17.3, Q8_0 27.9 /
// 28.1 -> 23.3 / 23.7, MXFP4 29.9 / 30.1 -> 20.4 / 20.4, IQ4_XS 37.2 / 37.2 -> 25.8 / 26.0; Q4_0 5120 -> 17408 27.2 / 28.2
// -> 23.1 / 23.8. At equal stages MT = 8 lost 7-73% (4096 -> 14336, 2048 -> 8192, 8192 -> 28672, Q8_0 5120 -> 17408),
// but Q6_K 4096 -> 14336 (-19%); M = 2 on MT = 8 won only for MXFP4 and IQ4_XS at 3584 -> 18944 (-13..-17%) and lost
// 5-86% elsewhere, so M = 2 keeps MT = 2. GGUF_KERNELS_FAST_M34_MT8: 0 never, 1 wherever MT = 8 takes the case.
// v122: MXFP4 also at 0.85, as v121 at M = 2 on the same plans (1536 -> 8960: 15 stages against 18, 2560 -> 9728: 25
// against 30). H100, M = 3 / 4, us, MT = 4 -> MT = 8: MXFP4 1536 -> 8960 7.67 / 7.65 -> 6.74 / 6.95, 2560 -> 9728
// 10.08 / 10.06 -> 9.83 / 9.99; IQ4_XS 1536 -> 8960 7.60 / 7.58 -> 6.88 / 7.33, but 2560 -> 9728 10.09 / 10.04 -> 10.32
// / 10.44. So IQ4_XS takes it only where MT = 4's stages (2 chunks) leave at least a quarter of their chunk slots
// idle (K of 1 or 3 chunks), which a 0.85 stage ratio alone does not tell apart (both shapes 0.83).
// GGUF_KERNELS_FAST_M34_WIDE8=0 keeps v91's bar alone.
template <int T, typename XT>
MtChoice m34_choice(const FastArgs& a) {
  static const int knob = env_knob("GGUF_KERNELS_FAST_M34_MT8", -1);
  static const bool wide = !env_off("GGUF_KERNELS_FAST_M34_WIDE8");
  const int nch = StreamRecs<T>::chunks(a.K);
  const bool wide_ok = wide && (T == MXFP4 || (T == IQ4_XS && 4 * (nch & 1) >= nch + 1));
  const StreamChoice c4 = dense_choice<T, XT, 4>(a);
  if (knob != 0 && (knob == 1 || c4.WPC)) {
    const StreamChoice c8 = dense_choice<T, XT, 8>(a);
    if (c8.WPC && (knob == 1 || 5 * c8.work <= 3 * c4.work || (wide_ok && 20 * c8.work <= 17 * c4.work)))
      return {8, c8};
  }
  return {4, c4};
}
// m34_choice for N rows of K, as plain_choice (benchmarks/ks_plan_probe.cu).
template <int T>
MtChoice plain_m34(int N, int K) {
  return m34_choice<T, __nv_bfloat16>(plain_args(N, K));
}
// M = 2..4 on the plain launch: m2_choice's or m34_choice's kernel.
template <int T, typename XT>
cudaError_t launch_stream_m24(const FastArgs& a, cudaStream_t stream) {
  const MtChoice m = a.M == 2 ? m2_choice<T, XT>(a) : m34_choice<T, XT>(a);
  return m.MT == 8 ? launch_choice<T, XT, false, 8, false>(a, m.c, stream)
         : m.MT == 4 ? launch_choice<T, XT, false, 4, false>(a, m.c, stream)
                     : launch_choice<T, XT, false, 2, false>(a, m.c, stream);
}
// gemv_stream_kernel for a dense matmul, no scratch; cudaErrorNotSupported when it does not take the case.
template <int T>
cudaError_t launch_stream_any_m(const GemvArgs& ga, DType xt, cudaStream_t stream) {
  const int M = ga.M;
  if (M < 1 || M > stream_max_m() || knob_tile() || (xt != DType::BF16 && xt != DType::F16))
    return cudaErrorNotSupported;
  const FastArgs a = fast_args(ga, xt);
  if (!rows_fit<T>(ga.K, ga.row_bytes)) {
    if constexpr (FT<T>::MIS) {
      if (rows_mis<T>(ga.N, ga.K, ga.row_bytes, ga.w)) {
        const cudaError_t e = xt == DType::BF16 ? launch_stream_mis<T, __nv_bfloat16>(a, stream)
                                                : launch_stream_mis<T, __half>(a, stream);
        if (e != cudaErrorNotSupported) return e;
      }
    }
    if constexpr (may_rag<T>()) {
      if (M == 1 && rows_rag<T>(ga.N, ga.K, ga.row_bytes, 0)) return launch_stream_dense<T, 1, true>(a, xt, stream);
    }
    return cudaErrorNotSupported;
  }
  if (M == 1) {
    const size_t fixed = stream_rec_stride<T, 1>(a.K);
    return xt == DType::BF16 ? launch_stream_one_or_old<T, __nv_bfloat16, false>(a, fixed, stream)
                             : launch_stream_one_or_old<T, __half, false>(a, fixed, stream);
  }
  const cudaError_t e = xt == DType::BF16 ? launch_stream_ks<T, __nv_bfloat16>(a, stream)
                                          : launch_stream_ks<T, __half>(a, stream);
  if (e != cudaErrorNotSupported) return e;
  if (M <= 4)
    return xt == DType::BF16 ? launch_stream_m24<T, __nv_bfloat16>(a, stream) : launch_stream_m24<T, __half>(a, stream);
  return launch_stream_dense<T, 8>(a, xt, stream);
}
// prep_kernel: the records of ga's M tokens into `scratch` (Prep<T>'s layout: B part, then sigma / beta).
template <int T, bool I8 = fast_i8<T>()>
cudaError_t launch_prep(const GemvArgs& ga, DType xt, void* scratch, cudaStream_t stream) {
  const int K = ga.K, M = ga.M;
  uint8_t* xb = reinterpret_cast<uint8_t*>(scratch);
  uint8_t* xs = xb + Prep<T>::b_bytes(K, M);
  const dim3 grid((K / FT<T>::GS * M + 127) / 128);
  if (xt == DType::BF16)
    prep_kernel<T, __nv_bfloat16, I8><<<grid, 128, 0, stream>>>(reinterpret_cast<const __nv_bfloat16*>(ga.x), ga.x_stride,
                                                             K, M, xb, xs);
  else if (xt == DType::F16)
    prep_kernel<T, __half, I8><<<grid, 128, 0, stream>>>(reinterpret_cast<const __half*>(ga.x), ga.x_stride, K, M, xb, xs);
  else
    return cudaErrorInvalidValue;
  return cudaGetLastError();
}
// The stream kernel where it takes the case (unless `tile`: benchmarks/gemv_probe.cu compares both
// kernels in one process), else the prep kernel and gemv_fast_kernel on `scratch`.
template <int T>
cudaError_t launch_with(const GemvArgs& ga, DType xt, void* scratch, size_t scratch_size, bool tile,
                        cudaStream_t stream) {
  using L = FT<T>;
  if constexpr (!L::OK) {
    return cudaErrorNotSupported;
  } else {
    if (!tile) {
      const cudaError_t e = launch_stream_any_m<T>(ga, xt, stream);
      if (e != cudaErrorNotSupported) return e;
    }
    const int K = ga.K, M = ga.M, N = ga.N;
    if (scratch_bytes<T>(K, M, ga.row_bytes) == 0 || scratch_size < Prep<T>::bytes(K, M)) return cudaErrorInvalidValue;
    cudaError_t e = launch_prep<T>(ga, xt, scratch, stream);
    if (e != cudaSuccess) return e;
    FastArgs a = fast_args(ga, xt);
    a.xb = reinterpret_cast<uint8_t*>(scratch);
    a.xs = a.xb + Prep<T>::b_bytes(K, M);
    const Choice ch = choose<T>(N, K, M, num_sms());
    a.S = ch.S; a.U = ch.U; a.RS = rs_bytes<T>(ch.U);
    const dim3 grid((unsigned)((N + 15) / 16)), block(32 * ch.W);
    const size_t smem = smem_bytes<T>(ch.W, ch.S, M, ch.U);
    auto kernel = gemv_fast_kernel<T>;
    if (smem > 48 * 1024 && (e = gemv_fast_attrs<T>()) != cudaSuccess) return e;
    return launch_kernel(kernel, grid, block, smem, stream, true, a);
  }
}

// MoE pairs (GEMV_PAIRS args) on gemv_stream_kernel: cudaErrorNotSupported when this path does not
// take the case (type, K, row bytes, dtype, or more than kMoeRecBytes of x records: one CTA per SM
// would be left; ragged rows: more than kMoeRagRecBytes, measured on gpt-oss-20b's gate at T = 8, 64 KB
// of records, 8 warps per SM: 137 us against 123 on gemv_mma_kernel); GGUF_KERNELS_FAST_MOE=0 turns
// it off.
constexpr size_t kMoeRecBytes = 64 * 1024, kMoeRagRecBytes = 32 * 1024;
inline bool knob_moe_off() {
  static const bool v = env_off("GGUF_KERNELS_FAST_MOE");
  return v;
}
// MoE pairs on flat items (FLAT, NOTES.md v35) for P pairs' rows of at most this many items (GGUF_KERNELS_FAST_FLAT,
// every type and P; 0: off, at most 4). Unset: 4 for IQ4_XS up to 64 pairs (Qwen3-30B-A3B's gate, K = 2048, at T = 1
// and 8: -7% and -5%; T = 32 +3%, session 76), else 3 (the other types level or slower at 4)
template <int T>
inline int knob_flat(int P) {
  static const int v = env_knob("GGUF_KERNELS_FAST_FLAT", -1);
  return v >= 0 ? std::min(v, 4) : T == IQ4_XS && P <= 64 ? 4 : 3;
}
// GGUF_KERNELS_FAST_LOCAL=0: every CTA builds the records of all the pairs' x rows (before v17).
inline bool knob_local_off() {
  static const bool v = env_off("GGUF_KERNELS_FAST_LOCAL");
  return v;
}
// The units over the hit experts (EXP) for P pairs of n_experts experts of N rows: 16-row units of the most experts
// the pairs can hit (an unroutable id is a hit of its own), and the bytes each CTA holds before its stages (every
// token's records in the 8-token layout, then the expert tables); launch_moe's, and benchmarks/moe_exp_probe.cu's
inline int exp_units(int P, int n_experts, int N) { return std::min(n_experts + 1, P) * ((N + 15) / 16); }
template <int T>
size_t exp_fixed(int K, int tokens, int P, int n_experts) {
  return tokens * stream_rec_stride<T, 8>(K) + 4 * (size_t)exp_table_ints(P, n_experts);
}
// Whether `tokens` tokens' MoE pairs run on units over the hit experts (EXP): from 2 tokens, and one
// token whose pairs make at least 8 units an SM (GGUF_KERNELS_FAST_EXP_MIN_T: from that many tokens
// only; 9: off). Same call on the H200 (NOTES.md v18), gpt-oss-20b's experts (MXFP4, K = 2880, 32 x
// top 4), us, row pairs or grouped / EXP: N = 2880 (720 units at T = 1) T = 1 18.2 / 20.1, 2 33.2 /
// 26.7, 4 58.0 / 47.2, 8 100.9 / 76.7; N = 5760 (the fused gate_up, 1440 units) T = 1 33.6 / 27.4, 8
// 186.9 / 134.8.
inline bool exp_takes(int tokens, int P, int N) {
  static const int v = env_knob("GGUF_KERNELS_FAST_EXP_MIN_T", -1);
  if (v >= 0) return tokens >= v;
  return tokens >= 2 || (tokens == 1 && (int64_t)P * ((N + 15) / 16) >= 8 * (int64_t)num_sms());
}
// The x rows whose records each CTA of P MoE pairs holds: all of them, or (local) only those its own range of units
// meets, where that is fewer: guessed here for a CTA an SM and 4-row units, set for the chosen grid by launch_choice
struct MoeXRows {
  int nx;
  bool local;
};
inline MoeXRows moe_x_rows(int P, int N, int x_div) {
  const int nx = (P + x_div - 1) / x_div, guess = local_rows(P, N, 4, x_div, num_sms());
  const bool local = !knob_local_off() && guess < nx;
  return {local ? guess + 1 : nx, local};
}
// Whether N rows of K take the ragged flat items' units (gemv_stream_kernel<T, XT, true, 1, true, true>): their
// items fit the units (flat_rag_fits) and N is whole units
template <int T>
bool flat_rag_units(int K, int N) {
  const int n = flat_row_items<T, true>(K);
  return flat_rag_fits<T>(n) && N % flat_rows(n) == 0;
}
// Whether rows of K (row_bytes each, experts expert_bytes apart) are whole flat items (flat_item_bytes<T, false, BR>),
// at most max_items a row, every expert's rows starting 16-byte aligned: the aligned flat forms, whose stage is one run
// of 16 items where the weights are 16-byte aligned
template <int T, bool BR = false>
bool flat_whole_rows(int K, int64_t row_bytes, int64_t expert_bytes, int max_items) {
  const int n = flat_items<T, BR>(K);
  return K % flat_item_elems<T, false, BR>() == 0 && n >= 1 && n <= max_items &&
         row_bytes == (int64_t)n * flat_item_bytes<T, false, BR>() && expert_bytes % 16 == 0;
}
// Whether such rows take IQ4_XS's one-run form of the ragged flat items (BR, v113): at most 4 one-block items a row
// (K = 256, 768); the other ragged flat rows (K = 1280, 1792, 3840) keep v112's items
template <int T>
bool flat_run_rows(int K, int64_t row_bytes, int64_t expert_bytes) {
  return T == IQ4_XS && flat_whole_rows<T, true>(K, row_bytes, expert_bytes, 4);
}
template <int T>
cudaError_t launch_moe(const GemvArgs& ga, DType xt, int P, int min_chunks, cudaStream_t stream) {
  using L = FT<T>;
  if constexpr (!L::OK) {
    return cudaErrorNotSupported;
  } else {
    const int K = ga.K, N = ga.N;
    if (knob_moe_off() || ga.mode != GEMV_PAIRS || P < 1 || (xt != DType::BF16 && xt != DType::F16))
      return cudaErrorNotSupported;
    // Rows of whole 16-byte pieces at any K (Qwen3-30B-A3B's down projection, K = 768: 3 chunks, at T = 8
    // Q4_K 36.1 us grouped by expert, 31.5 here; ragged ones lost: Q6_K 49.8 against 57.1, gpt-oss-20b's
    // MXFP4 gate 101 against 112; same call, NOTES.md v17)
    const bool rag = !rows_fit<T>(K, ga.row_bytes);
    if constexpr (T == MXFP4) {  // one x row a token and at most 8 tokens: units over the hit experts (EXP)
      const int tokens = ga.x_div > 1 && P % ga.x_div == 0 ? P / ga.x_div : 0;
      if (rag && tokens >= 1 && tokens <= 8 && exp_takes(tokens, P, N) && ga.x_div <= 32 && P <= 64 && ga.n_experts < 1024 &&
          ga.x_stride % 8 == 0 && rows_rag<T>(N, K, ga.row_bytes, ga.expert_bytes)) {
        FastArgs a = fast_args(ga, xt);
        a.M = a.nx = tokens;
        a.P = P;
        const size_t fixed = exp_fixed<T>(K, tokens, P, ga.n_experts);
        const int units = exp_units(P, ga.n_experts, N);
        const cudaError_t e = xt == DType::BF16 ? launch_stream<T, __nv_bfloat16, true, 8, true>(a, units, fixed, stream)
                                                : launch_stream<T, __half, true, 8, true>(a, units, fixed, stream);
        if (e != cudaErrorNotSupported) return e;
      }
    }
    // flat items (FLAT, NOTES.md v35): rows of at most flat_max items (Q6_K's super-blocks: its rows of
    // 630 bytes at K = 768 are ragged otherwise), N a multiple of the unit's rows, every stage a 16-byte
    // aligned run
    const int fn = flat_items<T>(K), flat_max = knob_flat<T>(P);
    const bool flat = flat_whole_rows<T>(K, ga.row_bytes, ga.expert_bytes, flat_max) && N % flat_rows(fn) == 0 &&
                      ((uintptr_t)ga.w & 15) == 0;
    // ragged flat items (NOTES.md v37, v111, v112): rows_rag rows in units whose item sums fit: MXFP4 rows of 4k + 2
    // bytes (gpt-oss, K = 2880: 6 chunks, 8 rows of 3 stages) where the hit experts' units above declined (T = 1),
    // IQ4_XS's (Qwen3-30B-A3B's down projection, K = 768: 3 one-block items, 16 rows in 3 stages) at any T, where
    // the row pairs' stages of 8 chunks would hold 1.5 and grouping by expert lost (v111); GGUF_KERNELS_FAST_FLAT=0
    // turns it off with the aligned form. min_chunks guards the row pairs' 8-chunk stages, so IQ4_XS's flat items
    // skip it; MXFP4's keep it (never timed from moe_group_min pairs, where its hit experts' units take one x row
    // a token)
    const int rn = StreamRecs<T>::chunks(K), rfn = flat_row_items<T, true>(K);  // rfn: a row's ragged flat items
    const bool rrag = rows_rag<T>(N, K, ga.row_bytes, ga.expert_bytes);
    const bool rflat = flat_rag<T>() && rag && flat_max > 0 && flat_rag_units<T>(K, N) && ((uintptr_t)ga.w & 3) == 0 &&
                       rrag;
    // IQ4_XS's ragged rows as one aligned run a unit (BR, v113)
    const bool bflat = rflat && flat_run_rows<T>(K, ga.row_bytes, ga.expert_bytes) && ((uintptr_t)ga.w & 15) == 0;
    if (rag && !flat && !(rflat && T == IQ4_XS) && (rn < min_chunks || !rrag)) return cudaErrorNotSupported;
    if (ga.x_stride % 8 != 0) return cudaErrorNotSupported;
    const MoeXRows xr = moe_x_rows(P, N, ga.x_div);
    const int nx = xr.nx;
    const bool local = xr.local;
    const size_t recs = (size_t)nx * stream_rec_stride<T, 1>(K);
    if (recs > (rag && !flat ? kMoeRagRecBytes : kMoeRecBytes)) return cudaErrorNotSupported;
    FastArgs a = fast_args(ga, xt);
    a.M = 1;
    a.P = P;
    a.nx = nx;
    a.local = local;
    const size_t fixed = recs + ((size_t)P * 4 + 15) / 16 * 16;
    if (flat) {
      const int units = P * (N / flat_rows(fn));
      const cudaError_t e = xt == DType::BF16 ? launch_stream<T, __nv_bfloat16, true, 1, false, true>(a, units, fixed, stream)
                                              : launch_stream<T, __half, true, 1, false, true>(a, units, fixed, stream);
      if (e != cudaErrorNotSupported || rag) return e;
    }
    if constexpr (T == IQ4_XS) {
      if (bflat) {
        const int units = P * (N / flat_rows(rfn));
        const cudaError_t e = xt == DType::BF16
                                  ? launch_stream<T, __nv_bfloat16, true, 1, false, true, true>(a, units, fixed, stream)
                                  : launch_stream<T, __half, true, 1, false, true, true>(a, units, fixed, stream);
        if (e != cudaErrorNotSupported) return e;
      }
    }
    if constexpr (flat_rag<T>()) {
      if (rflat) {
        const int units = P * (N / flat_rows(rfn));
        const cudaError_t e = xt == DType::BF16 ? launch_stream<T, __nv_bfloat16, true, 1, true, true>(a, units, fixed, stream)
                                                : launch_stream<T, __half, true, 1, true, true>(a, units, fixed, stream);
        if (e != cudaErrorNotSupported) return e;
      }
    }
    if constexpr (may_rag<T>()) {
      if (rag) {
        const int units = P * ((N + 1) / 2);
        return xt == DType::BF16 ? launch_stream<T, __nv_bfloat16, true, 1, true>(a, units, fixed, stream)
                                 : launch_stream<T, __half, true, 1, true>(a, units, fixed, stream);
      }
    }
    return xt == DType::BF16 ? launch_stream_one_or_old<T, __nv_bfloat16, true>(a, fixed, stream)
                             : launch_stream_one_or_old<T, __half, true>(a, fixed, stream);
  }
}

}  // namespace fast

template <int T>
size_t gemv_fast_scratch(int K, int M, int64_t row_bytes) {
  return fast::scratch_bytes<T>(K, M, row_bytes);
}
template <int T>
size_t gemv_stream_ks_part(int N, int K, int M) {  // the grid's meeting buffer, 0 where it is not taken
  return fast::ks_grid_plan<T>(N, K, M).part_bytes;
}
template <int T>
cudaError_t launch_gemv_stream(const GemvArgs& a, DType xt, cudaStream_t stream) {
  return fast::launch_stream_any_m<T>(a, xt, stream);
}
template <int T>
cudaError_t launch_gemv_fast(const GemvArgs& a, DType xt, void* scratch, size_t scratch_size,
                             cudaStream_t stream) {
  return fast::launch_with<T>(a, xt, scratch, scratch_size, true, stream);
}
template <int T>
cudaError_t launch_gemv_fast_moe(const GemvArgs& a, DType xt, int P, int min_chunks, cudaStream_t stream) {
  return fast::launch_moe<T>(a, xt, P, min_chunks, stream);
}

#define GQ_FAST_INSTANTIATE(T)                                        \
  template size_t gemv_fast_scratch<T>(int, int, int64_t);           \
  template size_t gemv_stream_ks_part<T>(int, int, int);              \
  template cudaError_t launch_gemv_stream<T>(const GemvArgs&, DType, cudaStream_t);  \
  template cudaError_t launch_gemv_fast<T>(const GemvArgs&, DType, void*, size_t, cudaStream_t); \
  template cudaError_t launch_gemv_fast_moe<T>(const GemvArgs&, DType, int, int, cudaStream_t);

}  // namespace gq
