// RMS norm over rows of BF16 activations.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace tf::cuda {

struct RmsNormArgs {
  const __nv_bfloat16* x = nullptr;  // [rows, d]
  const __nv_bfloat16* w = nullptr;  // [d]
  __nv_bfloat16* out = nullptr;      // [rows, d]
  int64_t rows = 0, d = 0;
  float eps = 0;
};

// out = x / sqrt(mean(x^2) + eps) * w.
void launch_rms_norm(const RmsNormArgs& a, cudaStream_t stream);

}  // namespace tf::cuda
