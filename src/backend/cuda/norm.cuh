// RMS norm and the fused residual add + RMS norm over rows of BF16 activations.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace tf::cuda {

struct RmsNormArgs {
  __nv_bfloat16* x = nullptr;            // [rows, d]; the residual (updated) when delta is set
  const __nv_bfloat16* delta = nullptr;  // [rows, d] or nullptr (plain rms_norm)
  const __nv_bfloat16* w = nullptr;      // [d]
  __nv_bfloat16* out = nullptr;          // [rows, d]
  int64_t rows = 0, d = 0;
  float eps = 0;
};

// out = x / sqrt(mean(x^2) + eps) * w; with delta: first x += delta (stored as BF16, and
// the stored value is what gets normalized, as the reference normalizes its stored residual).
void launch_rms_norm(const RmsNormArgs& a, cudaStream_t stream);

}  // namespace tf::cuda
