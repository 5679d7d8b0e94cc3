#include "quant/kv_fp8.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tf {

float quantize_row_kv_fp8(const float* x, int64_t n, uint8_t* q) {
  float amax = 0;
  bool finite = true;
  for (int64_t i = 0; i < n; ++i) {
    finite &= std::isfinite(x[i]);
    amax = std::max(amax, std::abs(x[i]));
  }
  if (!finite) {
    std::fill_n(q, n, uint8_t{0});
    return std::numeric_limits<float>::quiet_NaN();
  }
  const float scale = amax / kFp8E4m3Max;
  if (scale == 0.0f) {
    std::fill_n(q, n, uint8_t{0});
    return 0.0f;
  }
  for (int64_t i = 0; i < n; ++i) q[i] = f32_to_e4m3(x[i] / scale);
  return scale;
}

}  // namespace tf
