// The tensor-core kernels of quant_mma.cuh for W4 weights.
#include "backend/cuda/quant_mma.cuh"

namespace tf::cuda::qmma {

void launch_w4(const GemmArgs& g, const GemvFusion& f, const Plan& p, cudaStream_t stream) {
  launch_format<W4>(g, f, p, stream);
}

}  // namespace tf::cuda::qmma
