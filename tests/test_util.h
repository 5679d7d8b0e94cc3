// Helpers shared by tests: paths of bundled data, JSON loading.
#pragma once

#include <nlohmann/json.hpp>

#include <fstream>
#include <stdexcept>
#include <string>

namespace tf::test {

inline std::string source_path(const std::string& rel) { return std::string(TF_SOURCE_DIR) + "/" + rel; }
inline std::string model_dir(const std::string& name) { return source_path("models/" + name); }
inline std::string data_path(const std::string& rel) { return source_path("tests/data/" + rel); }

inline nlohmann::json load_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  return nlohmann::json::parse(in);
}

}  // namespace tf::test
