// Reducing a warp's lane sums of several rows at once (the k-split decode GEMVs of
// gemv_split.cu, and tests/backend/cuda/bench_layer_stream): one transposed butterfly instead
// of a full warp reduction per row.
#pragma once

#include <cstdint>

namespace tf::cuda {

// Transposed butterfly: on entry v[u] is this lane's share of row u (u < U); on return v[0]
// is the whole warp's sum of row (lane >> (5 - log2 U)) % U. Step N (U, U / 2, ..., 2) swaps
// half of the N values with the lane kOff apart and adds the other half.
template <int U, int N>
__device__ __forceinline__ void fold_rows(float (&v)[U], int lane) {
  if constexpr (N > 1) {
    constexpr int kHalf = N / 2, kOff = 16 * N / U;
    const bool upper = lane & kOff;
#pragma unroll
    for (int u = 0; u < kHalf; ++u) {
      const float send = upper ? v[u] : v[u + kHalf];
      const float keep = upper ? v[u + kHalf] : v[u];
      v[u] = keep + __shfl_xor_sync(0xffffffffu, send, kOff);
    }
    fold_rows<U, kHalf>(v, lane);
  } else {
#pragma unroll
    for (int o = 16 / U; o > 0; o >>= 1) v[0] += __shfl_xor_sync(0xffffffffu, v[0], o);
  }
}

// A warp's lane sums of rows t0 .. t0 + U - 1 (p[u] of row t0 + u), reduced and stored into
// its sums at [t0 + u] for the rows below n.
template <int U>
__device__ __forceinline__ void store_rows(float (&p)[U], float* sums, int t0, int n) {
  const int lane = int(threadIdx.x % 32);
  fold_rows<U, U>(p, lane);
  constexpr int kLanesPerRow = 32 / U;
  const int t = t0 + lane / kLanesPerRow;
  if (lane % kLanesPerRow == 0 && t < n) sums[t] = p[0];
}

}  // namespace tf::cuda
