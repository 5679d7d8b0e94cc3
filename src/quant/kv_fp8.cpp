#include "quant/kv_fp8.h"

#include <algorithm>

#include "quant/kv_int8.h"

namespace tf {

float quantize_row_kv_fp8(const float* x, int64_t n, uint8_t* q) {
  const float scale = kv_row_scale(x, n, kFp8E4m3Max);
  if (!(scale > 0.0f)) {  // zero row (or underflow), or non-finite (NaN)
    std::fill_n(q, n, uint8_t{0});
    return scale;
  }
  for (int64_t i = 0; i < n; ++i) q[i] = f32_to_e4m3(x[i] / scale);
  return scale;
}

}  // namespace tf
