// src/quant/kv_int8: the reference INT8 KV row quantizer, checked against its definition
// (scale = max|x| / 127, q = round-half-even(x / scale) clamped to [-127, 127]) and its
// error bound, with the edge cases spelled out in kv_int8.h.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "backend/op_test_util.h"
#include "quant/kv_int8.h"

namespace tf {
namespace {

using test::Rng;

std::vector<float> dequantize(const std::vector<int8_t>& q, float scale) {
  std::vector<float> x(q.size());
  dequantize_row_kv_int8(q.data(), scale, int64_t(q.size()), x.data());
  return x;
}

// Random rows of several lengths and magnitudes (Gaussian, with an outlier in some rows, as
// real K rows have): the scale is max|x| / 127 exactly as F32 computes it, every q is in
// [-127, 127], the largest element maps to +-127, and the round trip error of each element is
// at most max|x| / 254. The bound holds up to F32 rounding: x / scale carries a relative
// error of ~2^-23 (two roundings), i.e. ~127 * 2^-23 ~ 1.5e-5 in units of q, and q * scale one
// more rounding; 1e-5 of the bound covers both.
TEST(OpsKvInt8, RoundTripWithinHalfAStep) {
  Rng rng(5);
  int64_t n_rows = 0;
  double worst = 0;  // largest error / (max|x| / 254)
  for (int64_t n : {1, 7, 32, 64, 128, 256}) {
    for (double magnitude : {1e-30, 1e-3, 1.0, 37.0, 1e30}) {
      for (int rep = 0; rep < 20; ++rep) {
        std::vector<float> x = test::randn(rng, n, magnitude);
        if (rep % 4 == 0) x[size_t(rng.uniform_int(0, n - 1))] *= 20.0f;  // an outlier
        std::vector<int8_t> q(static_cast<size_t>(n));
        const float scale = quantize_row_kv_int8(x.data(), n, q.data());
        float amax = 0;
        for (float v : x) amax = std::max(amax, std::abs(v));
        ASSERT_EQ(scale, amax / 127.0f) << "n=" << n << " magnitude=" << magnitude;
        const std::vector<float> y = dequantize(q, scale);
        bool has_full_scale = false;
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_GE(q[size_t(i)], -127);
          ASSERT_LE(q[size_t(i)], 127);
          has_full_scale |= std::abs(q[size_t(i)]) == 127;
          // this element's rounding, by the definition
          ASSERT_EQ(q[size_t(i)], int8_t(std::nearbyint(x[size_t(i)] / scale))) << "element " << i;
          const double err = std::abs(double(y[size_t(i)]) - double(x[size_t(i)]));
          worst = std::max(worst, err / (double(amax) / 254.0));
          ASSERT_LE(err, double(amax) / 254.0 * (1 + 1e-5))
              << "n=" << n << " magnitude=" << magnitude << " element " << i << ": " << x[size_t(i)]
              << " -> " << int(q[size_t(i)]) << " * " << scale;
        }
        EXPECT_TRUE(has_full_scale) << "the largest element must map to +-127";
        ++n_rows;
      }
    }
  }
  std::printf("%lld rows: worst error %.6f of max|x| / 254\n", (long long)n_rows, worst);
}

// Ties go to even (round-half-even, the default IEEE mode): x / scale lands exactly on k + 0.5
// for these rows, since scale = 127 / 127 = 1.
TEST(OpsKvInt8, TiesRoundToEven) {
  const std::vector<float> x = {127.0f, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 126.5f, -126.5f, 3.49f};
  std::vector<int8_t> q(x.size());
  ASSERT_EQ(quantize_row_kv_int8(x.data(), int64_t(x.size()), q.data()), 1.0f);
  const std::vector<int8_t> want = {127, 0, 2, 2, 0, -2, -2, 126, -126, 3};
  EXPECT_EQ(q, want);
}

// All-zero rows, and rows so small that max|x| / 127 underflows to 0, give scale 0 and q = 0,
// so they dequantize to exact zeros (not NaN from 0 / 0).
TEST(OpsKvInt8, ZeroRows) {
  for (float v : {0.0f, -0.0f, 1e-45f, 60 * 1e-45f}) {
    const std::vector<float> x = {v, -v, 0.0f, v};
    std::vector<int8_t> q(x.size(), 99);
    const float scale = quantize_row_kv_int8(x.data(), int64_t(x.size()), q.data());
    EXPECT_EQ(scale, 0.0f) << "value " << v;
    EXPECT_EQ(q, std::vector<int8_t>(x.size(), 0)) << "value " << v;
    for (float y : dequantize(q, scale)) EXPECT_EQ(y, 0.0f);
  }
}

// Clamping: with a denormal scale, max|x| / 127 rounds to a coarse denormal and x / scale can
// exceed 127 (here max|x| = 190 * 2^-149: the scale rounds from 1.496 to 1 * 2^-149, so the
// largest element would be 190); q is clamped to +-127 and never -128.
TEST(OpsKvInt8, ClampsToPlusMinus127) {
  const float unit = std::numeric_limits<float>::denorm_min();  // 2^-149
  const std::vector<float> x = {190 * unit, -190 * unit, 100 * unit, -128 * unit, 5 * unit};
  std::vector<int8_t> q(x.size());
  const float scale = quantize_row_kv_int8(x.data(), int64_t(x.size()), q.data());
  ASSERT_EQ(scale, unit);
  const std::vector<int8_t> want = {127, -127, 100, -127, 5};
  EXPECT_EQ(q, want);
}

// A row with an inf or a NaN: scale NaN and q = 0, so it reads back as NaN (as an F32 cache
// would propagate it) instead of silently becoming finite or overflowing the int8 conversion.
TEST(OpsKvInt8, NonFiniteRowsReadBackAsNaN) {
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    const std::vector<float> x = {1.0f, bad, -2.0f};
    std::vector<int8_t> q(x.size(), 99);
    const float scale = quantize_row_kv_int8(x.data(), int64_t(x.size()), q.data());
    EXPECT_TRUE(std::isnan(scale)) << bad;
    EXPECT_EQ(q, std::vector<int8_t>(x.size(), 0)) << bad;
    for (float y : dequantize(q, scale)) EXPECT_TRUE(std::isnan(y));
  }
}

// The scalar and row dequantizers agree (the CPU backend uses the row form, the reference the
// scalar one).
TEST(OpsKvInt8, RowAndElementDequantizeAgree) {
  std::vector<int8_t> q(255);
  for (int i = 0; i < 255; ++i) q[size_t(i)] = int8_t(i - 127);
  const float scale = 0.0123f;
  const std::vector<float> row = dequantize(q, scale);
  for (size_t i = 0; i < q.size(); ++i) EXPECT_EQ(row[i], dequantize_kv_int8(q[i], scale));
}

}  // namespace
}  // namespace tf
