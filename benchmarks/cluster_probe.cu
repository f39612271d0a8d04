// Where, and when, a programmatic dependent launch of small clusters runs while a launch of larger
// clusters holds one CTA an SM (kernels-src/gguf_kernels/NOTES.md, v46): the K split's clusters of 4
// leave 12 of the H200's SMs idle on 14336 -> 4096 at M = 8, and v46's tail launch of 2-CTA clusters,
// meant for those SMs, cost 1.2-5.8 us instead of hiding. Standalone, no torch:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a benchmarks/cluster_probe.cu -o /tmp/cluster_probe
//   /tmp/cluster_probe [head_z=4] [tail_z=2] [head_us=20] [tail_us=3]
// Both kernels only spin: each CTA stamps its SM and the global timer as it starts and ends. The head
// takes as many clusters of head_z as can run at once (one CTA an SM: more than half an SM's shared
// memory), the tail as many clusters of tail_z as the SMs left over could hold. Printed for the tail
// launched as a dependent (PDL) and as a plain launch: each tail CTA's SM, whether a head CTA ran on
// it, and when it started and ended, against the head's first start and last end.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <vector>

#include "cuda_check.h"

struct Stamp {
  unsigned long long start, end;
  unsigned sm;
};

__device__ __forceinline__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// One stamp a CTA; the dependents may launch at once (as the K split's head lets them, after its wait)
__global__ void spin_kernel(Stamp* out, unsigned long long spin_ns) {
  if (threadIdx.x != 0) return;
  const unsigned long long t0 = now_ns();
  asm volatile("griddepcontrol.launch_dependents;");
  unsigned sm;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  while (now_ns() - t0 < spin_ns) {
  }
  out[blockIdx.x] = {t0, now_ns(), sm};
}

// A launch of `grid` one-warp CTAs in clusters of z (`at`: room for its attributes), PDL if asked
static cudaLaunchConfig_t config(int grid, int z, size_t smem, bool pdl, cudaStream_t s, cudaLaunchAttribute (&at)[2]) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(32);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  at[0].id = cudaLaunchAttributeClusterDimension;
  at[0].val.clusterDim.x = z;
  at[0].val.clusterDim.y = at[0].val.clusterDim.z = 1;
  at[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[1].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = at;
  cfg.numAttrs = pdl ? 2 : 1;
  return cfg;
}

static cudaError_t launch(int grid, int z, size_t smem, bool pdl, cudaStream_t s, Stamp* out, unsigned long long ns) {
  cudaLaunchAttribute at[2];
  const cudaLaunchConfig_t cfg = config(grid, z, smem, pdl, s, at);
  return cudaLaunchKernelEx(&cfg, spin_kernel, out, ns);
}

int main(int argc, char** argv) {
  const int head_z = argc > 1 ? std::atoi(argv[1]) : 4, tail_z = argc > 2 ? std::atoi(argv[2]) : 2;
  const double head_us = argc > 3 ? std::atof(argv[3]) : 20.0, tail_us = argc > 4 ? std::atof(argv[4]) : 3.0;
  cudaDeviceProp p;
  CK(cudaGetDeviceProperties(&p, 0));
  const size_t smem = p.sharedMemPerMultiprocessor / 2 + 1024;  // one CTA an SM, as the K split's launches
  CK(cudaFuncSetAttribute(spin_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  CK(cudaFuncSetAttribute(spin_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  int head_clusters = 0;
  cudaLaunchAttribute at[2];
  const cudaLaunchConfig_t head_cfg = config(head_z * p.multiProcessorCount, head_z, smem, false, nullptr, at);
  CK(cudaOccupancyMaxActiveClusters(&head_clusters, spin_kernel, &head_cfg));
  const int head_grid = head_clusters * head_z;
  const int tail_grid = (p.multiProcessorCount - head_grid) / tail_z * tail_z;
  std::printf("%s, %d SMs: head %d clusters of %d (%d SMs), tail %d clusters of %d on the %d SMs left\n", p.name,
              p.multiProcessorCount, head_clusters, head_z, head_grid, tail_grid / tail_z, tail_z,
              p.multiProcessorCount - head_grid);
  if (tail_grid == 0) return 0;
  Stamp *dh, *dt;
  CK(cudaMalloc(&dh, head_grid * sizeof(Stamp)));
  CK(cudaMalloc(&dt, tail_grid * sizeof(Stamp)));
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  for (int pdl = 1; pdl >= 0; --pdl) {
    for (int rep = 0; rep < 3; ++rep) {  // the first rep warms the launch path; the last is printed
      CK(launch(head_grid, head_z, smem, false, s, dh, (unsigned long long)(head_us * 1e3)));
      CK(launch(tail_grid, tail_z, smem, pdl, s, dt, (unsigned long long)(tail_us * 1e3)));
      CK(cudaStreamSynchronize(s));
    }
    std::vector<Stamp> h(head_grid), t(tail_grid);
    CK(cudaMemcpy(h.data(), dh, h.size() * sizeof(Stamp), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(t.data(), dt, t.size() * sizeof(Stamp), cudaMemcpyDeviceToHost));
    unsigned long long h0 = ~0ull, h1 = 0;
    std::set<unsigned> head_sms;
    for (const Stamp& x : h) {
      h0 = std::min(h0, x.start);
      h1 = std::max(h1, x.end);
      head_sms.insert(x.sm);
    }
    std::printf("\n## tail as %s: head CTAs from 0 to %.1f us, on %zu SMs\n\n", pdl ? "a dependent launch (PDL)" : "a plain launch",
                (h1 - h0) * 1e-3, head_sms.size());
    std::printf("| tail CTA | SM | a head CTA's SM | start us | end us |\n| ---: | ---: | --- | ---: | ---: |\n");
    int on_idle = 0;
    for (int i = 0; i < tail_grid; ++i) {
      const bool shared = head_sms.count(t[i].sm) > 0;
      on_idle += !shared;
      std::printf("| %d | %u | %s | %.1f | %.1f |\n", i, t[i].sm, shared ? "yes" : "no",
                  ((long long)(t[i].start - h0)) * 1e-3, ((long long)(t[i].end - h0)) * 1e-3);
    }
    std::printf("\n%d of %d tail CTAs ran on SMs the head left idle\n", on_idle, tail_grid);
  }
  return 0;
}
