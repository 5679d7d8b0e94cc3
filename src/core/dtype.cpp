#include "core/dtype.h"

#include "core/error.h"

namespace tf {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::I8: return 1;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::U8: return 1;
    case DType::W8: return 1;
    case DType::FP8: return 1;
    default: return 0;
  }
}

bool dtype_is_quantized(DType t) { return t >= DType::W8; }
bool dtype_is_gguf_block(DType t) { return t >= DType::Q8_0; }

namespace {
struct Block { int64_t elems; size_t bytes; };
// ggml's block sizes: Q8_0 = f16 d + 32 int8; Q4_0 = f16 d + 16 bytes; Q4_1 = f16 d, m +
// 16 bytes; the K-quants are super-blocks of 256.
Block block_of(DType t) {
  switch (t) {
    case DType::W4: return {2, 1};
    case DType::Q8_0: return {32, 34};
    case DType::Q4_0: return {32, 18};
    case DType::Q4_1: return {32, 20};
    case DType::Q4_K: return {256, 144};
    case DType::Q5_K: return {256, 176};
    case DType::Q6_K: return {256, 210};
    default: return {1, dtype_size(t)};
  }
}
}  // namespace

int64_t dtype_block_elems(DType t) { return block_of(t).elems; }

size_t dtype_row_bytes(DType t, int64_t k) {
  const Block b = block_of(t);
  TF_ASSERT(k % b.elems == 0, "{} rows hold whole blocks of {} elements, not {}", dtype_name(t), b.elems, k);
  return size_t(k / b.elems) * b.bytes;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::I8: return "I8";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::U8: return "U8";
    case DType::W8: return "W8";
    case DType::W4: return "W4";
    case DType::FP8: return "FP8";
    case DType::Q8_0: return "Q8_0";
    case DType::Q4_0: return "Q4_0";
    case DType::Q4_1: return "Q4_1";
    case DType::Q4_K: return "Q4_K";
    case DType::Q5_K: return "Q5_K";
    case DType::Q6_K: return "Q6_K";
  }
  return "?";
}

bool dtype_from_safetensors(std::string_view name, DType* out) {
  struct Entry { std::string_view name; DType t; };
  static constexpr Entry kTable[] = {{"F32", DType::F32}, {"F16", DType::F16}, {"BF16", DType::BF16},
                                     {"I8", DType::I8},   {"I32", DType::I32}, {"I64", DType::I64},
                                     {"U8", DType::U8},   {"F8_E4M3", DType::FP8}};
  for (const auto& e : kTable) {
    if (e.name == name) { *out = e.t; return true; }
  }
  return false;
}

}  // namespace tf
