// out = x @ w^T (+ bias) with cuBLAS: BF16 inputs, FP32 accumulation, BF16 or F32 output.
#pragma once

#include <cublas_api.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace tf::cuda {

// A quantized weight [m, k] in a layout of quant/formats.h, on the device.
struct QuantWeightArgs {
  DType dtype = DType::BF16;         // W8, W4 or FP8; BF16: the weight is GemmArgs::w
  const uint8_t* q = nullptr;        // the packed codes, rows of dtype_row_bytes(dtype, k)
  const void* scales = nullptr;      // W8/FP8: F32 [m]; W4: F16 [m, k / group_size]
  const uint8_t* zeros = nullptr;    // W4: [m, k / group_size]
  int32_t group_size = 0;            // W4
};

struct GemmArgs {
  const __nv_bfloat16* x = nullptr;     // [rows, k] row-major
  const __nv_bfloat16* w = nullptr;     // [m, k] row-major (checkpoint layout); unused when wq is set
  const __nv_bfloat16* bias = nullptr;  // [m] or nullptr
  void* out = nullptr;                  // [rows, m] row-major, BF16 or F32
  bool out_f32 = false;
  bool accumulate = false;              // out += x @ w^T (beta = 1; no bias)
  int64_t rows = 0, k = 0, m = 0;
  QuantWeightArgs wq;                   // a quantized weight: the GEMV and quant_gemm.cuh read it, cuBLAS does not
  bool quantized() const { return wq.dtype != DType::BF16; }
};

void launch_gemm(cublasHandle_t handle, const GemmArgs& g, cudaStream_t stream);

}  // namespace tf::cuda
