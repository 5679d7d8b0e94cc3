// src/quant/kv_fp8: the FP8 (E4M3) KV row quantizer against its definition (scale = max|x| /
// 448, q = e4m3(x / scale)), its error bound, and the edge cases of kv_fp8.h.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "backend/op_test_util.h"
#include "quant/kv_fp8.h"

namespace tf {
namespace {

// Rows of several lengths and magnitudes, some with an outlier: the scale is max|x| / 448 as
// F32 computes it; the largest element maps to +-448 (0x7e / 0xfe); each element's round trip
// error is at most half an E4M3 ulp: 2^-4 of |x| for |x| / scale >= 2^-6, else 2^-10 * scale
// (up to F32 rounding of the division and the product, hence the 1.0001).
TEST(KvFp8, RowsMatchTheDefinitionAndErrorBound) {
  test::Rng rng(99);
  for (int64_t n : {1, 7, 64, 128}) {
    for (double sigma : {1e-3, 1.0, 300.0}) {
      std::vector<float> x = test::randn(rng, n, sigma);
      if (n > 7) x[size_t(n / 2)] *= 30.0f;
      std::vector<uint8_t> q(static_cast<size_t>(n));
      const float scale = quantize_row_kv_fp8(x.data(), n, q.data());
      float amax = 0;
      int64_t at = 0;
      for (int64_t i = 0; i < n; ++i)
        if (std::abs(x[size_t(i)]) > amax) amax = std::abs(x[size_t(i)]), at = i;
      EXPECT_EQ(scale, amax / 448.0f);
      EXPECT_EQ(q[size_t(at)] & 0x7f, 0x7e);
      for (int64_t i = 0; i < n; ++i) {
        const float back = dequantize_kv_fp8(q[size_t(i)], scale);
        const float bound = std::max(std::abs(x[size_t(i)]) * 0.0625f, std::ldexp(scale, -10)) * 1.0001f;
        EXPECT_LE(std::abs(back - x[size_t(i)]), bound) << "n=" << n << " i=" << i;
        EXPECT_EQ(q[size_t(i)], f32_to_e4m3(x[size_t(i)] / scale));
      }
    }
  }
}

TEST(KvFp8, ZeroAndNonFiniteRows) {
  std::vector<float> zero(16, 0.0f);
  std::vector<uint8_t> q(16, 0xaa);
  EXPECT_EQ(quantize_row_kv_fp8(zero.data(), 16, q.data()), 0.0f);
  for (uint8_t v : q) EXPECT_EQ(v, 0);
  for (float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    std::vector<float> x(16, 1.0f);
    x[3] = bad;
    std::fill(q.begin(), q.end(), 0xaa);
    const float scale = quantize_row_kv_fp8(x.data(), 16, q.data());
    EXPECT_TRUE(std::isnan(scale));
    for (uint8_t v : q) EXPECT_EQ(v, 0);
    EXPECT_TRUE(std::isnan(dequantize_kv_fp8(q[0], scale)));
  }
}

}  // namespace
}  // namespace tf
