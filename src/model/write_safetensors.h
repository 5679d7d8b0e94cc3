// Writing safetensors files (the format safetensors.h reads): an 8-byte little-endian header
// length, the JSON header {name: {dtype, shape, data_offsets}, "__metadata__": {...}} padded
// with spaces to a multiple of 8, then the tensors' bytes in order, each start aligned to 8.
// Written here (about 50 lines) because the format is this small and no Debian package ships
// a C++ writer.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace tf {

struct TensorToWrite {
  std::string name;
  DType dtype = DType::F32;  // F32, F16, BF16, I8, I32, I64, U8, FP8 (written as F8_E4M3)
  std::vector<int64_t> shape;
  const void* data = nullptr;  // nbytes, valid until write_safetensors returns
  size_t nbytes = 0;
};

// Writes `tensors` to `path` (replaced if present). Throws tf::Error naming the path when it
// cannot be written, or the tensor whose byte count does not match its dtype and shape.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

}  // namespace tf
