// FP8 KV cache rows: E4M3 (quant/fp8.h) with one F32 scale per row, where a row is the
// head_dim values of one (token slot, kv head) of K or of V, beside the INT8 format of
// quant/kv_int8.h and with the same edge cases:
//
//   scale = max_i |x[i]| / 448                 (F32 division; 448 = E4M3's largest value)
//   q[i]  = e4m3(x[i] / scale)                 (round to nearest even, saturating)
//   x[i] ~ e4m3_value(q[i]) * scale            (F32 product)
//
// E4M3 keeps 3 mantissa bits, so an element's error is at most 2^-4 of its magnitude (half
// an ulp) while it is at least 2^-6 * scale, and at most 2^-10 * scale below that: unlike
// INT8, small elements of a row keep their relative precision. A row of zeros (or whose
// scale underflows) gets scale 0 and q = 0; a row holding an inf or NaN gets scale NaN and
// q = 0, so a non-finite activation propagates through attention as with F32 storage.
#pragma once

#include <cstdint>

#include "quant/fp8.h"

namespace tf {

// Quantizes x[n] into q[n] and returns the row's scale (see the file comment).
float quantize_row_kv_fp8(const float* x, int64_t n, uint8_t* q);

// One stored element as F32.
inline float dequantize_kv_fp8(uint8_t q, float scale) { return e4m3_table()[q] * scale; }

inline void dequantize_row_kv_fp8(const uint8_t* q, float scale, int64_t n, float* x) {
  const float* t = e4m3_table();
  for (int64_t i = 0; i < n; ++i) x[i] = t[q[i]] * scale;
}

}  // namespace tf
