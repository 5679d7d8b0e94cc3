// L2 prefetch of a weight matrix ahead of the op that reads it (Backend::prefetch).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tf::cuda {

// Starts loading [p, p + bytes) into L2 with bulk prefetches (cp.async.bulk.prefetch.L2,
// Hopper) and returns: the loads run on while the following kernels do. Only whole 16-byte
// units inside the range are prefetched; p need not be aligned. Launched with PDL.
void launch_prefetch_l2(const void* p, int64_t bytes, cudaStream_t stream);

}  // namespace tf::cuda
