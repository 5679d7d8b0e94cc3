#include "quant/kv_int8.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tf {

float quantize_row_kv_int8(const float* x, int64_t n, int8_t* q) {
  float amax = 0;
  bool finite = true;
  for (int64_t i = 0; i < n; ++i) {
    finite &= std::isfinite(x[i]);
    amax = std::max(amax, std::abs(x[i]));
  }
  if (!finite) {
    std::fill_n(q, n, int8_t{0});
    return std::numeric_limits<float>::quiet_NaN();
  }
  const float scale = amax / kKvInt8Max;
  if (scale == 0.0f) {
    std::fill_n(q, n, int8_t{0});
    return 0.0f;
  }
  // nearbyint rounds half to even in the default rounding mode, which nothing here changes
  for (int64_t i = 0; i < n; ++i)
    q[i] = int8_t(std::clamp(std::nearbyint(x[i] / scale), -kKvInt8Max, kKvInt8Max));
  return scale;
}

}  // namespace tf
