// Kernel launches with programmatic dependent launch (PDL): the launched kernel may begin
// while the previous kernel of the stream finishes, overlapping one op's tail and launch
// latency with the next op's start (the next GEMV issues its weight loads early). Kernels
// launched this way call pdl_begin() before touching anything an earlier kernel wrote
// (common.cuh). Stream capture keeps the relation in a CUDA Graph as a programmatic edge.
// BackendOptions::pdl turns it off (plain stream order) to measure its gain; the kernels whose
// grid is sized to the GPU (launch_resident) follow ::pdl_decode_resident in decode steps and
// ::pdl_resident elsewhere, the others ::pdl_decode in decode steps; the decode attention
// kernel with ::decode_early_keys takes PDL where either switch gives it
// (decode_attention_mma.cu). CudaBackend::set_batch sets the switches per step; with
// BackendOptions::pdl_timed, a recorded step replayed often is recorded again with both on and
// the faster recording kept.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <utility>

#include "backend/cuda/cuda_check.h"

namespace tf::cuda {

// Process-wide switch (set by CudaBackend::set_options; every backend of a process shares
// it, which is what a benchmark toggle needs).
inline std::atomic<bool>& pdl_enabled() {
  static std::atomic<bool> on{true};
  return on;
}

// PDL for the kernels launched with launch_resident: those whose grid is the blocks that fit
// on the GPU at once. CudaBackend::set_batch sets it per step: in decode steps from
// BackendOptions::pdl_decode_resident or ::pdl_decode with ::pdl_resident, in other steps from
// ::pdl_resident (off by default: launched early, the blocks of such a grid land on whichever
// SMs the previous kernel has left, while the grid assumes an even spread; docs/PERF.md).
inline std::atomic<bool>& pdl_resident_enabled() {
  static std::atomic<bool> on{false};
  return on;
}

// Kernel attributes (dynamic shared memory above 48 KB, the carveout) belong to a kernel on
// one device: `set` runs once per device this process launches on (tensor-parallel ranks may
// drive several GPUs from one process). `done` is the kernel's own flag word (a static).
template <typename Set>
void once_per_device(std::atomic<uint64_t>& done, Set&& set) {
  int device = 0;
  TF_CUDA_CHECK(cudaGetDevice(&device));
  const uint64_t bit = device < 64 ? uint64_t(1) << device : 0;
  if (bit && (done.load(std::memory_order_acquire) & bit)) return;
  set();
  done.fetch_or(bit, std::memory_order_release);
}

// Blocks of `kernel` that run at once on the current device at `threads` and `smem` bytes of
// dynamic shared memory a block: the occupancy calculator's blocks an SM (at least 1, at most
// `max_per_sm` when > 0) times the SMs.
template <typename... Params>
int64_t resident_blocks(void (*kernel)(Params...), int threads, size_t smem, int max_per_sm = 0) {
  int device = 0, sms = 0, per_sm = 0;
  TF_CUDA_CHECK(cudaGetDevice(&device));
  TF_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  TF_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  if (max_per_sm > 0) per_sm = std::min(per_sm, max_per_sm);
  return int64_t(std::max(per_sm, 1)) * sms;
}

// `cluster`: the blocks of a thread block cluster ({1, 1, 1}: no clusters; else the grid is a
// multiple of it).
template <typename... Params, typename... Args>
void launch_with(bool pdl, dim3 cluster, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                 cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
  unsigned n_attrs = 1;
  if (cluster.x * cluster.y * cluster.z > 1) {
    attr[1].id = cudaLaunchAttributeClusterDimension;
    attr[1].val.clusterDim.x = cluster.x;
    attr[1].val.clusterDim.y = cluster.y;
    attr[1].val.clusterDim.z = cluster.z;
    n_attrs = 2;
  }
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = n_attrs;
  TF_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

// With PDL unless it is switched off, in thread block clusters of `cluster` blocks.
template <typename... Params, typename... Args>
void launch_pdl_cluster(dim3 cluster, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                        cudaStream_t stream, Args&&... args) {
  launch_with(pdl_enabled().load(std::memory_order_relaxed), cluster, kernel, grid, block, smem, stream,
              std::forward<Args>(args)...);
}

template <typename... Params, typename... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
  launch_pdl_cluster(dim3(1, 1, 1), kernel, grid, block, smem, stream, std::forward<Args>(args)...);
}

// A kernel whose grid is resident_blocks() (or fewer): with PDL when pdl_resident_enabled().
template <typename... Params, typename... Args>
void launch_resident(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                     Args&&... args) {
  launch_with(pdl_resident_enabled().load(std::memory_order_relaxed), dim3(1, 1, 1), kernel, grid, block, smem, stream,
              std::forward<Args>(args)...);
}

}  // namespace tf::cuda
