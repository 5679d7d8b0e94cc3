// Quantized weight matrices in the layouts of quant/formats.h: an owning container
// (QuantizedWeight), the checks a loader runs on stored parts (make_quantized_view),
// dequantization of rows (the reference every kernel is tested against), W4 nibble packing,
// and the exact repacking of GGUF Q4_0 into W4.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace tf {

// "int8" -> W8, "int4" -> W4, "fp8" -> FP8 (the names of `--quantization` / `--format`);
// tf::Error naming `what` and the value otherwise.
DType parse_quant_format(std::string_view name, std::string_view what);
// The inverse: "int8", "int4", "fp8".
std::string_view quant_format_name(DType format);

// Scale and zero point of one group of one row (W8/FP8: the row is one group, zero unused).
struct GroupParams {
  float scale = 0.0f;
  uint8_t zero = 0;
};

// A W8, W4 or FP8 matrix [m, k] that owns its bytes.
//   data   W8: int8 [m, k]; W4: uint8 [m, k / 2] (two codes per byte); FP8: E4M3 bytes [m, k]
//   scales W8/FP8: F32 [m]; W4: F16 [m, k / group_size]
//   zeros  W4: U8 [m, k / group_size]; empty otherwise
struct QuantizedWeight {
  DType dtype = DType::W8;
  int64_t m = 0, k = 0;
  int32_t group_size = 0;  // W4 only
  std::vector<uint8_t> data, scales, zeros;

  // All codes 0 and every scale 0 (a zero matrix), sized for the format; W4 needs a group
  // size that divides k (TF_ASSERT: callers validate user input first).
  static QuantizedWeight zeros_like(DType dtype, int64_t m, int64_t k, int32_t group_size = 0);

  int64_t n_groups() const { return dtype == DType::W4 ? k / group_size : 1; }
  int64_t group_len() const { return dtype == DType::W4 ? group_size : k; }
  // The stored code of element (i, j): W8 the int8's bits, W4 0..15, FP8 the E4M3 byte.
  uint8_t code(int64_t i, int64_t j) const;
  void set_code(int64_t i, int64_t j, uint8_t c);
  GroupParams params(int64_t i, int64_t group) const;
  // Stores p (W4: the scale rounded to F16, as the layout keeps it).
  void set_params(int64_t i, int64_t group, GroupParams p);
  // A view of the bytes (dtype, shape [m, k], scales, zeros, group_size), valid while this lives.
  TensorView view() const;
};

// The parts of a quantized tensor as a checkpoint stores them, for make_quantized_view.
struct QuantizedParts {
  std::string_view name;  // the tensor's name, for errors
  DType format = DType::W8;
  int64_t m = 0, k = 0;    // logical shape [out_features, in_features]
  int32_t group_size = 0;  // W4
  TensorView data, scales, zeros;  // dtype and shape as stored; zeros only for W4
};

// The TensorView a backend's upload() takes, after checking every part against the layout:
// the data's dtype and packed size, the scales' dtype and shape [m] or [m, k / G], the zeros
// of W4, a group size that is a multiple of 32 and divides k. tf::Error naming the tensor and
// the part at fault otherwise. Views the parts' memory (nothing is copied).
TensorView make_quantized_view(const QuantizedParts& parts);

// Row `row` of a quantized matrix as F32 (k = w.shape[1] values):
//   W8:  scale[i] * q            W4: scale[i, g] * (q - zero[i, g])     FP8: scale[i] * e4m3(q)
//   Q8_0: d * q per block of 32  Q4_0: d * (q - 8) per block of 32 (ggml's layouts)
// each one F32 product of the stored scale widened to F32; Q4_1, Q4_K, Q5_K, Q6_K as
// gguf_dequant.h computes them. Other dtypes: TF_ASSERT.
void dequantize_row(const TensorView& w, int64_t row, float* out);
// The whole matrix [m, k] as F32.
std::vector<float> dequantize(const TensorView& w);

// W4 nibbles: codes[n] (0..15, n even) <-> packed[n / 2], element j in the low nibble of byte
// j / 2 when j is even, in the high nibble when odd.
void pack_w4(const uint8_t* codes, int64_t n, uint8_t* packed);
void unpack_w4(const uint8_t* packed, int64_t n, uint8_t* codes);

// A GGUF Q4_0 matrix [m, k] (host) as W4 with group size 32, zero 8 and its blocks' F16
// scales: the same values exactly (ggml keeps element j of a block in the low nibble of byte
// j and element j + 16 in the high nibble; W4 keeps neighbours together).
QuantizedWeight repack_q4_0_to_w4(const TensorView& q4_0);

}  // namespace tf
