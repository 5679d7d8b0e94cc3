// L2 prefetch: one bulk prefetch instruction per lane, kChunk bytes each. The instructions
// are fire-and-forget: the kernel ends at once, the copies into L2 run on in the background.
// Used for the attention projection's weights while the latency-bound attention kernels
// leave DRAM idle, so the o_proj matmul then reads them from L2.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/prefetch.cuh"

namespace tf::cuda {
namespace {

constexpr int64_t kChunk = 32 * 1024;
constexpr int kThreads = 128;

__global__ void __launch_bounds__(kThreads) prefetch_l2_kernel(const char* p, int64_t bytes) {
  const int64_t at = (int64_t(blockIdx.x) * kThreads + threadIdx.x) * kChunk;
  if (at < bytes) {
    const uint32_t n = uint32_t(bytes - at < kChunk ? bytes - at : kChunk) & ~15u;
    if (n > 0) asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + at), "r"(n) : "memory");
  }
  // Reads only weights, but waits like every PDL kernel, so the kernel after it still starts
  // after everything before it is done.
  pdl_wait();
  pdl_launch_dependents();
}

}  // namespace

void launch_prefetch_l2(const void* p, int64_t bytes, cudaStream_t stream) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p), start = (a + 15) & ~uintptr_t(15);
  bytes -= int64_t(start - a);
  if (bytes < 16) return;
  const int64_t lanes = (bytes + kChunk - 1) / kChunk;
  launch_pdl(prefetch_l2_kernel, dim3(unsigned((lanes + kThreads - 1) / kThreads)), dim3(kThreads), 0, stream,
             reinterpret_cast<const char*>(start), bytes);
}

}  // namespace tf::cuda
