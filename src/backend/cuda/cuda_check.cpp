#include "backend/cuda/cuda_check.h"

#include "core/error.h"

namespace tf::cuda {

void throw_cuda_error(cudaError_t e, const char* call, const char* file, int line) {
  fail("CUDA error in {} ({}:{}): {}: {}", call, file, line, cudaGetErrorName(e), cudaGetErrorString(e));
}

void throw_cublas_error(cublasStatus_t s, const char* call, const char* file, int line) {
  fail("cuBLAS error in {} ({}:{}): {}: {}", call, file, line, cublasGetStatusName(s), cublasGetStatusString(s));
}

}  // namespace tf::cuda
