// FP8 E4M3 ("fn" variant, as CUDA's __nv_fp8_e4m3 and ml_dtypes.float8_e4m3fn): one sign bit,
// four exponent bits with bias 7, three mantissa bits; no infinities; 0x7f and 0xff are NaN;
// the largest finite magnitude is 448 (0x7e), the smallest subnormal 2^-9.
//
//   exponent field e = 0:      value = (-1)^s * m * 2^-9                  (subnormals, zero)
//   exponent field e = 1..15:  value = (-1)^s * (8 + m) * 2^(e - 10)      (e = 15, m = 7: NaN)
//
// Encoding rounds to nearest, ties to even, and saturates: magnitudes beyond 448 (infinities
// included) become +-448, as PTX's cvt.rn.satfinite.e4m3x2.f32 does on the GPU, so a weight
// or KV row scaled by max|x| / 448 never turns into NaN. NaN encodes as 0x7f.
#pragma once

#include <cstdint>

namespace tf {

constexpr float kFp8E4m3Max = 448.0f;
constexpr uint8_t kFp8E4m3Nan = 0x7f;

uint8_t f32_to_e4m3(float x);
float e4m3_to_f32(uint8_t b);
// e4m3_to_f32 of every byte, [256], for inner loops (a load instead of the bit arithmetic).
const float* e4m3_table();

}  // namespace tf
