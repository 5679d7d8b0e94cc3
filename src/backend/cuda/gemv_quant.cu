// The decode GEMV (gemv.cu, gemv_kernel.cuh) on quantized weights (quant/formats.h): a warp
// streams a weight row in 16-byte chunks as for BF16, and dequantizes each chunk in registers:
//   W8:  16 int8 per chunk; the row's F32 scale multiplies the reduced sum once at the end.
//   W4:  32 codes per chunk, all in one group (group sizes are multiples of 32): the chunk's
//        products sum (q - zero) * x, then one multiply by the group's F16 scale joins the
//        accumulator.
//   FP8: 16 E4M3 per chunk, converted two at a time by the hardware (cvt e4m3x2 -> f16x2);
//        the row's scale at the end, as W8.
// Integers become floats without a conversion instruction: a value v < 2^8 placed in the low
// mantissa bits of 2^23 (exponent byte 0x4B) reads as the float 2^23 + v, so one subtraction
// gives v minus whatever offset is folded into the constant (the zero point, or 128 for the
// sign-flipped int8). Every step is exact; the only roundings are the FP32 sums, so results
// match the reference's dequantize-then-multiply to FP32 accuracy before the BF16 store.
#include <cuda_fp8.h>

#include "backend/cuda/gemv_kernel.cuh"

namespace tf::cuda::gemv_detail {
namespace {

constexpr float kTwo23 = 8388608.0f;

// The four int8 of a word as floats (byte e -> f[e]).
__device__ __forceinline__ void int8x4_to_floats(uint32_t w, float* f) {
  const uint32_t u = w ^ 0x80808080u;  // int8 + 128, as unsigned bytes
#pragma unroll
  for (int e = 0; e < 4; ++e) f[e] = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7540u + uint32_t(e))) - (kTwo23 + 128.0f);
}

struct WeightW8 {
  static constexpr int kElems = 16;
  static constexpr bool kRowScale = true;
  __device__ static const uint4* row(const GemmArgs& g, int64_t j) {
    return reinterpret_cast<const uint4*>(g.wq.q + j * g.k);
  }
  template <int R, bool kShared>
  __device__ static void fma(const GemmArgs&, int64_t, const uint4& wv, const uint4* x, int64_t n_chunks, int64_t i,
                             float (&acc)[R]) {
    float w[8];
    int8x4_to_floats(wv.x, w);
    int8x4_to_floats(wv.y, w + 4);
    fma8<R, kShared>(w, x, n_chunks, 2 * i, acc);
    int8x4_to_floats(wv.z, w);
    int8x4_to_floats(wv.w, w + 4);
    fma8<R, kShared>(w, x, n_chunks, 2 * i + 1, acc);
  }
  __device__ static float row_scale(const GemmArgs& g, int64_t j) { return static_cast<const float*>(g.wq.scales)[j]; }
};

struct WeightW4 {
  static constexpr int kElems = 32;
  static constexpr bool kRowScale = false;  // the group scales apply per chunk
  __device__ static const uint4* row(const GemmArgs& g, int64_t j) {
    return reinterpret_cast<const uint4*>(g.wq.q + j * (g.k / 2));
  }
  template <int R, bool kShared>
  __device__ static void fma(const GemmArgs& g, int64_t j, const uint4& wv, const uint4* x, int64_t n_chunks,
                             int64_t i, float (&acc)[R]) {
    const int64_t n_groups = g.k / g.wq.group_size, grp = j * n_groups + i * 32 / g.wq.group_size;
    const float s = __half2float(static_cast<const __half*>(g.wq.scales)[grp]);
    const float offset = kTwo23 + float(g.wq.zeros[grp]);  // 2^23 + zero: code - zero in one subtraction
    float t[R];
#pragma unroll
    for (int r = 0; r < R; ++r) t[r] = 0.0f;
    const uint32_t words[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {  // word e: elements 8e..8e+7, x chunk 4i + e
      float w[8];
#pragma unroll
      for (int b = 0; b < 8; ++b) w[b] = __uint_as_float(0x4B000000u | ((words[e] >> (4 * b)) & 15u)) - offset;
      fma8<R, kShared>(w, x, n_chunks, 4 * i + e, t);
    }
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] += s * t[r];
  }
  __device__ static float row_scale(const GemmArgs&, int64_t) { return 1.0f; }
};

struct WeightFp8 {
  static constexpr int kElems = 16;
  static constexpr bool kRowScale = true;
  __device__ static const uint4* row(const GemmArgs& g, int64_t j) {
    return reinterpret_cast<const uint4*>(g.wq.q + j * g.k);
  }
  // Two E4M3 bytes (the low one first) as two floats.
  __device__ static float2 two(uint32_t pair) {
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(pair & 0xffffu), __NV_E4M3);
    return __half22float2(__half2(h));
  }
  template <int R, bool kShared>
  __device__ static void fma(const GemmArgs&, int64_t, const uint4& wv, const uint4* x, int64_t n_chunks, int64_t i,
                             float (&acc)[R]) {
    const uint32_t words[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // words 2h, 2h + 1: x chunk 2i + h
      float w[8];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float2 a = two(words[2 * h + e]), b = two(words[2 * h + e] >> 16);
        w[4 * e] = a.x, w[4 * e + 1] = a.y, w[4 * e + 2] = b.x, w[4 * e + 3] = b.y;
      }
      fma8<R, kShared>(w, x, n_chunks, 2 * i + h, acc);
    }
  }
  __device__ static float row_scale(const GemmArgs& g, int64_t j) { return static_cast<const float*>(g.wq.scales)[j]; }
};

}  // namespace

void launch_gemv_w8(const GemmArgs& g, const GemvFusion& f, cudaStream_t stream) { launch_format<WeightW8>(g, f, stream); }
void launch_gemv_w4(const GemmArgs& g, const GemvFusion& f, cudaStream_t stream) { launch_format<WeightW4>(g, f, stream); }
void launch_gemv_fp8(const GemmArgs& g, const GemvFusion& f, cudaStream_t stream) {
  launch_format<WeightFp8>(g, f, stream);
}

}  // namespace tf::cuda::gemv_detail
