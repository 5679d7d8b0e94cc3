#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/norm.cuh"
#include "backend/cuda/row_device.cuh"

namespace tf::cuda {
namespace {

constexpr int kThreads = 256;

// One block per row. Phase 1: sum of squares in float. Phase 2: block reduction. Phase 3:
// scale by the inverse RMS and the weight, round once to BF16.
__global__ void rms_norm_kernel(RmsNormArgs a) {
  __shared__ float scratch[32];
  pdl_begin();
  const bf16* xr = a.x + int64_t(blockIdx.x) * a.d;
  float ss = 0;
  for (int64_t i = threadIdx.x; i < a.d; i += blockDim.x) {
    const float v = to_float(xr[i]);
    ss += v * v;
  }
  ss = block_sum(ss, scratch);
  const float inv = 1.0f / sqrtf(ss / float(a.d) + a.eps);
  bf16* out = a.out + int64_t(blockIdx.x) * a.d;
  for (int64_t i = threadIdx.x; i < a.d; i += blockDim.x)
    out[i] = from_float<bf16>(to_float(xr[i]) * inv * to_float(a.w[i]));
}

// The same with 16-byte accesses, for d a multiple of 8 and at most 8 * kVecThreads * kMaxChunks:
// thread t owns the 8-element chunks t, t + kVecThreads, ... and keeps them in registers
// between the sum of squares and the scaling, so each element is read once (one row per
// block is latency-bound at decode: a few wide loads per thread instead of 16 narrow
// dependent ones).
constexpr int kVecThreads = 256, kMaxChunks = 4;

__global__ void __launch_bounds__(kVecThreads) rms_norm_vec_kernel(RmsNormArgs a) {
  __shared__ float scratch[32];
  pdl_begin();
  const int64_t row = blockIdx.x, n_chunks = a.d / 8;
  const uint4* xr = reinterpret_cast<const uint4*>(a.x + row * a.d);
  float v[kMaxChunks][8];
  const float ss = block_sum(load_chunks_sum_squares<kVecThreads>(xr, n_chunks, v), scratch);
  const float inv = 1.0f / sqrtf(ss / float(a.d) + a.eps);
  uint4* out = reinterpret_cast<uint4*>(a.out + row * a.d);
#pragma unroll
  for (int c = 0; c < kMaxChunks; ++c) {
    const int64_t i = threadIdx.x + int64_t(c) * kVecThreads;
    if (i >= n_chunks) break;
    float w[8];
    unpack8(reinterpret_cast<const uint4*>(a.w)[i], w);
#pragma unroll
    for (int e = 0; e < 8; ++e) v[c][e] = v[c][e] * inv * w[e];
    out[i] = pack8(v[c]);
  }
}

}  // namespace

void launch_rms_norm(const RmsNormArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return;
  const uintptr_t addresses =
      reinterpret_cast<uintptr_t>(a.x) | reinterpret_cast<uintptr_t>(a.w) | reinterpret_cast<uintptr_t>(a.out);
  const bool aligned = addresses % 16 == 0;
  if (aligned && a.d % 8 == 0 && a.d <= 8 * kVecThreads * kMaxChunks) {
    launch_pdl(rms_norm_vec_kernel, dim3(unsigned(a.rows)), dim3(kVecThreads), 0, stream, a);
    TF_CUDA_CHECK_LAUNCH("rms_norm_vec_kernel");
    return;
  }
  launch_pdl(rms_norm_kernel, dim3(unsigned(a.rows)), dim3(kThreads), 0, stream, a);
  TF_CUDA_CHECK_LAUNCH("rms_norm_kernel");
}

}  // namespace tf::cuda
