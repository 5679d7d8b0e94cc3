#include "core/dtype.h"

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
  }
  return 0;
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
  }
  return "?";
}

bool dtype_from_safetensors(std::string_view name, DType* out) {
  struct Entry { std::string_view name; DType t; };
  static constexpr Entry kTable[] = {{"F32", DType::F32}, {"F16", DType::F16}, {"BF16", DType::BF16},
                                     {"I8", DType::I8},   {"I32", DType::I32}, {"I64", DType::I64},
                                     {"U8", DType::U8}};
  for (const auto& e : kTable) {
    if (e.name == name) { *out = e.t; return true; }
  }
  return false;
}

}  // namespace tf
