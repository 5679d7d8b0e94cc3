// Turns failures of CUDA runtime and cuBLAS calls into tf::Error naming the call, the place
// and the library's message. Usable from .cu files: it includes no fmt (nvcc's front end
// rejects fmt's consteval format strings), the message is formatted in cuda_check.cpp.
#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>

namespace tf::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t e, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t s, const char* call, const char* file, int line);

inline void check_cuda(cudaError_t e, const char* call, const char* file, int line) {
  if (e != cudaSuccess) throw_cuda_error(e, call, file, line);
}
inline void check_cublas(cublasStatus_t s, const char* call, const char* file, int line) {
  if (s != CUBLAS_STATUS_SUCCESS) throw_cublas_error(s, call, file, line);
}

}  // namespace tf::cuda

#define TF_CUDA_CHECK(call) ::tf::cuda::check_cuda((call), #call, __FILE__, __LINE__)
#define TF_CUBLAS_CHECK(call) ::tf::cuda::check_cublas((call), #call, __FILE__, __LINE__)
// After a kernel launch: a bad configuration (grid, shared memory) is reported here; a
// fault inside the kernel surfaces at the next synchronizing call, also as tf::Error.
#define TF_CUDA_CHECK_LAUNCH(kernel_name) \
  ::tf::cuda::check_cuda(cudaGetLastError(), "launch of " kernel_name, __FILE__, __LINE__)
