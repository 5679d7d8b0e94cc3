#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/norm.cuh"

namespace tf::cuda {
namespace {

constexpr int kThreads = 256;

// One block per row. Phase 1: (residual add and store,) sum of squares in float. Phase 2:
// block reduction. Phase 3: scale by the inverse RMS and the weight, round once to BF16.
// Each thread re-reads in phase 3 only the elements it wrote in phase 1, so no barrier is
// needed between them beyond the reduction's.
template <bool kAdd>
__global__ void rms_norm_kernel(RmsNormArgs a) {
  __shared__ float scratch[32];
  bf16* xr = a.x + int64_t(blockIdx.x) * a.d;
  float ss = 0;
  for (int64_t i = threadIdx.x; i < a.d; i += blockDim.x) {
    float v = to_float(xr[i]);
    if constexpr (kAdd) {
      const bf16 sum = from_float<bf16>(v + to_float(a.delta[int64_t(blockIdx.x) * a.d + i]));
      xr[i] = sum;
      v = to_float(sum);
    }
    ss += v * v;
  }
  ss = block_sum(ss, scratch);
  const float inv = 1.0f / sqrtf(ss / float(a.d) + a.eps);
  bf16* out = a.out + int64_t(blockIdx.x) * a.d;
  for (int64_t i = threadIdx.x; i < a.d; i += blockDim.x)
    out[i] = from_float<bf16>(to_float(xr[i]) * inv * to_float(a.w[i]));
}

}  // namespace

void launch_rms_norm(const RmsNormArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return;
  if (a.delta) {
    rms_norm_kernel<true><<<unsigned(a.rows), kThreads, 0, stream>>>(a);
    TF_CUDA_CHECK_LAUNCH("rms_norm_kernel<add>");
  } else {
    rms_norm_kernel<false><<<unsigned(a.rows), kThreads, 0, stream>>>(a);
    TF_CUDA_CHECK_LAUNCH("rms_norm_kernel");
  }
}

}  // namespace tf::cuda
