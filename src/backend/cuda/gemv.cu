// Small-batch matmul for decode: memory-bound, so the only goal is to stream the weight
// matrix at full bandwidth.
//
// One warp per output feature j (8 warps per block): lane l reads 16-byte chunks l, l + 32,
// ... of row j of w (8 BF16 each, so a warp reads 512 contiguous bytes per step: coalesced),
// four chunks in flight before any arithmetic, and multiplies them with the same chunks of
// each of the R input rows (x is small and shared by all warps: it stays in L1/L2). FP32
// accumulators, one warp reduction per input row at the end, bias added in FP32, one
// rounding on the store. Weights are read with L1::no_allocate: read once, they would only
// evict x from L1.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv.cuh"

namespace tf::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kUnroll = 4;

template <int R>
__device__ __forceinline__ void fma_chunk(const uint4& wv, const bf16* x, int64_t k, int64_t i, float (&acc)[R]) {
  const float w[8] = {bf16_lo(wv.x), bf16_hi(wv.x), bf16_lo(wv.y), bf16_hi(wv.y),
                      bf16_lo(wv.z), bf16_hi(wv.z), bf16_lo(wv.w), bf16_hi(wv.w)};
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const uint4 xv = __ldg(reinterpret_cast<const uint4*>(x + r * k) + i);
    acc[r] += w[0] * bf16_lo(xv.x) + w[1] * bf16_hi(xv.x) + w[2] * bf16_lo(xv.y) + w[3] * bf16_hi(xv.y) +
              w[4] * bf16_lo(xv.z) + w[5] * bf16_hi(xv.z) + w[6] * bf16_lo(xv.w) + w[7] * bf16_hi(xv.w);
  }
}

template <int R, typename OutT>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(GemmArgs g) {
  const int lane = threadIdx.x % 32;
  const int64_t j = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (j >= g.m) return;
  const uint4* wr = reinterpret_cast<const uint4*>(g.w + j * g.k);
  const int64_t n_chunks = g.k / 8;
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
  int64_t i = lane;
  for (; i + 32 * (kUnroll - 1) < n_chunks; i += 32 * kUnroll) {
    uint4 wv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) wv[u] = load_stream(wr + i + 32 * u);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) fma_chunk<R>(wv[u], g.x, g.k, i + 32 * u, acc);
  }
  for (; i < n_chunks; i += 32) fma_chunk<R>(load_stream(wr + i), g.x, g.k, i, acc);
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = warp_sum(acc[r]);
  if (lane == 0) {
    const float b = g.bias ? to_float(g.bias[j]) : 0.0f;
    OutT* out = static_cast<OutT*>(g.out);
#pragma unroll
    for (int r = 0; r < R; ++r) out[r * g.m + j] = from_float<OutT>(acc[r] + b);
  }
}

template <int R>
void launch_rows(const GemmArgs& g, cudaStream_t stream) {
  const unsigned grid = unsigned((g.m + kWarps - 1) / kWarps);
  if (g.out_f32)
    gemv_kernel<R, float><<<grid, kWarps * 32, 0, stream>>>(g);
  else
    gemv_kernel<R, bf16><<<grid, kWarps * 32, 0, stream>>>(g);
}

}  // namespace

bool gemv_supported(const GemmArgs& g) {
  return g.rows >= 1 && g.rows <= kGemvMaxRows && g.k % 8 == 0 && reinterpret_cast<uintptr_t>(g.x) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(g.w) % 16 == 0;
}

void launch_gemv(const GemmArgs& g, cudaStream_t stream) {
  if (g.m == 0) return;
  switch (g.rows) {
    case 1: launch_rows<1>(g, stream); break;
    case 2: launch_rows<2>(g, stream); break;
    case 3: launch_rows<3>(g, stream); break;
    case 4: launch_rows<4>(g, stream); break;
    case 5: launch_rows<5>(g, stream); break;
    case 6: launch_rows<6>(g, stream); break;
    case 7: launch_rows<7>(g, stream); break;
    default: launch_rows<8>(g, stream); break;
  }
  TF_CUDA_CHECK_LAUNCH("gemv_kernel");
}

}  // namespace tf::cuda
