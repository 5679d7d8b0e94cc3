// The matmul of every projection and the LM head, on cuBLAS.
//
// Layout mapping: cuBLAS is column-major. A row-major [r, c] matrix is the column-major
// [c, r] matrix with leading dimension c, so with row-major x [rows, k], w [m, k] and
// out [rows, m]:
//   out^T (col-major m x rows, ld m) = w (m x k) . x^T (k x rows)
//                                    = op_T(W_c) . op_N(X_c)
// where W_c = w read column-major (k x m, ld k) and X_c = x read column-major (k x rows,
// ld k). Hence cublasGemmEx(T, N, m, rows, k, W_c, ld k, X_c, ld k, out, ld m).
//
// Bias: broadcast into out first and run the GEMM with beta = 1, so cuBLAS computes
// x.w + bias in FP32 and rounds once (an epilogue kernel adding bias to a BF16 output would
// round twice). Costs one extra write + read of out, only for layers that have a bias.
// Accumulate (the residual add of a projection): beta = 1 with out as C, so out + x.w is
// summed in FP32 and rounded once (callers with a bias add apart instead).
#include <cublas_v2.h>

#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm.cuh"

namespace tf::cuda {
namespace {

constexpr int kThreads = 256;

template <typename OutT>
__global__ void broadcast_bias_kernel(const bf16* bias, int64_t rows, int64_t m, OutT* out) {
  const int64_t n = rows * m;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = from_float<OutT>(to_float(bias[i % m]));
}

}  // namespace

void launch_gemm(cublasHandle_t handle, const GemmArgs& g, cudaStream_t stream) {
  if (g.rows == 0 || g.m == 0) return;
  float beta = g.accumulate ? 1.0f : 0.0f;
  if (g.bias && !g.accumulate) {
    const int64_t n = g.rows * g.m;
    const int blocks = int(std::min<int64_t>((n + kThreads - 1) / kThreads, 65536));
    if (g.out_f32)
      broadcast_bias_kernel<float><<<blocks, kThreads, 0, stream>>>(g.bias, g.rows, g.m, static_cast<float*>(g.out));
    else
      broadcast_bias_kernel<bf16><<<blocks, kThreads, 0, stream>>>(g.bias, g.rows, g.m, static_cast<bf16*>(g.out));
    TF_CUDA_CHECK_LAUNCH("broadcast_bias_kernel");
    beta = 1.0f;
  }
  const float alpha = 1.0f;
  TF_CUBLAS_CHECK(cublasSetStream(handle, stream));
  TF_CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, int(g.m), int(g.rows), int(g.k), &alpha,
                               g.w, CUDA_R_16BF, int(g.k), g.x, CUDA_R_16BF, int(g.k), &beta, g.out,
                               g.out_f32 ? CUDA_R_32F : CUDA_R_16BF, int(g.m), CUBLAS_COMPUTE_32F,
                               CUBLAS_GEMM_DEFAULT));
}

}  // namespace tf::cuda
