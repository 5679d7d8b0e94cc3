// out = x @ w^T (+ bias) with cuBLAS: BF16 inputs, FP32 accumulation, BF16 or F32 output.
#pragma once

#include <cublas_api.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace tf::cuda {

struct GemmArgs {
  const __nv_bfloat16* x = nullptr;     // [rows, k] row-major
  const __nv_bfloat16* w = nullptr;     // [m, k] row-major (checkpoint layout)
  const __nv_bfloat16* bias = nullptr;  // [m] or nullptr
  void* out = nullptr;                  // [rows, m] row-major, BF16 or F32
  bool out_f32 = false;
  bool accumulate = false;              // out += x @ w^T (beta = 1; no bias)
  int64_t rows = 0, k = 0, m = 0;
};

void launch_gemm(cublasHandle_t handle, const GemmArgs& g, cudaStream_t stream);

}  // namespace tf::cuda
