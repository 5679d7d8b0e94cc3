#include "quant/group_quant.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "quant/fp8.h"

namespace tf {

void check_quant_spec(const QuantSpec& spec, int64_t k, std::string_view name) {
  if (spec.format != DType::W8 && spec.format != DType::W4 && spec.format != DType::FP8)
    fail("{}: cannot quantize to {} (expected int8, int4 or fp8)", name, dtype_name(spec.format));
  if (spec.format != DType::W4) return;
  if (spec.group_size <= 0 || spec.group_size % 32 != 0)
    fail("{}: int4 group size {} is not a positive multiple of 32", name, spec.group_size);
  if (k % spec.group_size != 0)
    fail("{}: int4 group size {} does not divide the input dimension {}", name, spec.group_size, k);
}

int32_t fitting_group_size(int32_t requested, int64_t k) {
  for (int32_t g = requested / 32 * 32; g >= 32; g -= 32)
    if (k % g == 0) return g;
  return 0;
}

void check_finite(const float* w, int64_t m, int64_t k, std::string_view name) {
  for (int64_t i = 0; i < m * k; ++i)
    if (!std::isfinite(w[i])) fail("{}: element [{}, {}] is {}, which cannot be quantized", name, i / k, i % k, w[i]);
}

GroupParams choose_group_params(const QuantSpec& spec, const float* v, int64_t n, float clip) {
  float lo = 0.0f, hi = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    lo = std::min(lo, v[i]);
    hi = std::max(hi, v[i]);
  }
  lo *= clip;
  hi *= clip;
  const float amax = std::max(-lo, hi);
  GroupParams p;
  switch (spec.format) {
    case DType::W8: p.scale = amax / 127.0f; return p;
    case DType::FP8: p.scale = amax / kFp8E4m3Max; return p;
    case DType::W4: {
      const float raw = spec.symmetric ? 2.0f * amax / 15.0f : (hi - lo) / 15.0f;
      p.scale = f16_to_f32(f32_to_f16(raw));  // inf beyond the F16 range: callers check
      if (spec.symmetric || p.scale == 0.0f || !std::isfinite(p.scale))
        p.zero = 8;
      else
        p.zero = uint8_t(std::clamp(std::nearbyint(-lo / p.scale), 0.0f, 15.0f));
      return p;
    }
    default: TF_ASSERT(false, "choose_group_params: {} is not a weight format", dtype_name(spec.format));
  }
  return p;
}

GroupParams checked_group_params(const QuantSpec& spec, const float* v, int64_t n, float clip, std::string_view name,
                                 int64_t row, int64_t group) {
  const GroupParams p = choose_group_params(spec, v, n, clip);
  if (!std::isfinite(p.scale))
    fail("{}: the scale of row {} group {} is beyond the F16 range of int4 scales (weights too large)", name, row,
         group);
  return p;
}

// nearbyint rounds half to even in the default rounding mode, which nothing here changes.
uint8_t quantize_value(DType format, float v, GroupParams p) {
  switch (format) {
    case DType::W8:
      if (p.scale == 0.0f) return 0;
      return uint8_t(int8_t(std::clamp(std::nearbyint(v / p.scale), -127.0f, 127.0f)));
    case DType::W4:
      if (p.scale == 0.0f) return p.zero;
      return uint8_t(std::clamp(std::nearbyint(v / p.scale) + float(p.zero), 0.0f, 15.0f));
    case DType::FP8: return p.scale == 0.0f ? uint8_t(0) : f32_to_e4m3(v / p.scale);
    default: TF_ASSERT(false, "quantize_value: {} is not a weight format", dtype_name(format));
  }
  return 0;
}

float dequantize_value(DType format, uint8_t code, GroupParams p) {
  switch (format) {
    case DType::W8: return p.scale * float(int8_t(code));
    case DType::W4: return p.scale * float(int(code) - int(p.zero));
    case DType::FP8: return p.scale * e4m3_to_f32(code);
    default: TF_ASSERT(false, "dequantize_value: {} is not a weight format", dtype_name(format));
  }
  return 0;
}

}  // namespace tf
