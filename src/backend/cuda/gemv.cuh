// The small-batch matmul (decode): out = x @ w^T (+ bias) for a few rows, reading every weight
// once with 16-byte loads. cuBLAS serves the same call; CudaBackend::matmul times both on
// each shape and keeps the faster (see gemv.cu).
#pragma once

#include <cuda_runtime_api.h>

#include "backend/cuda/gemm.cuh"

namespace tf::cuda {

constexpr int64_t kGemvMaxRows = 8;

// True when launch_gemv can run `g`: rows <= kGemvMaxRows, k a multiple of 8 (16-byte rows),
// 16-byte aligned x and w.
bool gemv_supported(const GemmArgs& g);
void launch_gemv(const GemmArgs& g, cudaStream_t stream);

}  // namespace tf::cuda
