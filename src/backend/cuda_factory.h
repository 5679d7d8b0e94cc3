// The one entry point of the CUDA backend that code outside backend/cuda sees. CMake picks
// its definition: src/backend/cuda/cuda_backend.cpp when TF_CUDA is ON, cuda_factory_off.cpp
// (which throws a clear error) otherwise, so no C++ file needs #ifdef TF_CUDA.
#pragma once

#include <memory>

#include "backend/backend.h"

namespace tf {

std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& opt);

}  // namespace tf
