// Log-probabilities for the API's `logprobs`: of the model's distribution softmax(logits),
// before penalties, temperature and truncation (what vLLM returns by default).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "twofold/request.h"

namespace tf {

struct TokenLogprob {
  int32_t id;
  double logprob;
};

// logsumexp over the row, computed once so many entries can share it (max-subtracted, double).
// Preconditions: logits non-empty with a finite maximum (asserted).
double logsumexp(std::span<const float> logits);

// The n most likely tokens, by (logit desc, id asc), with log p = logit - logsumexp.
// n is clamped to [0, n_vocab]. O(n_vocab log n).
std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int32_t n);

// The sampled token's log-probability and the n_top most likely, from the raw row
// (logits: [n_vocab], before any penalty).
SampledLogprobs sampled_logprobs(std::span<const float> logits, int32_t token, int32_t n_top);

}  // namespace tf
