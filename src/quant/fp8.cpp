#include "quant/fp8.h"

#include <array>
#include <cmath>
#include <limits>

namespace tf {

// Both directions follow the layout in the header. The encoder scales |x| by a power of two
// so that the kept bits are the integer part, rounds that with nearbyint (ties to even in the
// default rounding mode, which nothing here changes; the scaling is exact), and adds the
// exponent: a mantissa that rounds up to 16 carries into the exponent field by itself, and a
// subnormal that rounds up to 8 lands on the smallest normal code, 0x08.
uint8_t f32_to_e4m3(float x) {
  if (std::isnan(x)) return kFp8E4m3Nan;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const float a = std::fabs(x);
  if (a >= kFp8E4m3Max) return uint8_t(sign | 0x7e);  // saturate (448 itself is exact)
  if (a < 0x1p-6f) return uint8_t(sign | uint8_t(std::nearbyint(a * 0x1p9f)));  // subnormal: m = a / 2^-9
  int e2 = 0;
  std::frexp(a, &e2);                                    // a = f * 2^e2, f in [0.5, 1)
  const int e = e2 - 1;                                  // floor(log2 a), in -6..8
  const int q = int(std::nearbyint(std::ldexp(a, 3 - e)));  // 8..16
  return uint8_t(sign | uint8_t(((e + 7) << 3) + (q - 8)));
}

float e4m3_to_f32(uint8_t b) {
  const int e = (b >> 3) & 15, m = b & 7;
  float v;
  if (e == 15 && m == 7)
    v = std::numeric_limits<float>::quiet_NaN();
  else if (e == 0)
    v = std::ldexp(float(m), -9);
  else
    v = std::ldexp(float(8 + m), e - 10);
  return (b & 0x80) ? -v : v;
}

const float* e4m3_table() {
  static const std::array<float, 256> t = [] {
    std::array<float, 256> v{};
    for (int b = 0; b < 256; ++b) v[size_t(b)] = e4m3_to_f32(uint8_t(b));
    return v;
  }();
  return t.data();
}

}  // namespace tf
