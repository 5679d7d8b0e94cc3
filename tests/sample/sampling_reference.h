// A slow, literal implementation of the sampling distribution for tests, written from the
// definition and independent of src/sample: HF order, renormalising after every step.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <set>
#include <vector>

#include "twofold/sampling.h"

namespace tf::test {

inline void renormalise(std::vector<double>& probs) {
  double sum = 0.0;
  for (double p : probs) sum += p;
  for (double& p : probs) p /= sum;
}

// probs: [n_vocab], summing to 1, zero outside the kept set.
inline std::vector<double> reference_distribution(std::vector<float> logits,
                                                  const std::vector<int32_t>& history,
                                                  const SamplingParams& params) {
  const size_t n = logits.size();
  // Repetition penalty, once per distinct id (HF: score < 0 ? score * p : score / p).
  if (params.repetition_penalty != 1.0f) {
    for (int32_t id : std::set<int32_t>(history.begin(), history.end())) {
      float& l = logits[static_cast<size_t>(id)];
      l = l < 0.0f ? l * params.repetition_penalty : l / params.repetition_penalty;
    }
  }
  std::vector<double> probs(n, 0.0);
  if (params.temperature <= 0.0f) {
    size_t best = 0;
    for (size_t i = 0; i < n; ++i) {
      if (logits[i] > logits[best]) best = i;
    }
    probs[best] = 1.0;
    return probs;
  }
  // softmax(logits / T).
  double max_scaled = -INFINITY;
  for (float l : logits) max_scaled = std::max(max_scaled, static_cast<double>(l) / params.temperature);
  for (size_t i = 0; i < n; ++i) {
    probs[i] = std::exp(static_cast<double>(logits[i]) / params.temperature - max_scaled);
  }
  renormalise(probs);
  // top-k: the k best by (logit desc, id asc).
  if (params.top_k > 0 && static_cast<size_t>(params.top_k) < n) {
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    for (size_t r = static_cast<size_t>(params.top_k); r < n; ++r) probs[order[r]] = 0.0;
    renormalise(probs);
  }
  // top-p: shortest prefix by (prob desc, id asc) with cumulative prob >= top_p.
  if (params.top_p < 1.0f) {
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return probs[a] > probs[b] || (probs[a] == probs[b] && a < b);
    });
    double cum = 0.0;
    size_t r = 0;
    for (; r < n; ++r) {
      cum += probs[order[r]];
      if (cum >= static_cast<double>(params.top_p)) break;
    }
    for (size_t q = r + 1; q < n; ++q) probs[order[q]] = 0.0;
    renormalise(probs);
  }
  // min-p: p >= min_p * p_max.
  if (params.min_p > 0.0f) {
    const double p_max = *std::max_element(probs.begin(), probs.end());
    for (double& p : probs) {
      if (p < static_cast<double>(params.min_p) * p_max) p = 0.0;
    }
    renormalise(probs);
  }
  return probs;
}

}  // namespace tf::test
