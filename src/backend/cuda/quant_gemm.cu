// Kernels of quant_gemm.cuh.
//
// The tensor-core kernel (quant_mma_kernel) needs no repacked weight layout. mma.m16n8k16
// sums over k, so the k index may be permuted freely as long as A (activations) and B
// (weights) use the same permutation. Each lane q of a quad reads one 16-byte chunk of a
// weight row: E = 32 (W4) or 16 (W8) consecutive elements [E q, E q + E) of a k-chunk of 4 E;
// in mma step s (E / 4 steps per chunk) its B registers take elements E q + 4 s + {0, 1}
// (b0) and E q + 4 s + {2, 3} (b1), which the mma reads as k rows 2q, 2q+1 and 2q+8, 2q+9.
// The A fragment registers a0/a2 (a1/a3 for row + 8) must then hold x at the same elements,
// E q + 4 s .. E q + 4 s + 3: four consecutive BF16 values. So a lane's weights are one
// coalesced 16-byte load per row and k-chunk, its activations E contiguous BF16 values per
// row, and no shared memory is involved. A W4 chunk (32 elements, group sizes multiples of 32)
// lies in one group: one scale and zero per lane and row. W4 codes become BF16 pairs exactly
// (128 + code, with the exponent of 128 OR-ed in), minus (128 + zero), times the group's scale
// (BF16: the rounding of the scale and of the product are the kernel's only additions to the
// reference's arithmetic); W8 codes become exact BF16 integers and the row scale multiplies
// the FP32 accumulator at the end.
//
// Tile: 4 warps, each 16 output features (two n8 tiles) x 16 MT rows (MT m16 tiles); a block
// covers 64 features x 16 MT rows, the grid all of them. Rows beyond `rows` read zeros and
// are not stored; features beyond m are skipped.
#include <cuda_fp8.h>

#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/quant_gemm.cuh"

namespace tf::cuda {
namespace {

constexpr int kMmaWarps = 4;
constexpr int kFeaturesPerWarp = 16;

__device__ __forceinline__ uint32_t as_u32(__nv_bfloat162 v) { return *reinterpret_cast<uint32_t*>(&v); }
__device__ __forceinline__ __nv_bfloat162 as_bf162(uint32_t u) { return *reinterpret_cast<__nv_bfloat162*>(&u); }

// W4: the two codes of byte c (low nibble first) as BF16 (code - zero) * scale.
__device__ __forceinline__ uint32_t w4_pair(uint32_t c, __nv_bfloat162 zero128, __nv_bfloat162 scale) {
  const uint32_t u = (c & 0xFu) | ((c & 0xF0u) << 12) | 0x43004300u;  // (128 + lo, 128 + hi)
  return as_u32(__hmul2(__hsub2(as_bf162(u), zero128), scale));
}
// W8: two int8 (the low byte first, in the low 16 bits of p) as exact BF16 integers.
__device__ __forceinline__ uint32_t w8_pair(uint32_t p) {
  const float lo = float(int8_t(p & 0xFFu)), hi = float(int8_t((p >> 8) & 0xFFu));
  return pack_bf16(lo, hi);
}

template <DType kW, int MT>
__global__ void __launch_bounds__(kMmaWarps * 32) quant_mma_kernel(GemmArgs g) {
  constexpr int E = kW == DType::W4 ? 32 : 16;  // elements of a lane's 16-byte weight chunk
  constexpr int kChunk = 4 * E;                 // k per iteration
  constexpr int kSteps = E / 4;                 // mma k-steps per iteration
  constexpr int NT = kFeaturesPerWarp / 8;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, gid = lane / 4, q = lane % 4;
  const int64_t n0 = int64_t(blockIdx.x) * kMmaWarps * kFeaturesPerWarp + warp * kFeaturesPerWarp;
  const int64_t r0 = int64_t(blockIdx.y) * 16 * MT;
  const int64_t k = g.k, row_bytes = kW == DType::W4 ? k / 2 : k;
  const int64_t n_groups = kW == DType::W4 ? k / g.wq.group_size : 1;
  pdl_begin();

  float acc[MT][NT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[mt][t][c] = 0.0f;

  for (int64_t kc = 0; kc < k; kc += kChunk) {
    // B: this lane's chunk of feature n0 + 8 t + gid, dequantized into kSteps x (b0, b1)
    uint32_t b[NT][kSteps][2];
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const int64_t n = n0 + 8 * t + gid;
      uint4 wv = make_uint4(0, 0, 0, 0);
      const int64_t col = kc + E * q;  // first element of the chunk
      if (n < g.m)
        wv = load_stream(reinterpret_cast<const uint4*>(g.wq.q + n * row_bytes + (kW == DType::W4 ? col / 2 : col)));
      const uint32_t words[4] = {wv.x, wv.y, wv.z, wv.w};
      if constexpr (kW == DType::W4) {
        __nv_bfloat162 zero128 = __float2bfloat162_rn(128.0f), scale = __float2bfloat162_rn(0.0f);
        if (n < g.m) {
          const int64_t grp = n * n_groups + col / g.wq.group_size;
          zero128 = __float2bfloat162_rn(128.0f + float(g.wq.zeros[grp]));
          scale = __float2bfloat162_rn(__half2float(static_cast<const __half*>(g.wq.scales)[grp]));
        }
#pragma unroll
        for (int s = 0; s < kSteps; ++s) {  // step s: bytes 2s (b0) and 2s + 1 (b1) of the chunk
          b[t][s][0] = w4_pair((words[s / 2] >> (16 * (s % 2))) & 0xFFu, zero128, scale);
          b[t][s][1] = w4_pair((words[s / 2] >> (16 * (s % 2) + 8)) & 0xFFu, zero128, scale);
        }
      } else {
#pragma unroll
        for (int s = 0; s < kSteps; ++s) {  // step s: bytes 4s, 4s+1 (b0) and 4s+2, 4s+3 (b1)
          b[t][s][0] = w8_pair(words[s]);
          b[t][s][1] = w8_pair(words[s] >> 16);
        }
      }
    }
    // A: rows r0 + 16 mt + gid (+ 8), elements kc + E q .. + E as kSteps x (a0, a2) words
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      uint32_t xa[2][E / 2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t r = r0 + 16 * mt + gid + 8 * h;
        const uint4* src = reinterpret_cast<const uint4*>(g.x + r * k + kc + E * q);
#pragma unroll
        for (int v = 0; v < E / 8; ++v) {
          const uint4 u = r < g.rows ? __ldg(src + v) : make_uint4(0, 0, 0, 0);
          xa[h][4 * v] = u.x, xa[h][4 * v + 1] = u.y, xa[h][4 * v + 2] = u.z, xa[h][4 * v + 3] = u.w;
        }
      }
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
        const uint32_t a[4] = {xa[0][2 * s], xa[1][2 * s], xa[0][2 * s + 1], xa[1][2 * s + 1]};
#pragma unroll
        for (int t = 0; t < NT; ++t) mma_bf16(acc[mt][t], a, b[t][s][0], b[t][s][1]);
      }
    }
  }

