// The scale kernel of an FP8 W8A8 GEMM that also quantizes its output for the next FP8 GEMM
// (launch_fp8_scale_then_quantize): one block per row, the row's values in registers, so the
// per-token FP8 scale (the row's maximum) is known before the codes are written. Each kernel
// takes the steps of the kernels it replaces (quant_gemm.cu's fp8_scale_then_kernel, then
// quantize_rows_fp8_kernel or rms_norm_quantize_fp8_kernel) at the same rounding points, so
// its outputs equal theirs bit for bit.
#include <cuda_bf16.h>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/quant_gemm.cuh"
#include "backend/cuda/row_device.cuh"

namespace tf::cuda {

namespace {

using bf16 = __nv_bfloat16;

// The gated kernel: 8 outputs a chunk, up to kChunks chunks a thread.
constexpr int kGatedThreads = 512;

__device__ __forceinline__ float round_bf16(float v) { return to_float(from_float<bf16>(v)); }

// Eight per-feature scales from column j on, or ones where there are none (unit scales: the
// sums are the product's output already, as an outer-vector GEMM writes it).
__device__ __forceinline__ void load_scales8(const float* ws, int64_t j, float (&w)[8]) {
  if (ws) {
    load_acc8(ws + j, w);
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) w[e] = 1.0f;
  }
}

// resid[r] += scale(acc[r]) (rounded as fp8_scale_then_kernel<AddTo>), then q[r], qscale[r] =
// per-token FP8 of rms_norm(resid[r]) * norm_w as rms_norm_quantize_fp8_kernel computes them.
template <typename AccT>
__global__ void __launch_bounds__(kFp8NormThreads)
    fp8_scale_add_norm_quantize_kernel(const AccT* acc, const float* xs, const float* ws, const bf16* bias, int64_t m,
                                       bf16* resid, const bf16* norm_w, float eps, uint8_t* q, float* qscale) {
  __shared__ float scratch[32];
  pdl_begin();
  const int64_t r = blockIdx.x, n8 = m / 8;
  const float x_scale = xs ? xs[r] : 1.0f;
  const AccT* ar = acc + r * m;
  uint4* rr = reinterpret_cast<uint4*>(resid + r * m);
  float v[kFp8NormChunks][8];
  float ss = 0;
#pragma unroll
  for (int c = 0; c < kFp8NormChunks; ++c) {
    const int64_t i = threadIdx.x + int64_t(c) * kFp8NormThreads;
    if (i >= n8) break;
    float a[8], w[8];
    load_acc8(ar + 8 * i, a);
    load_scales8(ws, 8 * i, w);
    unpack8(rr[i], v[c]);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float y = round_bf16(fp8_scaled(a[e], x_scale, w[e], bias, 8 * i + e));
      v[c][e] = round_bf16(v[c][e] + y);
      ss += v[c][e] * v[c][e];
    }
    rr[i] = pack8(v[c]);
  }
  ss = block_sum(ss, scratch);
  float amax = 0.0f;
  bool finite = true;
  norm_chunks<kFp8NormThreads>(v, n8, ss, m, eps, norm_w, amax, finite);
  store_fp8_row<kFp8NormThreads>(v, n8, amax, finite, q + r * m, qscale + r, scratch);
}

// out[r] = act(scale(gate)) * scale(up) (rounded as fp8_scale_then_kernel<Swiglu / Geglu>),
// then q[r], qscale[r] = per-token FP8 of out[r] as quantize_rows_fp8_kernel computes them.
template <Fp8Then kThen, int kChunks, typename AccT>
__global__ void __launch_bounds__(kGatedThreads)
    fp8_scale_gated_quantize_kernel(const AccT* acc, const float* xs, const float* ws, const bf16* bias, int64_t m,
                                    bf16* out, uint8_t* q, float* qscale) {
  __shared__ float scratch[32];
  pdl_begin();
  const int64_t r = blockIdx.x, n_out = m / 2, n8 = n_out / 8;
  const float x_scale = xs ? xs[r] : 1.0f;
  const AccT* ar = acc + r * m;
  uint4* orow = reinterpret_cast<uint4*>(out + r * n_out);
  float v[kChunks][8];
  float amax = 0.0f;
  bool finite = true;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int64_t i = threadIdx.x + int64_t(c) * kGatedThreads;
    if (i >= n8) break;
    float ga[8], ua[8], gw[8], uw[8];
    load_acc8(ar + 8 * i, ga);
    load_acc8(ar + n_out + 8 * i, ua);
    load_scales8(ws, 8 * i, gw);
    load_scales8(ws, n_out + 8 * i, uw);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float g = round_bf16(fp8_scaled(ga[e], x_scale, gw[e], bias, 8 * i + e));
      const float u = round_bf16(fp8_scaled(ua[e], x_scale, uw[e], bias, n_out + 8 * i + e));
      v[c][e] = round_bf16((kThen == Fp8Then::Geglu ? gelu_tanh(g) : silu(g)) * u);
      finite &= isfinite(v[c][e]);
      amax = fmaxf(amax, fabsf(v[c][e]));
    }
    orow[i] = pack8(v[c]);
  }
  store_fp8_row<kGatedThreads>(v, n8, amax, finite, q + r * n_out, qscale + r, scratch);
}

