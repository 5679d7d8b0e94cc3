#include "backend/cuda/attention.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/rope_device.cuh"
#include "backend/cuda/rope_kv.cuh"
#include "backend/cuda/row_device.cuh"

#include <type_traits>

namespace tf::cuda {
namespace {

constexpr int kHeadsPerBlock = 4;                   // one warp each
constexpr int kMaxPairs = kAttnMaxHeadDim / 2 / 32;  // pairs (i, i + head_dim / 2) a lane holds

// Lane `lane`'s pairs (dims i and i + half, i = lane, lane + 32, ...) stored to row r.
template <typename T>
__device__ __forceinline__ void store_pairs(T* r, const float (&y0)[kMaxPairs], const float (&y1)[kMaxPairs], int lane,
                                            int64_t half) {
#pragma unroll
  for (int j = 0; j < kMaxPairs; ++j) {
    const int64_t i = lane + 32 * j;
    if (i < half) {
      r[i] = from_float<T>(y0[j]);
      r[i + half] = from_float<T>(y1[j]);
    }
  }
}

// Grid (n_tokens, heads / kHeadsPerBlock rounded up), the heads being q heads, then k heads,
// then v heads as laid out in a qkv row: one warp per (token, head). Lane l holds the pairs
// of dims (i, i + head_dim / 2) for i = l, l + 32, ... < head_dim / 2 in registers, does the
// norm's sum and the 8-bit scale's maximum by shuffles, and rotates in registers when every
// dim is rotated (n_rot = head_dim), else through the warp's row of shared memory (pairs (i,
// i + n_rot / 2)). Every element of qkv and of the pool is written by one lane only. kRotate:
// normalize and rotate q and k in qkv; kWrite: write k and v to the pool (from the float
// values when both are on, from qkv otherwise).
template <typename KvT, bool kRotate, bool kWrite>
__global__ void __launch_bounds__(32 * kHeadsPerBlock) rope_kv_write_kernel(RopeKvArgs a) {
  __shared__ float rows[kHeadsPerBlock][kAttnMaxHeadDim];
  pdl_begin();
  const int warp = int(threadIdx.x / 32), lane = int(threadIdx.x % 32);
  const int64_t it = blockIdx.x, head = int64_t(blockIdx.y) * kHeadsPerBlock + warp, hd = a.head_dim, half = hd / 2;
  const int64_t n_heads = a.n_heads + 2 * a.n_kv_heads;
  if (head >= n_heads) return;  // uniform over the warp; no block-wide barrier below
  const bool is_v = head >= a.n_heads + a.n_kv_heads, is_q = head < a.n_heads;
  if (kRotate ? is_v && !kWrite : is_q) return;
  bf16* r = a.qkv + it * n_heads * hd + head * hd;
  float y0[kMaxPairs], y1[kMaxPairs];
  if (a.acc) {  // uniform over the grid
    const int64_t at = (it * n_heads + head) * hd;
    const float xs = a.acc_x_scale[it];
    auto y = [&](int64_t i) {
      const int64_t col = head * hd + i;
      const float s =
          a.acc_f32 ? static_cast<const float*>(a.acc)[at + i] : to_float(static_cast<const bf16*>(a.acc)[at + i]);
      return to_float(from_float<bf16>(fp8_scaled(s, xs, a.acc_w_scale[col], a.acc_bias, col)));
    };
#pragma unroll
    for (int j = 0; j < kMaxPairs; ++j) {
      const int64_t i = lane + 32 * j;
      y0[j] = i < half ? y(i) : 0.0f;
      y1[j] = i < half ? y(i + half) : 0.0f;
    }
  } else {
#pragma unroll
    for (int j = 0; j < kMaxPairs; ++j) {
      const int64_t i = lane + 32 * j;
      y0[j] = i < half ? to_float(r[i]) : 0.0f;
      y1[j] = i < half ? to_float(r[i + half]) : 0.0f;
    }
  }
  if (kRotate && !is_v) {  // uniform over the warp
    const bf16* norm = is_q ? a.q_norm : a.k_norm;
    if (norm) {
      float ss = 0.0f;
#pragma unroll
      for (int j = 0; j < kMaxPairs; ++j) ss += y0[j] * y0[j] + y1[j] * y1[j];
      const float inv = 1.0f / sqrtf(warp_sum(ss) / float(hd) + a.eps);
#pragma unroll
      for (int j = 0; j < kMaxPairs; ++j) {
        const int64_t i = lane + 32 * j;
        if (i < half) {
          y0[j] = y0[j] * inv * to_float(norm[i]);
          y1[j] = y1[j] * inv * to_float(norm[i + half]);
        }
      }
    }
    const int32_t pos = a.batch.positions[it];
    const float* freq = a.inv_freq_long && pos >= a.long_from ? a.inv_freq_long : a.inv_freq;
    const int64_t nh = a.n_rot / 2;
    if (nh == half) {
#pragma unroll
      for (int j = 0; j < kMaxPairs; ++j)
        if (lane + 32 * j < half) rope_rotate(y0[j], y1[j], pos, freq[lane + 32 * j], a.mscale);
    } else {
      float* h = rows[warp];
#pragma unroll
      for (int j = 0; j < kMaxPairs; ++j) {
        const int64_t i = lane + 32 * j;
        if (i < half) h[i] = y0[j], h[i + half] = y1[j];
      }
      __syncwarp();
      for (int64_t i = lane; i < nh; i += 32) {
        float u0 = h[i], u1 = h[i + nh];
        rope_rotate(u0, u1, pos, freq[i], a.mscale);
        h[i] = u0;
        h[i + nh] = u1;
      }
      __syncwarp();
#pragma unroll
      for (int j = 0; j < kMaxPairs; ++j) {
        const int64_t i = lane + 32 * j;
        if (i < half) y0[j] = h[i], y1[j] = h[i + half];
      }
    }
    store_pairs(r, y0, y1, lane, half);
  } else if (a.acc) {  // v rows: stored as the scale kernel would have
    store_pairs(r, y0, y1, lane, half);
  }
  if (!kWrite || is_q) return;

  const int64_t slot = a.batch.slot_mapping[it];
  const int64_t kvh = is_v ? head - a.n_heads - a.n_kv_heads : head - a.n_heads;
  const int64_t row = kv_slot_row(slot, a.n_kv_heads, kvh, a.block_size);
  KvT* dst = static_cast<KvT*>(is_v ? a.v_pool : a.k_pool) + row * hd;
  if constexpr (std::is_same_v<KvT, int8_t> || std::is_same_v<KvT, fp8_e4m3>) {
    constexpr bool kInt8 = std::is_same_v<KvT, int8_t>;
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < kMaxPairs; ++j) {
      const bool finite = isfinite(y0[j]) && isfinite(y1[j]);
      amax = fmaxf(amax, finite ? fmaxf(fabsf(y0[j]), fabsf(y1[j])) : INFINITY);
    }
    amax = warp_max(amax);
    const float scale = isinf(amax) ? NAN : amax / (kInt8 ? 127.0f : 448.0f);
    const bool zero = !(scale > 0.0f) || isnan(scale);  // zero row, underflow, or non-finite
#pragma unroll
    for (int j = 0; j < kMaxPairs; ++j) {
      const int64_t i = lane + 32 * j;
      if (i >= half) continue;
      if constexpr (kInt8) {
        dst[i] = zero ? int8_t(0) : int8_t(fminf(fmaxf(rintf(y0[j] / scale), -127.0f), 127.0f));
        dst[i + half] = zero ? int8_t(0) : int8_t(fminf(fmaxf(rintf(y1[j] / scale), -127.0f), 127.0f));
      } else {  // the constructor rounds to nearest even and saturates (__NV_SATFINITE)
        dst[i] = zero ? fp8_e4m3(0.0f) : fp8_e4m3(y0[j] / scale);
        dst[i + half] = zero ? fp8_e4m3(0.0f) : fp8_e4m3(y1[j] / scale);
      }
    }
    if (lane == 0) (is_v ? a.v_scale : a.k_scale)[row] = scale;
  } else {
    store_pairs(dst, y0, y1, lane, half);
  }
}

template <typename KvT>
void launch_kv(const RopeKvArgs& a, dim3 grid, cudaStream_t stream) {
  const dim3 block(32 * kHeadsPerBlock);
  if (a.fused) {
    launch_pdl(rope_kv_write_kernel<KvT, true, true>, grid, block, 0, stream, a);
  } else {
    launch_pdl(rope_kv_write_kernel<KvT, true, false>, grid, block, 0, stream, a);
    launch_pdl(rope_kv_write_kernel<KvT, false, true>, grid, block, 0, stream, a);
  }
}

}  // namespace

void launch_rope_kv_write(const RopeKvArgs& a, cudaStream_t stream) {
  if (a.batch.n_tokens == 0) return;
  if (a.acc && !a.fused)
    throw_cuda_error(cudaErrorInvalidValue, "launch_rope_kv_write: FP8 sums need the fused kernel", __FILE__, __LINE__);
  const int64_t heads = a.n_heads + 2 * a.n_kv_heads;
  const dim3 grid(unsigned(a.batch.n_tokens), unsigned((heads + kHeadsPerBlock - 1) / kHeadsPerBlock));
  switch (a.kv_dtype) {
    case DType::BF16: launch_kv<bf16>(a, grid, stream); break;
    case DType::F16: launch_kv<__half>(a, grid, stream); break;
    case DType::I8: launch_kv<int8_t>(a, grid, stream); break;
    case DType::FP8: launch_kv<fp8_e4m3>(a, grid, stream); break;
    default: launch_kv<float>(a, grid, stream); break;
  }
  TF_CUDA_CHECK_LAUNCH("rope_kv_write_kernel");
}

}  // namespace tf::cuda
