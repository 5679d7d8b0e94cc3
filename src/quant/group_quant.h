// The rounding rules of the weight formats, shared by every quantizer (RTN, AWQ, GPTQ) and by
// dequantization, so that what a quantizer assumes a code means is what the kernels compute.
//
// Parameters of a group of values v (a whole row for W8 and FP8, group_size values along k
// for W4), with amax = max |v|:
//   W8        scale = amax / 127 (F32);  code = clamp(round(v / scale), -127, 127)
//   FP8       scale = amax / 448 (F32);  code = e4m3(v / scale)  (round to nearest even, saturating)
//   W4 asym   lo = min(min v, 0), hi = max(max v, 0); scale = F16((hi - lo) / 15);
//             zero = clamp(round(-lo / scale), 0, 15); code = clamp(round(v / scale) + zero, 0, 15)
//   W4 sym    scale = F16(2 amax / 15), zero = 8 (codes -8..7 around it, as GPTQ and Marlin)
// round() is round-half-even. A group whose scale is 0 (all zeros, or too small for F16)
// gets code 0 (W4: code = zero) and dequantizes to zeros. Callers reject non-finite weights
// first (check_finite).
#pragma once

#include <cstdint>
#include <string_view>

#include "core/dtype.h"
#include "quant/quantized_weight.h"

namespace tf {

struct QuantSpec {
  DType format = DType::W4;  // W8, W4 or FP8
  int32_t group_size = 128;  // W4: elements per group along k, a multiple of 32 that divides k
  bool symmetric = false;    // W4: every zero point 8
};

// tf::Error naming `name` when spec cannot quantize rows of k elements (format not W8/W4/FP8,
// W4 group size not a multiple of 32 or not dividing k).
void check_quant_spec(const QuantSpec& spec, int64_t k, std::string_view name);
// tf::Error naming `name` and the first element that is inf or NaN.
void check_finite(const float* w, int64_t m, int64_t k, std::string_view name);

// The W4 group size for rows of k elements when `requested` does not divide k: the largest
// multiple of 32 not above it that does (576 with 128 asked: 96); `requested` itself when it
// divides k; 0 when no multiple of 32 divides k.
int32_t fitting_group_size(int32_t requested, int64_t k);

// Elements per group of a row of k: group_size for W4, k otherwise.
inline int64_t group_len(const QuantSpec& spec, int64_t k) { return spec.format == DType::W4 ? spec.group_size : k; }

// The min/max rule above over v[n], with the range shrunk by `clip` (0 < clip <= 1; clipping
// search in AWQ), the scale rounded to its stored precision: an infinite scale when it
// overflows F16 (W4 groups spanning more than ~1e6), which callers report.
GroupParams choose_group_params(const QuantSpec& spec, const float* v, int64_t n, float clip = 1.0f);
// choose_group_params, with a tf::Error naming `name`, the row and the group when the scale
// is not finite.
GroupParams checked_group_params(const QuantSpec& spec, const float* v, int64_t n, float clip, std::string_view name,
                                 int64_t row, int64_t group);
uint8_t quantize_value(DType format, float v, GroupParams p);
float dequantize_value(DType format, uint8_t code, GroupParams p);

}  // namespace tf