  // C: (row gid, features 2q, 2q+1) in c0, c1; row gid + 8 in c2, c3
#pragma unroll
  for (int t = 0; t < NT; ++t) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int64_t n = n0 + 8 * t + 2 * q + e;
      if (n >= g.m) continue;
      const float s = kW == DType::W8 ? static_cast<const float*>(g.wq.scales)[n] : 1.0f;
      const float bias = g.bias ? to_float(g.bias[n]) : 0.0f;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t r = r0 + 16 * mt + gid + 8 * h;
          if (r >= g.rows) continue;
          const float y = acc[mt][t][2 * h + e] * s + bias;
          if (g.out_f32)
            static_cast<float*>(g.out)[r * g.m + n] = y;
          else
            static_cast<bf16*>(g.out)[r * g.m + n] = from_float<bf16>(y);
        }
    }
  }
}

template <DType kW, int MT>
void launch_mt(const GemmArgs& g, cudaStream_t stream) {
  const dim3 grid(unsigned((g.m + kMmaWarps * kFeaturesPerWarp - 1) / (kMmaWarps * kFeaturesPerWarp)),
                  unsigned((g.rows + 16 * MT - 1) / (16 * MT)));
  launch_pdl(quant_mma_kernel<kW, MT>, grid, dim3(kMmaWarps * 32), 0, stream, g);
}

template <DType kW>
void launch_w(const GemmArgs& g, cudaStream_t stream) {
  if (g.rows <= 16)
    launch_mt<kW, 1>(g, stream);
  else if (g.rows <= 32)
    launch_mt<kW, 2>(g, stream);
  else
    launch_mt<kW, 4>(g, stream);
}

// ---- dequantization ---------------------------------------------------------------------------

// Thread i: elements 8 i .. 8 i + 7 of the matrix (k is a multiple of 8 for every caller: W4
// needs even k, the others 16-byte rows for the BF16 output).
__global__ void dequantize_kernel(QuantWeightArgs w, int64_t m, int64_t k, bf16* out) {
  const int64_t n8 = m * k / 8;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n8; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i * 8 / k, col = i * 8 % k;
    float v[8];
    if (w.dtype == DType::W4) {
      const int64_t n_groups = k / w.group_size, grp = row * n_groups + col / w.group_size;
      const float s = __half2float(static_cast<const __half*>(w.scales)[grp]);
      const int z = w.zeros[grp];
      const uint32_t word = *reinterpret_cast<const uint32_t*>(w.q + row * (k / 2) + col / 2);
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = s * float(int((word >> (4 * e)) & 15u) - z);
    } else {
      const float s = static_cast<const float*>(w.scales)[row];
      const uint2 bytes = *reinterpret_cast<const uint2*>(w.q + row * k + col);
      const uint8_t* b = reinterpret_cast<const uint8_t*>(&bytes);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        if (w.dtype == DType::W8) {
          v[e] = s * float(int8_t(b[e]));
        } else {
          __nv_fp8_e4m3 f;
          f.__x = b[e];
          v[e] = s * float(f);
        }
      }
    }
    reinterpret_cast<uint4*>(out)[i] = pack8(v);
  }
}

