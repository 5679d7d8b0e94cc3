#include "spec/verifier.h"

#include <vector>

#include "core/error.h"

namespace tf {

VerifyResult verify_greedy(std::span<const int32_t> proposals, const std::function<int32_t(int32_t)>& target_token) {
  int32_t i = 0;
  for (; i < int32_t(proposals.size()); ++i) {
    const int32_t t = target_token(i);
    if (proposals[size_t(i)] != t) return {.n_accepted = i, .token = t};
  }
  return {.n_accepted = i, .token = target_token(i)};
}

int32_t draw_from(std::span<const float> weights, double u) {
  double sum = 0.0;
  for (float w : weights) sum += w;
  TF_ASSERT(sum > 0.0, "draw from a distribution without mass");
  const double target = u * sum;
  double acc = 0.0;
  for (size_t i = 0; i < weights.size(); ++i) {
    acc += weights[i];
    if (target < acc) return int32_t(i);
  }
  for (size_t i = weights.size(); i-- > 0;)
    if (weights[i] > 0.0f) return int32_t(i);
  return 0;  // unreachable: sum > 0
}

// The acceptance test u < p/q is written u * q < p (no division; q > 0). The residual is
// formed in float like p and q; when rounding leaves it without mass (p == q up to the last
// bit, where a rejection has probability ~1e-7), the token is drawn from p itself.
VerifyResult verify_sampled(std::span<const int32_t> proposals, const DistributionFn& p, const DistributionFn& q,
                            Rng& rng) {
  std::vector<float> residual;
  for (int32_t i = 0; i < int32_t(proposals.size()); ++i) {
    const int32_t d = proposals[size_t(i)];
    const std::span<const float> pi = p(i);
    TF_ASSERT(d >= 0 && size_t(d) < pi.size(), "proposal {} outside the vocabulary of {}", d, pi.size());
    std::span<const float> qi;
    if (q) {
      qi = q(i);
      TF_ASSERT(qi.size() == pi.size() && qi[size_t(d)] > 0.0f, "proposal {} has no probability under its own q", d);
    }
    const double q_d = q ? double(qi[size_t(d)]) : 1.0;
    if (rng.uniform() * q_d < double(pi[size_t(d)])) continue;  // kept
    residual.assign(pi.begin(), pi.end());
    if (q) {
      for (size_t j = 0; j < residual.size(); ++j) residual[j] = std::max(0.0f, pi[j] - qi[j]);
    } else {
      residual[size_t(d)] = 0.0f;
    }
    double mass = 0.0;
    for (float r : residual) mass += r;
    const double u = rng.uniform();
    return {.n_accepted = i, .token = mass > 0.0 ? draw_from(residual, u) : draw_from(pi, u)};
  }
  const int32_t n = int32_t(proposals.size());
  return {.n_accepted = n, .token = draw_from(p(n), rng.uniform())};
}

}  // namespace tf
