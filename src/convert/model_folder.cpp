#include "convert/model_folder.h"

#include <filesystem>

#include "backend/host_backend.h"

namespace tf {

void copy_model_side_files(const std::string& in, const std::string& out) {
  namespace fs = std::filesystem;
  for (const auto& e : fs::directory_iterator(in)) {
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file() || name.ends_with(".safetensors") || name == "model.safetensors.index.json" ||
        name == "config.json")
      continue;
    fs::copy_file(e.path(), fs::path(out) / name, fs::copy_options::overwrite_existing);
  }
}

std::vector<float> tensor_f32(const TensorInfo& t) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  std::vector<float> out(static_cast<size_t>(n));
  load_row_f32(t.data, t.dtype, 0, n, out.data());
  return out;
}

}  // namespace tf
