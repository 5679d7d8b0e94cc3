#include "sample/logprobs.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "sample/sampler.h"

namespace tf {

double logsumexp(std::span<const float> logits) {
  TF_ASSERT(!logits.empty(), "logsumexp of an empty row");
  const double m = logits[static_cast<size_t>(argmax(logits))];
  TF_ASSERT(std::isfinite(m), "logits have no finite maximum");
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - m);
  return m + std::log(sum);
}

std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int32_t n) {
  const size_t n_vocab = logits.size();
  const size_t n_top = static_cast<size_t>(std::clamp<int64_t>(n, 0, static_cast<int64_t>(n_vocab)));
  if (n_top == 0) return {};
  const double lse = logsumexp(logits);
  std::vector<int32_t> ids(n_vocab);
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + static_cast<ptrdiff_t>(n_top), ids.end(),
                    [&](int32_t a, int32_t b) {
                      const float la = logits[static_cast<size_t>(a)];
                      const float lb = logits[static_cast<size_t>(b)];
                      return la > lb || (la == lb && a < b);
                    });
  std::vector<TokenLogprob> out(n_top);
  for (size_t i = 0; i < n_top; ++i) {
    out[i] = {ids[i], static_cast<double>(logits[static_cast<size_t>(ids[i])]) - lse};
  }
  return out;
}

SampledLogprobs sampled_logprobs(std::span<const float> logits, int32_t token, int32_t n_top) {
  SampledLogprobs lp{.sampled = {.id = token, .logprob = double(logits[size_t(token)]) - logsumexp(logits)}};
  for (const TokenLogprob& t : top_logprobs(logits, n_top)) lp.top.push_back({.id = t.id, .logprob = t.logprob});
  return lp;
}

}  // namespace tf
