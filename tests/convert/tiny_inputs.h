// tiny-main inputs the converter tests (quantize, prune) share: prompts of the golden file, a
// few tokens each, their greedy continuations through an engine, and calibration ids from models/calib/gpl-3.txt (never the validation
// tokens, which judge the results).
#pragma once

#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "model/tokenizer/tokenizer.h"
#include "test_util.h"
#include "twofold/engine.h"

namespace tf::test {

inline std::vector<std::vector<int32_t>> tiny_prompts() {
  return {{0, 450, 365, 5, 27, 99, 1000, 12}, {0, 77, 8, 64, 3000, 41}, {0, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14}};
}

// 12 greedy tokens (EOS ignored) after each of tiny_prompts() through `e`: the requests run one
// at a time, or all queued before the first step (batched as e's max_seqs allows).
inline std::vector<std::vector<int32_t>> tiny_greedy_ids(Engine& e, bool one_at_a_time) {
  std::vector<RequestId> ids;
  for (const auto& p : tiny_prompts()) {
    ids.push_back(e.add_request({.prompt_ids = p, .sampling = {.temperature = 0, .max_tokens = 12, .ignore_eos = true}}));
    if (one_at_a_time)
      while (e.has_unfinished()) e.step();
  }
  while (e.has_unfinished()) e.step();
  std::vector<std::vector<int32_t>> out;
  for (RequestId id : ids) out.push_back(e.output_ids(id));
  return out;
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
