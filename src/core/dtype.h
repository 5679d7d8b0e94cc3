// Element types of weights, activations and KV storage, and scalar conversions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace tf {

enum class DType : uint8_t {
  F32, F16, BF16, I8, I32, I64, U8,
  // Quantized weights of logical shape [m, k]; src/quant/formats.h defines each layout.
  W8,   // int8, one F32 scale per row (TensorView::scales)
  W4,   // uint4 pairs, an F16 scale and a U8 zero per group of TensorView::group_size along k
  FP8,  // E4M3 bytes, one F32 scale per row
  Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K,  // GGUF blocks, scales inside the blocks
};

// Bytes per element of a dense dtype and of W8/FP8; 0 for the packed ones (W4, GGUF blocks),
// whose size only a row has (dtype_row_bytes).
size_t dtype_size(DType t);
bool dtype_is_quantized(DType t);
// Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K: ggml's blocks, each holding its own scales.
bool dtype_is_gguf_block(DType t);
// Elements per block along a row: 1 for dense dtypes, W8, FP8; 2 for W4; 32 or 256 for GGUF.
int64_t dtype_block_elems(DType t);
// Bytes of one row of k elements (k a multiple of dtype_block_elems), the packed values only:
// the scale and zero arrays of W8/W4/FP8 are apart.
size_t dtype_row_bytes(DType t, int64_t k);
std::string_view dtype_name(DType t);
// Parses names as they appear in safetensors headers ("F32", "BF16", ...; "F8_E4M3" is
// DType::FP8, the values of an fp8 weight without its scales). Returns false if the name is
// not one we support.
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

// IEEE half precision in plain integer and float arithmetic, rounding to nearest even: what
// the compiler's _Float16 does, for compilers that lack it on this target (clang 14 has
// _Float16 on x86 only with AVX512-FP16). tests/core/test_dtype.cpp checks the two agree on
// every half and a sweep of floats.
namespace detail {
// Integer ops and one multiply, so a loop of it vectorises (load_row_f32 relies on that): the
// exponent and mantissa bits shifted into a float's place read as 2^-112 times the half's
// value (subnormals included), so a multiply by 2^112 is exact; infinity and NaN (exponent 31)
// map to exponent 255, NaNs quieted as the hardware does.
inline float f16_to_f32_soft(uint16_t h) {
  const uint32_t sign = (uint32_t(h) & 0x8000u) << 16, em = uint32_t(h) & 0x7fffu;
  const uint32_t shifted = em << 13;
  float f;
  std::memcpy(&f, &shifted, 4);
  f *= 0x1p112f;
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (em >= 0x7c00u) u = shifted | 0x7f800000u | (em > 0x7c00u ? 0x00400000u : 0u);
  u |= sign;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t f32_to_f16_soft(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const auto sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u | uint16_t((a >> 13) & 0x1ffu);  // NaN stays a quiet NaN
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to infinity
  if (a >= 0x38800000u) {                       // a normal half (>= 2^-14)
    uint32_t r = a - 0x38000000u;               // rebias 127 -> 15
    r += 0xfffu + ((r >> 13) & 1u);             // round to nearest even at bit 13
    return sign | uint16_t(r >> 13);
  }
  float mag;
  std::memcpy(&mag, &a, 4);
  // A subnormal half counts units of 2^-24; the scaling is exact, the rounding nearest even
  // (1024 units is the smallest normal half, which the same bit pattern encodes).
  return sign | uint16_t(__builtin_nearbyintf(mag * 0x1p24f));
}
}  // namespace detail

#if defined(__FLT16_MANT_DIG__)
// The compiler's _Float16 (exact conversions both ways).
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
#else
inline float f16_to_f32(uint16_t h) { return detail::f16_to_f32_soft(h); }
inline uint16_t f32_to_f16(float f) { return detail::f32_to_f16_soft(f); }
#endif

}  // namespace tf
