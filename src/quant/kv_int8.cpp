#include "quant/kv_int8.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tf {

float kv_row_scale(const float* x, int64_t n, float q_max) {
  float amax = 0;
  bool finite = true;
  for (int64_t i = 0; i < n; ++i) {
    finite &= std::isfinite(x[i]);
    amax = std::max(amax, std::abs(x[i]));
  }
  return finite ? amax / q_max : std::numeric_limits<float>::quiet_NaN();
}

float quantize_row_kv_int8(const float* x, int64_t n, int8_t* q) {
  const float scale = kv_row_scale(x, n, kKvInt8Max);
  if (!(scale > 0.0f)) {  // zero row (or underflow), or non-finite (NaN)
    std::fill_n(q, n, int8_t{0});
    return scale;
  }
  // nearbyint rounds half to even in the default rounding mode, which nothing here changes
  for (int64_t i = 0; i < n; ++i)
    q[i] = int8_t(std::clamp(std::nearbyint(x[i] / scale), -kKvInt8Max, kKvInt8Max));
  return scale;
}

}  // namespace tf
