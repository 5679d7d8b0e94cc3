// Device steps shared by the one-block-per-row kernels: the RMS norm's chunked load with its
// sum of squares (norm.cu, and the norm fused with FP8 quantization in quant_gemm.cu), the
// norm applied to a row held in registers and its per-token FP8 (E4M3) scale and codes
// (quant_gemm.cu's quantization kernels, fp8_handoff.cu's epilogues). The kernels of a fused /
// apart pair call the same steps, so the fused kernel's output equals the two apart.
#pragma once

#include <cuda_fp8.h>

#include "backend/cuda/common.cuh"

namespace tf::cuda {

// The block and register depth of the one-block-per-row RMSNorm + FP8 kernels (quant_gemm.cu's
// rms_norm_quantize_fp8_kernel, fp8_handoff.cu's add + norm + quantize): one pair for both, so
// they sum a row's squares in the same per-thread order and their codes agree bit for bit.
// Rows of at most kFp8NormMaxK elements.
constexpr int kFp8NormThreads = 256, kFp8NormChunks = 4;
constexpr int64_t kFp8NormMaxK = int64_t(8) * kFp8NormThreads * kFp8NormChunks;

// Thread t loads the 8-element chunks t, t + kThreads, ... (fewer than n8) of a row into `v`
// and returns the sum of their squares (this thread's share; block_sum gives the row's).
template <int kThreads, int kChunks>
__device__ __forceinline__ float load_chunks_sum_squares(const uint4* row, int64_t n8, float (&v)[kChunks][8]) {
  float ss = 0;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int64_t i = threadIdx.x + int64_t(c) * kThreads;
    if (i >= n8) break;
    unpack8(row[i], v[c]);
#pragma unroll
    for (int e = 0; e < 8; ++e) ss += v[c][e] * v[c][e];
  }
  return ss;
}

// The row's FP8 scale from each thread's maximum magnitude and finiteness: amax / 448, NaN
// when any value is not finite. A scale that is not > 0 (a zero row, underflow, NaN) means
// the row's codes are all zero (fp8_pack8's `zero`).
__device__ __forceinline__ float fp8_row_scale(float amax, bool finite, float* scratch) {
  amax = block_max(finite ? amax : INFINITY, scratch);
  return isinf(amax) ? NAN : amax / 448.0f;
}

// An FP8 GEMM's unit-scale sums (the Epilogue scaling's buffer), F32 or BF16, as floats:
// 4 or 8 consecutive ones from an address aligned to their size.
__device__ __forceinline__ void load_acc4(const float* p, float (&v)[4]) {
  const float4 a = *reinterpret_cast<const float4*>(p);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
}
__device__ __forceinline__ void load_acc4(const __nv_bfloat16* p, float (&v)[4]) {
  const uint2 u = *reinterpret_cast<const uint2*>(p);
  const __nv_bfloat162 a = *reinterpret_cast<const __nv_bfloat162*>(&u.x);
  const __nv_bfloat162 b = *reinterpret_cast<const __nv_bfloat162*>(&u.y);
  v[0] = __low2float(a), v[1] = __high2float(a), v[2] = __low2float(b), v[3] = __high2float(b);
}
__device__ __forceinline__ void load_acc8(const float* p, float (&v)[8]) {
  const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ void load_acc8(const __nv_bfloat16* p, float (&v)[8]) {
  unpack8(*reinterpret_cast<const uint4*>(p), v);
}

// An FP8 GEMM's output from its unit-scale sum: acc * x_scale * w_scale (+ the column's bias),
// before the rounding to the output type (the scale kernels and rope_kv_write's FP8 input).
__device__ __forceinline__ float fp8_scaled(float acc, float x_scale, float w_scale, const __nv_bfloat16* bias,
                                            int64_t col) {
  return acc * x_scale * w_scale + (bias ? to_float(bias[col]) : 0.0f);
}

__device__ __forceinline__ uint2 fp8_pack8(const float (&v)[8], float s, bool zero) {
  uint32_t w[2] = {0, 0};
  if (!zero)
#pragma unroll
    for (int e = 0; e < 8; ++e) w[e / 4] |= uint32_t(__nv_fp8_e4m3(v[e] / s).__x) << (8 * (e % 4));
  return make_uint2(w[0], w[1]);
}

// Thread t's chunks of a row (chunk i = t + c * kThreads, fewer than n8) after the RMSNorm's
// sum of squares `ss` over k elements: v = BF16(v / rms * w), the rounding of rms_norm_vec_kernel
// (norm.cu); `amax` and `finite` take the rounded values in.
template <int kThreads, int kChunks>
__device__ __forceinline__ void norm_chunks(float (&v)[kChunks][8], int64_t n8, float ss, int64_t k, float eps,
                                            const __nv_bfloat16* w, float& amax, bool& finite) {
  const float inv = 1.0f / sqrtf(ss / float(k) + eps);
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int64_t i = threadIdx.x + int64_t(c) * kThreads;
    if (i >= n8) break;
    float wv[8];
    unpack8(reinterpret_cast<const uint4*>(w)[i], wv);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      v[c][e] = to_float(from_float<__nv_bfloat16>(v[c][e] * inv * wv[e]));
      finite &= isfinite(v[c][e]);
      amax = fmaxf(amax, fabsf(v[c][e]));
    }
  }
}

// A row held in registers as thread t's chunks (as norm_chunks) written as per-token FP8: the
// codes to q_row, the scale (fp8_row_scale of the block's amax and finiteness) to *scale.
template <int kThreads, int kChunks>
__device__ __forceinline__ void store_fp8_row(const float (&v)[kChunks][8], int64_t n8, float amax, bool finite,
                                              uint8_t* q_row, float* scale, float* scratch) {
  const float s = fp8_row_scale(amax, finite, scratch);
  const bool zero = !(s > 0.0f);
  uint2* qr = reinterpret_cast<uint2*>(q_row);
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int64_t i = threadIdx.x + int64_t(c) * kThreads;
    if (i >= n8) break;
    qr[i] = fp8_pack8(v[c], s, zero);
  }
  if (threadIdx.x == 0) *scale = s;
}

}  // namespace tf::cuda
