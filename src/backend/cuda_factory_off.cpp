// make_cuda_backend() of a build without the CUDA backend (TF_CUDA=OFF).
#include "backend/cuda_factory.h"

#include "core/error.h"

namespace tf {

std::unique_ptr<Backend> make_cuda_backend(const BackendOptions&) {
  fail("this build of twofold has no CUDA backend (configure with -DTF_CUDA=ON)");
}

}  // namespace tf
