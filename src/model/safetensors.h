// safetensors checkpoints: one file or shards listed by model.safetensors.index.json.
// Files are memory-mapped and validated before any tensor is used: header JSON, dtypes,
// shapes, offsets inside the data section, no overlapping tensors. Any failure is a
// tf::Error that names the file (and the tensor, where one is at fault).
#pragma once

#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "model/tensor_source.h"

namespace tf {

// The tensors and metadata a safetensors file's header lists, validated against its bytes.
struct SafetensorsHeader {
  std::map<std::string, TensorInfo> tensors;  // data points into the bytes parsed
  std::map<std::string, std::string> metadata;
};
// Validates `bytes` (a whole safetensors file) and lists its tensors. Throws tf::Error naming
// `path` (and the tensor at fault).
SafetensorsHeader parse_safetensors(std::span<const uint8_t> bytes, const std::string& path);

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);  // maps and validates
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::string& path() const { return file_->path(); }
  // The header's optional "__metadata__" string map (e.g. {"format": "pt"}).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::unique_ptr<MappedFile> file_;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of a model folder, from model.safetensors or the shards named in
// model.safetensors.index.json.
class Checkpoint final : public TensorSource {
 public:
  static Checkpoint open(const std::string& dir);

  const std::string& origin() const override { return dir_; }
  const std::map<std::string, const TensorInfo*>& all() const override { return index_; }

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorInfo*> index_;
};

}  // namespace tf
