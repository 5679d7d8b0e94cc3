// tiny-main inputs the converter tests (quantize, prune) share: prompts of the golden file, a
// few tokens each, and calibration ids from models/calib/gpl-3.txt (never the validation
// tokens, which judge the results).
#pragma once

#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "model/tokenizer/tokenizer.h"
#include "test_util.h"

namespace tf::test {

inline std::vector<std::vector<int32_t>> tiny_prompts() {
  return {{0, 450, 365, 5, 27, 99, 1000, 12}, {0, 77, 8, 64, 3000, 41}, {0, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14}};
}

// The first n tokens of the calibration text, tokenized by tiny-main's tokenizer.
inline std::vector<int32_t> tiny_calib_ids(int64_t n) {
  const auto tok = Tokenizer::from_model(model_dir("tiny-main"));
  std::ifstream in(source_path("models/calib/gpl-3.txt"));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<int32_t> ids = tok->encode(text, false);
  ids.resize(size_t(n));
  return ids;
}

}  // namespace tf::test
