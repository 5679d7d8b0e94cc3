// GGUF, llama.cpp's one-file model format (versions 2 and 3; little-endian), read from a
// memory-mapped file and validated before anything points into it.
//
//   "GGUF" | u32 version | u64 n_tensors | u64 n_kv
//   n_kv      x  key (string) | u32 value type | value
//   n_tensors x  name (string) | u32 n_dims | n_dims x u64 ne | u32 ggml type | u64 offset
//   zero padding up to a multiple of general.alignment (default 32)
//   data section: tensor data at `offset` from its start, each offset a multiple of the alignment
// A string is a u64 byte count and the bytes; an array is a u32 element type, a u64 count and
// the elements. ggml writes dimensions innermost first (ne[0] is the row length), so a
// Hugging Face [rows, cols] matrix is ne = {cols, rows}.
//
// Every length and count is checked against the bytes that are left before anything is
// allocated for it, so a hostile file costs at most memory proportional to its own size; every
// violation (truncation, bad type, duplicate key or tensor, bad alignment, data outside the
// file, overlapping tensors, sizes that overflow) is a tf::Error naming the file and the key or
// tensor at fault.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/mapped_file.h"

namespace tf {

enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, Bool = 7, String = 8, Array = 9,
  U64 = 10, I64 = 11, F64 = 12,
};
std::string_view gguf_type_name(GgufType t);

// One metadata value. Scalars and fixed-size array elements stay in the file (little-endian,
// possibly unaligned: read them through the accessors of GgufFile).
struct GgufValue {
  GgufType type = GgufType::U8;
  GgufType elem_type = GgufType::U8;       // arrays: the element type (never Array)
  uint64_t count = 1;                      // arrays: the element count; scalars: 1
  const uint8_t* bytes = nullptr;          // scalar bytes, or the first element of a fixed-size array
  std::string_view str;                    // String
  std::vector<std::string_view> strings;   // Array of String
};

// ggml's tensor types: block length in elements and bytes per block (facts of the format).
struct GgmlTypeInfo {
  uint32_t id;
  std::string_view name;
  int64_t block_elems;
  int64_t block_bytes;
};
const GgmlTypeInfo* ggml_type_info(uint32_t id);  // nullptr for an id ggml does not define
// The twofold dtype of a ggml type that can be loaded (F32, F16, BF16, Q8_0, Q4_0, Q4_1,
// Q4_K, Q5_K, Q6_K), or nullopt.
std::optional<DType> dtype_of_ggml(uint32_t id);

struct GgufTensor {
  std::string name;
  uint32_t ggml_type = 0;
  int n_dims = 0;
  std::array<int64_t, 4> ne{};  // ggml order: ne[0] innermost; unused dims are 1
  uint64_t offset = 0;          // from the start of the file
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;

  // Row-major shape, slowest dimension first (the Hugging Face order): ne reversed.
  std::vector<int64_t> shape() const;
  int64_t numel() const;
  std::string_view type_name() const;
};

class GgufFile {
 public:
  // Maps and validates `path`. Throws tf::Error naming the file and the field at fault.
  explicit GgufFile(const std::string& path);
  // Validates `bytes` (which must outlive this object); `origin` names them in errors.
  GgufFile(std::span<const uint8_t> bytes, std::string origin);
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // start of the data section
  size_t size() const { return size_; }

  // Metadata, in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const GgufValue* find(std::string_view key) const;  // nullptr if absent
  bool has(std::string_view key) const { return find(key) != nullptr; }

  // Typed access; each throws tf::Error naming the file and key when the key is absent (the
  // get_ forms) or holds another type. Integers of any width and signedness are accepted where
  // the value fits.
  std::string_view get_string(std::string_view key) const;
  std::optional<std::string_view> opt_string(std::string_view key) const;
  uint64_t get_uint(std::string_view key) const;
  std::optional<uint64_t> opt_uint(std::string_view key) const;
  double get_float(std::string_view key) const;  // F32 or F64
  std::optional<double> opt_float(std::string_view key) const;
  std::optional<bool> opt_bool(std::string_view key) const;
  // Arrays: strings, or numbers converted to the element type asked for (exactly, else an error).
  std::span<const std::string_view> get_strings(std::string_view key) const;
  std::vector<float> get_floats(std::string_view key) const;
  std::vector<int64_t> get_ints(std::string_view key) const;

  // Tensors, in file order.
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* find_tensor(std::string_view name) const;  // nullptr if absent

  template <typename... Args>
  [[noreturn]] void fail_key(std::string_view key, fmt::format_string<Args...> f, Args&&... args) const;

 private:
  void parse();

  std::unique_ptr<MappedFile> file_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  std::string path_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

template <typename... Args>
void GgufFile::fail_key(std::string_view key, fmt::format_string<Args...> f, Args&&... args) const {
  tf::fail("{}: metadata '{}': {}", path_, key, fmt::format(f, std::forward<Args>(args)...));
}

// The GGUF model file that a `-m PATH` argument names: PATH itself when it is a file; for a
// folder holding no *.safetensors, its one *.gguf file (an error naming the folder when it
// holds several); nullopt for anything else (a Hugging Face folder, or a path that does not
// exist, left to the caller's error).
std::optional<std::string> find_gguf_model(const std::string& path);

}  // namespace tf
