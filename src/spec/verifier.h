// Lossless verification of proposed tokens (speculative decoding).
//
// The target model scored the sequence followed by its proposals d_1..d_n in one step, giving
// p_0..p_n: p_i is the distribution of the token after the sequence and d_1..d_i, as the
// sampler would draw from it (penalty, temperature, top-k/top-p/min-p applied). The proposals
// were drawn from q_1..q_n. Modified rejection sampling (Leviathan et al. 2023, Chen et al.
// 2023): keep d_i with probability min(1, p_{i-1}(d_i) / q_i(d_i)) while every proposal before
// it was kept; at the first rejection draw the token from the residual max(0, p_{i-1} - q_i)
// renormalised; when all n were kept draw a bonus token from p_n. Every emitted token is then
// distributed as under p alone, whatever q is; q only decides how many tokens a step yields.
// A deterministic proposer (prompt lookup) has q_i = a point mass on d_i: keep d_i with
// probability p_{i-1}(d_i), on rejection draw from p_{i-1} without d_i.
//
// A greedy target (p_i a point mass on its argmax) needs no randomness: proposals are kept
// while each equals the target's argmax, then the argmax is emitted, which are exactly the
// tokens of greedy decoding without speculation.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "sample/sampler.h"

namespace tf {

struct VerifyResult {
  int32_t n_accepted = 0;  // leading proposals kept
  int32_t token = -1;      // the token after them (a residual draw, or the bonus token)
};

// target_token(i): the target's greedy token after the sequence and its first i proposals.
VerifyResult verify_greedy(std::span<const int32_t> proposals, const std::function<int32_t(int32_t)>& target_token);

// p(i), i in [0, n]: the target's distribution after the first i proposals ([n_vocab], sums
// to 1). q(i), i in [0, n): the distribution proposal i was drawn from; a null q means point
// masses. Draws uniforms from `rng` (one per proposal looked at, one for the final token).
// Preconditions: every proposal has q(i)[proposal] > 0 (it was drawn from q).
using DistributionFn = std::function<std::span<const float>(int32_t i)>;
VerifyResult verify_sampled(std::span<const int32_t> proposals, const DistributionFn& p, const DistributionFn& q,
                            Rng& rng);

// The smallest id whose cumulative weight exceeds u * sum(weights), as the sampler draws
// (weights need not sum to 1). Falls back to the last id with weight on rounding.
// Preconditions: some weight is positive; u in [0, 1).
int32_t draw_from(std::span<const float> weights, double u);

}  // namespace tf
