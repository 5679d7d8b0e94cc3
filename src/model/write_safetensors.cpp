#include "model/write_safetensors.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>

#include "core/error.h"
#include "model/tensor_source.h"

namespace tf {

namespace {

// The header name: dtype_name's, except FP8's values, which safetensors calls F8_E4M3; checked
// against the reader's table (dtype_from_safetensors).
std::string_view safetensors_dtype(DType t) {
  const std::string_view name = t == DType::FP8 ? "F8_E4M3" : dtype_name(t);
  DType back = DType::F32;
  TF_ASSERT(dtype_from_safetensors(name, &back) && back == t, "{} has no safetensors name", dtype_name(t));
  return name;
}

}  // namespace

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::json h = nlohmann::json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  size_t at = 0;
  std::vector<size_t> starts;
  for (const TensorToWrite& t : tensors) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    if (size_t(n) * dtype_size(t.dtype) != t.nbytes)
      fail("{}: tensor '{}' has {} bytes, but {} of {} take {}", path, t.name, t.nbytes, shape_str(t.shape),
           safetensors_dtype(t.dtype), size_t(n) * dtype_size(t.dtype));
    at = (at + 7) / 8 * 8;
    starts.push_back(at);
    h[t.name] = {{"dtype", safetensors_dtype(t.dtype)}, {"shape", t.shape}, {"data_offsets", {at, at + t.nbytes}}};
    at += t.nbytes;
  }
  std::string header = h.dump();
  while (header.size() % 8) header.push_back(' ');
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!f) fail("{}: cannot open for writing", path);
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t((uint64_t(header.size()) >> (8 * i)) & 0xff);
  bool ok = std::fwrite(len, 1, 8, f.get()) == 8 && std::fwrite(header.data(), 1, header.size(), f.get()) == header.size();
  size_t written = 0;
  static const char kZeros[8] = {};
  for (size_t i = 0; i < tensors.size() && ok; ++i) {
    ok = std::fwrite(kZeros, 1, starts[i] - written, f.get()) == starts[i] - written;
    ok = ok && std::fwrite(tensors[i].data, 1, tensors[i].nbytes, f.get()) == tensors[i].nbytes;
    written = starts[i] + tensors[i].nbytes;
  }
  if (!ok || std::fflush(f.get()) != 0) fail("{}: write failed (disk full?)", path);
}

}  // namespace tf
