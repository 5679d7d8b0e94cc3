// Where a model's weights come from: checkpoint names (Hugging Face naming) -> host tensors.
// Validation, loading and `info` read tensors only through this interface. Implementations:
// the safetensors Checkpoint (safetensors.h) and the random weights of `--load-format dummy`
// (dummy_weights.h); open_tensor_source() picks one for a model path.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tf {

// One stored tensor: its bytes in host memory (a file mapping or a buffer of the source),
// valid as long as the source lives.
struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
  std::string file;               // the file it lives in (for messages)

  TensorView view() const;        // host view of the bytes; throws past TensorView::kMaxDims
};

class TensorSource {
 public:
  virtual ~TensorSource() = default;
  // The folder or file the tensors come from (for messages).
  virtual const std::string& origin() const = 0;
  // Every tensor, by name.
  virtual const std::map<std::string, const TensorInfo*>& all() const = 0;

  const TensorInfo* find(const std::string& name) const;  // nullptr if absent
  const TensorInfo& get(const std::string& name) const;   // throws naming the tensor and origin()
};

// Tensors another reader prepared (a GGUF file's, under Hugging Face names: gguf_weights.h).
// Their bytes stay valid while `storage` lives; `origin` names them in errors.
class PreparedTensors final : public TensorSource {
 public:
  PreparedTensors(std::string origin, std::vector<TensorInfo> infos, std::shared_ptr<const void> storage);
  const std::string& origin() const override { return origin_; }
  const std::map<std::string, const TensorInfo*>& all() const override { return index_; }

 private:
  std::string origin_;
  std::shared_ptr<const void> storage_;
  std::map<std::string, TensorInfo> infos_;
  std::map<std::string, const TensorInfo*> index_;
};

// "[8192, 256]", for messages.
std::string shape_str(const std::vector<int64_t>& shape);

// The weights of the model path `dir`: a GGUF file (or a folder holding one and no
// safetensors: gguf_weights.h, its matrices of the block types in keep_gguf_blocks left in
// their blocks), else the folder's safetensors (model.safetensors, or the shards that
// model.safetensors.index.json lists). Throws tf::Error naming the file at fault.
std::unique_ptr<TensorSource> open_tensor_source(const std::string& dir, const std::vector<DType>& keep_gguf_blocks = {});

}  // namespace tf