template <Fp8Then kThen, typename AccT>
bool launch_gated(const AccT* acc, const float* xs, const float* ws, const bf16* bias, int64_t rows, int64_t m,
                  bf16* out, uint8_t* q, float* qscale, cudaStream_t stream) {
  const int64_t n8 = m / 16;
  if (n8 <= int64_t(kGatedThreads) * 4)
    launch_pdl(fp8_scale_gated_quantize_kernel<kThen, 4, AccT>, dim3(unsigned(rows)), dim3(kGatedThreads), 0, stream,
               acc, xs, ws, bias, m, out, q, qscale);
  else if (n8 <= int64_t(kGatedThreads) * 8)
    launch_pdl(fp8_scale_gated_quantize_kernel<kThen, 8, AccT>, dim3(unsigned(rows)), dim3(kGatedThreads), 0, stream,
               acc, xs, ws, bias, m, out, q, qscale);
  else
    return false;
  TF_CUDA_CHECK_LAUNCH("fp8_scale_gated_quantize_kernel");
  return true;
}

template <typename AccT>
bool scale_then_quantize(Fp8Then then, const AccT* acc, const float* x_scale, const float* w_scale, const bf16* bias,
                         int64_t rows, int64_t m, bf16* out, const bf16* norm_w, float eps, uint8_t* q,
                         float* q_scale, cudaStream_t stream) {
  if (then == Fp8Then::AddTo) {
    if (!norm_w || m > kFp8NormMaxK) return false;
    if (rows == 0) return true;
    launch_pdl(fp8_scale_add_norm_quantize_kernel<AccT>, dim3(unsigned(rows)), dim3(kFp8NormThreads), 0, stream, acc,
               x_scale, w_scale, bias, m, out, norm_w, eps, q, q_scale);
    TF_CUDA_CHECK_LAUNCH("fp8_scale_add_norm_quantize_kernel");
    return true;
  }
  if (norm_w) return false;
  if (rows == 0) return m / 16 <= int64_t(kGatedThreads) * 8;
  return then == Fp8Then::Swiglu
             ? launch_gated<Fp8Then::Swiglu>(acc, x_scale, w_scale, bias, rows, m, out, q, q_scale, stream)
             : launch_gated<Fp8Then::Geglu>(acc, x_scale, w_scale, bias, rows, m, out, q, q_scale, stream);
}

}  // namespace

bool launch_fp8_scale_then_quantize(Fp8Then then, const void* acc, bool acc_f32, const float* x_scale,
                                    const float* w_scale, const bf16* bias, int64_t rows, int64_t m, bf16* out,
                                    const bf16* norm_w, float eps, uint8_t* q, float* q_scale, cudaStream_t stream) {
  const uintptr_t addresses = reinterpret_cast<uintptr_t>(acc) | reinterpret_cast<uintptr_t>(w_scale) |
                              reinterpret_cast<uintptr_t>(out) | reinterpret_cast<uintptr_t>(norm_w) |
                              reinterpret_cast<uintptr_t>(q);
  if (m % 16 != 0 || addresses % 16 != 0 || (x_scale == nullptr) != (w_scale == nullptr)) return false;
  if (acc_f32)
    return scale_then_quantize(then, static_cast<const float*>(acc), x_scale, w_scale, bias, rows, m, out, norm_w, eps,
                               q, q_scale, stream);
  return scale_then_quantize(then, static_cast<const bf16*>(acc), x_scale, w_scale, bias, rows, m, out, norm_w, eps, q,
                             q_scale, stream);
}

}  // namespace tf::cuda
