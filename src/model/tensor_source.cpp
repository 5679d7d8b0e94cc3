#include "model/tensor_source.h"

#include "core/error.h"
#include "model/gguf/gguf_file.h"
#include "model/gguf_weights.h"
#include "model/safetensors.h"

namespace tf {

TensorView TensorInfo::view() const {
  if (shape.size() > size_t(TensorView::kMaxDims))
    fail("{}: tensor '{}' has {} dimensions; at most {} are supported", file, name, shape.size(),
         TensorView::kMaxDims);
  TensorView v;
  v.data = const_cast<uint8_t*>(data);  // TensorView is not const-typed; mapped pages are read-only
  v.dtype = dtype;
  v.device = Device::Host;
  for (int64_t s : shape) v.shape[v.n_dims++] = s;
  TF_ASSERT(v.nbytes() == nbytes, "{}", name);
  return v;
}

const TensorInfo* TensorSource::find(const std::string& name) const {
  const auto& index = all();
  auto it = index.find(name);
  return it == index.end() ? nullptr : it->second;
}

const TensorInfo& TensorSource::get(const std::string& name) const {
  const TensorInfo* t = find(name);
  if (!t) fail("{}: tensor '{}' is not in the checkpoint", origin(), name);
  return *t;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

PreparedTensors::PreparedTensors(std::string origin, std::vector<TensorInfo> infos,
                                 std::shared_ptr<const void> storage)
    : origin_(std::move(origin)), storage_(std::move(storage)) {
  for (TensorInfo& t : infos) {
    const std::string name = t.name;
    if (!infos_.emplace(name, std::move(t)).second) fail("{}: tensor '{}' appears twice", origin_, name);
  }
  for (const auto& [name, info] : infos_) index_[name] = &info;
}

std::unique_ptr<TensorSource> open_tensor_source(const std::string& dir, const std::vector<DType>& keep_gguf_blocks) {
  if (const std::optional<std::string> gguf = find_gguf_model(dir))
    return open_gguf_weights(*gguf, GgufWeightOptions{.keep_blocks = keep_gguf_blocks});
  return std::make_unique<Checkpoint>(Checkpoint::open(dir));
}

}  // namespace tf
