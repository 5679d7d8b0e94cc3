// The tensor-core kernels of quant_mma.cuh for W8 weights.
#include "backend/cuda/quant_mma.cuh"

namespace tf::cuda::qmma {

void launch_w8(const GemmArgs& g, const GemvFusion& f, const Plan& p, cudaStream_t stream) {
  launch_format<W8>(g, f, p, stream);
}

}  // namespace tf::cuda::qmma
