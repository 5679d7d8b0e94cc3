// Writes safetensors files for tests: well-formed ones, and raw bytes for malformed ones.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace tf::test {

struct RawTensor {
  std::string name;
  std::string dtype;  // as written in the header: "F32", "BF16", ...
  std::vector<int64_t> shape;
  std::string bytes;
};

inline std::string u64_le(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = char((n >> (8 * i)) & 0xff);
  return s;
}

// Writes [N][header][data] exactly as given (no padding, no checks): for malformed files.
inline void write_raw(const std::filesystem::path& p, const std::string& header, const std::string& data = "") {
  std::ofstream out(p, std::ios::binary);
  out << u64_le(header.size()) << header << data;
}

// Writes a well-formed file: tensors laid out in order, each start aligned to 8 bytes, the
// header padded with spaces to a multiple of 8 (as the reference writer does).
inline void write_safetensors(const std::filesystem::path& p, const std::vector<RawTensor>& tensors) {
  nlohmann::json h = nlohmann::json::object();
  h["__metadata__"] = {{"format", "pt"}};
  std::string data;
  for (const RawTensor& t : tensors) {
    while (data.size() % 8) data.push_back('\0');
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data += t.bytes;
  }
  std::string header = h.dump();
  while (header.size() % 8) header.push_back(' ');
  write_raw(p, header, data);
}

}  // namespace tf::test
