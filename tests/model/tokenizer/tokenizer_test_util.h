// Paths of the tokenizers the tokenizer tests use.
#pragma once

#include <memory>
#include <string>

#include "model/tokenizer/tokenizer.h"
#include "test_util.h"

namespace tf::test {

// The real tokenizers of tests/data/tokenizers/NAME/, with tokenizer.json unpacked into the
// build directory.
inline std::string real_tokenizer_json(const std::string& name) {
  return std::string(TF_TOKENIZER_DATA_DIR) + "/" + name + "/tokenizer.json";
}
inline std::string real_tokenizer_config(const std::string& name) {
  return data_path("tokenizers/" + name + "/tokenizer_config.json");
}
inline std::unique_ptr<Tokenizer> load_real_tokenizer(const std::string& name) {
  return Tokenizer::from_files(real_tokenizer_json(name), real_tokenizer_config(name));
}

}  // namespace tf::test
