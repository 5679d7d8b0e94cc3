// Test helper: one draw from masked logits by the Gumbel-max trick (argmax of logit + Gumbel
// noise), skipping the ids masked with -inf; -1 when every id is masked.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <span>

namespace tf::test {

inline int32_t gumbel_max(std::span<const float> logits, std::mt19937& rng) {
  std::uniform_real_distribution<double> uni(1e-12, 1.0);
  int32_t best = -1;
  double best_v = -INFINITY;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (std::isinf(logits[i])) continue;
    const double g = double(logits[i]) - std::log(-std::log(uni(rng)));
    if (g > best_v) best_v = g, best = int32_t(i);
  }
  return best;
}

}  // namespace tf::test
