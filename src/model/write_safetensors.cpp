#include "model/write_safetensors.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>

#include "core/error.h"
#include "model/tensor_source.h"

namespace tf {

namespace {

std::string_view safetensors_dtype(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::I8: return "I8";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::U8: return "U8";
    case DType::FP8: return "F8_E4M3";
    default: break;
  }
  TF_ASSERT(false, "{} has no safetensors name", dtype_name(t));
  return "";
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
