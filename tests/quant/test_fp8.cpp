// src/quant/fp8: the E4M3 codec against ml_dtypes' float8_e4m3fn (fp8_e4m3.json, written by
// make_fp8_table.py), the independent reference: every byte decoded, and encodings of every
// code value, every tie between neighbouring codes (round half to even) and the floats either
// side of it, and random values. Saturation (which ml_dtypes does not do: it gives NaN) is
// checked against the spec: 448 is the largest finite value and everything beyond, infinities
// included, encodes as +-448.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "quant/fp8.h"
#include "test_util.h"

namespace tf {
namespace {

float from_bits(const std::string& hex) {
  const uint32_t u = uint32_t(std::stoul(hex, nullptr, 16));
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

const nlohmann::json& table() {
  static const nlohmann::json t = test::load_json(test::source_path("tests/quant/fp8_e4m3.json"));
  return t;
}

TEST(Fp8E4m3, EveryByteDecodesAsMlDtypes) {
  const auto& decode = table()["decode"];
  ASSERT_EQ(decode.size(), 256u);
  int n_nan = 0;
  for (int b = 0; b < 256; ++b) {
    const std::string want = decode[size_t(b)];
    const float got = e4m3_to_f32(uint8_t(b));
    if (want == "nan") {
      EXPECT_TRUE(std::isnan(got)) << "byte " << b;
      ++n_nan;
    } else {
      EXPECT_EQ(bits_of(got), bits_of(from_bits(want))) << "byte " << b << ": got " << got;  // -0 included
    }
  }
  EXPECT_EQ(n_nan, 2);  // 0x7f and 0xff
  EXPECT_EQ(e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
}

TEST(Fp8E4m3, EncodesAsMlDtypesBelowTheSaturationPoint) {
  const auto& encode = table()["encode"];
  ASSERT_GT(encode.size(), 4000u);
  int n_wrong = 0;
  for (const auto& e : encode) {
    const float x = from_bits(e[0]);
    const int want = e[1];
    const int got = f32_to_e4m3(x);
    if (got != want && ++n_wrong <= 10) ADD_FAILURE() << "x = " << x << ": got 0x" << std::hex << got << " want 0x" << want;
  }
  EXPECT_EQ(n_wrong, 0);
}

TEST(Fp8E4m3, TiesRoundToEven) {
  // 1 = 0x38 and 1.125 = 0x39: their midpoint goes to the even code 0x38; 1.125 / 1.25 -> 0x3a.
  EXPECT_EQ(f32_to_e4m3(1.0625f), 0x38);
  EXPECT_EQ(f32_to_e4m3(1.1875f), 0x3a);
  // subnormals: 2^-9 * 0.5 (tie between 0 and 2^-9) -> 0; 2^-9 * 1.5 -> 2 * 2^-9
  EXPECT_EQ(f32_to_e4m3(std::ldexp(0.5f, -9)), 0x00);
  EXPECT_EQ(f32_to_e4m3(std::ldexp(1.5f, -9)), 0x02);
  // the largest subnormal rounding up into the smallest normal: 7.5 * 2^-9 -> 8 * 2^-9 = 0x08
  EXPECT_EQ(f32_to_e4m3(std::ldexp(7.5f, -9)), 0x08);
  // a mantissa carry into the exponent: 1.9375 (between 1.875 = 0x3f and 2 = 0x40) -> 0x40
  EXPECT_EQ(f32_to_e4m3(1.9375f), 0x40);
}

TEST(Fp8E4m3, SaturatesAndKeepsNan) {
  const float inf = std::numeric_limits<float>::infinity();
  for (float x : {448.0f, 449.0f, 463.99f, 464.0f, 480.0f, 1e6f, 3.4e38f, inf}) {
    EXPECT_EQ(f32_to_e4m3(x), 0x7e) << x;
    EXPECT_EQ(f32_to_e4m3(-x), 0xfe) << -x;
  }
  EXPECT_EQ(f32_to_e4m3(std::numeric_limits<float>::quiet_NaN()), kFp8E4m3Nan);
  EXPECT_EQ(f32_to_e4m3(-std::numeric_limits<float>::quiet_NaN()), kFp8E4m3Nan);
  EXPECT_EQ(f32_to_e4m3(0.0f), 0x00);
  EXPECT_EQ(f32_to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(f32_to_e4m3(1e-30f), 0x00);
}

// Every finite code survives decode then encode.
TEST(Fp8E4m3, EveryFiniteCodeRoundTrips) {
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f) continue;
    EXPECT_EQ(f32_to_e4m3(e4m3_to_f32(uint8_t(b))), b) << "byte " << b;
  }
}

}  // namespace
}  // namespace tf
