// Argmax per row: one block of 1024 threads per row; each thread keeps the best (value, id)
// of its strided share (ids ascending, so a strict > keeps the lowest id among equals), then
// a warp and a block reduction that prefer the larger value and, on equal values, the lower id.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/sample.cuh"

namespace tf::cuda {
namespace {

constexpr int kThreads = 1024;

__device__ __forceinline__ void better(float& v, int32_t& id, float v2, int32_t id2) {
  if (v2 > v || (v2 == v && id2 < id)) {
    v = v2;
    id = id2;
  }
}

__global__ void __launch_bounds__(kThreads) argmax_kernel(const float* logits, int64_t n_vocab, int32_t* ids) {
  __shared__ float vs[32];
  __shared__ int32_t is[32];
  pdl_begin();
  const float* row = logits + int64_t(blockIdx.x) * n_vocab;
  float v = -INFINITY;
  int32_t id = INT32_MAX;
  if (n_vocab % 4 == 0) {  // 16-byte loads; within a thread ids still ascend
    const float4* r4 = reinterpret_cast<const float4*>(row);
    for (int64_t j = threadIdx.x; j < n_vocab / 4; j += kThreads) {
      const float4 x = r4[j];
      const float xs[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (xs[e] > v) {
          v = xs[e];
          id = int32_t(4 * j + e);
        }
    }
  } else {
    for (int64_t j = threadIdx.x; j < n_vocab; j += kThreads) {
      const float x = row[j];
      if (x > v) {
        v = x;
        id = int32_t(j);
      }
    }
  }
  for (int o = 16; o > 0; o >>= 1)
    better(v, id, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, id, o));
  if (threadIdx.x % 32 == 0) {
    vs[threadIdx.x / 32] = v;
    is[threadIdx.x / 32] = id;
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    v = vs[threadIdx.x];
    id = is[threadIdx.x];
    for (int o = 16; o > 0; o >>= 1)
      better(v, id, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, id, o));
    if (threadIdx.x == 0) ids[blockIdx.x] = id == INT32_MAX ? 0 : id;
  }
}

}  // namespace

void launch_argmax_rows(const float* logits, int64_t rows, int64_t n_vocab, int32_t* ids, cudaStream_t stream) {
  if (rows == 0) return;
  launch_pdl(argmax_kernel, dim3(unsigned(rows)), dim3(kThreads), 0, stream, logits, n_vocab, ids);
  TF_CUDA_CHECK_LAUNCH("argmax_kernel");
}

}  // namespace tf::cuda
