// Element types of weights, activations and KV storage, and scalar conversions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace tf {

enum class DType : uint8_t { F32, F16, BF16, I8, I32, I64, U8 };

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);
// Parses names as they appear in safetensors headers ("F32", "BF16", ...). Returns false if
// the name is not one we support.
bool dtype_from_safetensors(std::string_view name, DType* out);

// bfloat16 is the top half of an IEEE float32; rounding to nearest even on the way down.
inline float bf16_to_f32(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

// IEEE half precision, via the compiler's _Float16 (exact conversions both ways).
inline float f16_to_f32(uint16_t h) {
  _Float16 x;
  std::memcpy(&x, &h, 2);
  return float(x);
}
inline uint16_t f32_to_f16(float f) {
  _Float16 x = _Float16(f);
  uint16_t h;
  std::memcpy(&h, &x, 2);
  return h;
}

}  // namespace tf
