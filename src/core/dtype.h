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
