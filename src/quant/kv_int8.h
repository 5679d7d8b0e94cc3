// INT8 KV cache rows: symmetric per-row quantization with one F32 scale per row, where a row
// is the head_dim values of one (token slot, kv head) of K or of V.
//
//   scale = max_i |x[i]| / 127                 (F32 division)
//   q[i]  = clamp(round_half_even(x[i] / scale), -127, 127)
//   x[i] ~ q[i] * scale                        (F32 product)
//
// The rounding error is at most scale / 2 = max|x| / 254 per element (up to F32 rounding).
// -128 is never produced, so the range is symmetric. Edge cases, all of them deterministic:
//  - a row of zeros, or one whose max|x| / 127 underflows to 0 (max|x| < ~9e-44), gets
//    scale 0 and q = 0: it dequantizes to zeros;
//  - when the scale is a denormal, x / scale may exceed 127 (the scale lost precision), and
//    the clamp keeps q in range (the error bound above then does not hold; irrelevant at
//    magnitudes below 1e-36);
//  - a row holding an inf or NaN gets scale NaN and q = 0: it dequantizes to NaN, so a
//    non-finite activation propagates through attention as it would with F32 storage.
//
// The reference backend calls these per row; the CPU backend quantizes with the same
// function and inlines dequantize_kv_int8 into its attention tiles, so both read the same
// F32 values out of the same stored bytes.
#pragma once

#include <cstdint>

namespace tf {

constexpr float kKvInt8Max = 127.0f;  // largest |q|

// Quantizes x[n] into q[n] and returns the row's scale (see the file comment).
float quantize_row_kv_int8(const float* x, int64_t n, int8_t* q);

// The scale of a KV row for a format whose largest code is q_max (127 here, 448 for FP8,
// quant/kv_fp8.h): max|x| / q_max, NaN when the row holds an inf or NaN. A result that is
// not > 0 (zero, NaN) means the row's codes are all 0.
float kv_row_scale(const float* x, int64_t n, float q_max);

// One stored element as F32.
inline float dequantize_kv_int8(int8_t q, float scale) { return float(q) * scale; }

// x[i] = q[i] * scale for n elements (vectorised by the compiler).
inline void dequantize_row_kv_int8(const int8_t* q, float scale, int64_t n, float* x) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) x[i] = dequantize_kv_int8(q[i], scale);
}

}  // namespace tf
