// The portable half-precision conversions (used where the compiler has no _Float16) against
// the compiler's _Float16 where it has one (gcc on x86-64).
#include "core/dtype.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>

namespace tf {
namespace {

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }
float from_bits(uint32_t u) { return std::bit_cast<float>(u); }

TEST(HalfSoft, KnownValues) {
  EXPECT_EQ(detail::f32_to_f16_soft(1.0f), 0x3c00);
  EXPECT_EQ(detail::f32_to_f16_soft(-2.0f), 0xc000);
  EXPECT_EQ(detail::f32_to_f16_soft(65504.0f), 0x7bff);
  EXPECT_EQ(detail::f32_to_f16_soft(65520.0f), 0x7c00);          // halfway past the largest: infinity
  EXPECT_EQ(detail::f32_to_f16_soft(65519.99f), 0x7bff);
  EXPECT_EQ(detail::f32_to_f16_soft(0x1p-24f), 0x0001);          // smallest subnormal
  EXPECT_EQ(detail::f32_to_f16_soft(0x1p-25f), 0x0000);          // halfway to it: even, zero
  EXPECT_EQ(detail::f32_to_f16_soft(0x1.8p-25f), 0x0001);
  EXPECT_EQ(detail::f32_to_f16_soft(0x1.ffcp-15f), 0x0400);      // rounds up to the smallest normal
  EXPECT_EQ(detail::f32_to_f16_soft(-0.0f), 0x8000);
  EXPECT_EQ(detail::f32_to_f16_soft(INFINITY), 0x7c00);
  EXPECT_EQ(detail::f32_to_f16_soft(NAN) & 0x7e00, 0x7e00);
  EXPECT_EQ(detail::f16_to_f32_soft(0x3555), 0.333251953125f);
  EXPECT_EQ(detail::f16_to_f32_soft(0x0001), 0x1p-24f);
  EXPECT_EQ(detail::f16_to_f32_soft(0xfc00), -INFINITY);
  EXPECT_TRUE(std::isnan(detail::f16_to_f32_soft(0x7e01)));
}

#if defined(__FLT16_MANT_DIG__)
TEST(HalfSoft, EveryHalfConvertsAsFloat16Does) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float soft = detail::f16_to_f32_soft(uint16_t(h));
    _Float16 x;
    const auto h16 = uint16_t(h);
    std::memcpy(&x, &h16, 2);
    const float hard = float(x);
    ASSERT_EQ(bits(soft), bits(hard)) << std::hex << h;  // NaN payloads and quieting included
  }
}

TEST(HalfSoft, FloatsRoundAsFloat16Does) {
  // Every 997th float bit pattern (a prime stride reaches every exponent and rounding case) plus the
  // neighbourhood of every half's value and of every halfway point between two halves.
  auto check = [](float f) {
    const uint16_t soft = detail::f32_to_f16_soft(f);
    const _Float16 x = _Float16(f);
    uint16_t hard;
    std::memcpy(&hard, &x, 2);
    ASSERT_EQ(soft, hard) << std::hexfloat << f << " bits " << std::hex << bits(f);
  };
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 997) check(from_bits(uint32_t(u)));
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const uint32_t b = bits(detail::f16_to_f32_soft(uint16_t(h)));
    const uint32_t next = bits(detail::f16_to_f32_soft(uint16_t(h + 1)));
    const uint32_t mid = b + (next - b) / 2;
    for (uint32_t d : {b, mid}) {
      for (int k = -2; k <= 2; ++k) {
        check(from_bits(d + uint32_t(k)));
        check(from_bits((d + uint32_t(k)) | 0x80000000u));
      }
    }
  }
}
#endif

}  // namespace
}  // namespace tf
