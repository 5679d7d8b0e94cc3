// Golden vectors from Hugging Face transformers (tests/data/golden-*.json) and the checks
// every backend must pass against them.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "test_util.h"

namespace tf::test {

struct GoldenPrompt {
  std::string name, text;
  std::vector<int32_t> input_ids;
  std::vector<float> last_logits;
  std::vector<int32_t> argmax_per_position;
  std::vector<int32_t> greedy_ids;
  std::vector<double> greedy_margins;  // top1 - top2 logit at each greedy step
};

// Top-1 minus top-2 of one row of logits (the margin the golden files call
// top1_top2_margins): how near a greedy choice is to a tie.
inline double top2_margin(const float* row, int64_t n) {
  float a = -INFINITY, b = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    if (row[i] > a) {
      b = a;
      a = row[i];
    } else if (row[i] > b) {
      b = row[i];
    }
  }
  return double(a) - double(b);
}

inline std::vector<GoldenPrompt> load_golden(const std::string& model) {
  const auto j = load_json(data_path("golden-" + model + ".json"));
  std::vector<GoldenPrompt> out;
  for (const auto& p : j["prompts"]) {
    out.push_back({.name = p["name"], .text = p["text"], .input_ids = p["input_ids"],
                   .last_logits = p["last_logits"], .argmax_per_position = p["argmax_per_position"],
                   .greedy_ids = p["greedy"]["new_token_ids"],
                   .greedy_margins = p["greedy"]["top1_top2_margins"]});
  }
  return out;
}

inline std::string golden_model_dir(const std::string& model) {
  return model.rfind("tiny-", 0) == 0 ? model_dir(model) : model_dir("parity/" + model);
}

// ||a - b|| / ||b||
inline double rel_l2(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}
// The same of two vectors; infinity when their sizes differ.
inline double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() ? rel_l2(a.data(), b.data(), b.size()) : INFINITY;
}

// Number of leading greedy steps that must match exactly: up to (excluding) the first step
// whose golden top-1/top-2 margin is below `tie_tol`, where another summation order may
// rightly pick the other token (models/README.md, "Golden vectors").
inline size_t greedy_steps_to_compare(const GoldenPrompt& g, double tie_tol) {
  for (size_t i = 0; i < g.greedy_margins.size(); ++i)
    if (g.greedy_margins[i] < tie_tol) return i;  // step i itself may flip: compare steps before it
  return g.greedy_ids.size();
}

}  // namespace tf::test