// ---- FP8 activations -------------------------------------------------------------------------

constexpr int kRowThreads = 256;

__global__ void __launch_bounds__(kRowThreads) quantize_rows_fp8_kernel(const bf16* x, int64_t k, uint8_t* q,
                                                                        float* scale) {
  __shared__ float scratch[32];
  pdl_begin();
  const bf16* xr = x + int64_t(blockIdx.x) * k;
  uint8_t* qr = q + int64_t(blockIdx.x) * k;
  float amax = 0.0f;
  bool finite = true;
  for (int64_t i = threadIdx.x; i < k; i += kRowThreads) {
    const float v = to_float(xr[i]);
    finite &= isfinite(v);
    amax = fmaxf(amax, fabsf(v));
  }
  amax = block_max(finite ? amax : INFINITY, scratch);
  const float s = isinf(amax) ? NAN : amax / 448.0f;
  const bool zero = !(s > 0.0f);  // zero row, underflow, or NaN
  for (int64_t i = threadIdx.x; i < k; i += kRowThreads)
    qr[i] = zero ? uint8_t(0) : __nv_fp8_e4m3(to_float(xr[i]) / s).__x;
  if (threadIdx.x == 0) scale[blockIdx.x] = s;
}

template <typename OutT>
__global__ void fp8_scale_kernel(const float* acc, const float* xs, const float* ws, const bf16* bias, int64_t rows,
                                 int64_t m, OutT* out) {
  pdl_begin();
  const int64_t n = rows * m;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / m, j = i % m;
    out[i] = from_float<OutT>(acc[i] * xs[r] * ws[j] + (bias ? to_float(bias[j]) : 0.0f));
  }
}

int grid_for(int64_t n, int threads) { return int(std::min<int64_t>((n + threads - 1) / threads, 4096)); }

}  // namespace

bool quant_mma_supported(const GemmArgs& g) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (g.accumulate || g.rows < 1 || !aligned(g.x) || !aligned(g.wq.q)) return false;
  if (g.wq.dtype == DType::W4)
    return g.k % 128 == 0 && g.wq.group_size > 0 && g.wq.group_size % 32 == 0 && g.k % g.wq.group_size == 0;
  return g.wq.dtype == DType::W8 && g.k % 64 == 0;
}

void launch_quant_mma(const GemmArgs& g, cudaStream_t stream) {
  if (g.rows == 0 || g.m == 0) return;
  if (g.wq.dtype == DType::W4)
    launch_w<DType::W4>(g, stream);
  else
    launch_w<DType::W8>(g, stream);
  TF_CUDA_CHECK_LAUNCH("quant_mma_kernel");
}

void launch_dequantize(const QuantWeightArgs& w, int64_t m, int64_t k, bf16* out, cudaStream_t stream) {
  if (m == 0 || k == 0) return;
  dequantize_kernel<<<grid_for(m * k / 8, 256), 256, 0, stream>>>(w, m, k, out);
  TF_CUDA_CHECK_LAUNCH("dequantize_kernel");
}

void launch_quantize_rows_fp8(const bf16* x, int64_t rows, int64_t k, uint8_t* q, float* scale, cudaStream_t stream) {
  if (rows == 0) return;
  quantize_rows_fp8_kernel<<<unsigned(rows), kRowThreads, 0, stream>>>(x, k, q, scale);
  TF_CUDA_CHECK_LAUNCH("quantize_rows_fp8_kernel");
}

void launch_fp8_scale_epilogue(const float* acc, const float* x_scale, const float* w_scale, const bf16* bias,
                               int64_t rows, int64_t m, void* out, bool out_f32, cudaStream_t stream) {
  if (rows == 0 || m == 0) return;
  const int blocks = grid_for(rows * m, 256);
  if (out_f32)
    fp8_scale_kernel<float><<<blocks, 256, 0, stream>>>(acc, x_scale, w_scale, bias, rows, m, static_cast<float*>(out));
  else
    fp8_scale_kernel<bf16><<<blocks, 256, 0, stream>>>(acc, x_scale, w_scale, bias, rows, m, static_cast<bf16*>(out));
  TF_CUDA_CHECK_LAUNCH("fp8_scale_kernel");
}

}  // namespace tf::cuda
