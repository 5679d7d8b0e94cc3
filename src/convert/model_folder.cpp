#include "convert/model_folder.h"

#include <filesystem>

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

}  // namespace tf
