// Small pieces both benchmark runners share: latency percentiles and random prompts.
#pragma once

#include <cstdint>
#include <vector>

#include "sample/sampler.h"

namespace tf::bench {

// The q-quantile of v (nearest rank; 0 for an empty v).
double percentile(std::vector<double> v, double q);

// `len` random token ids in [16, n_vocab): away from the special tokens at the start of the
// vocabulary, and no shared prefixes between prompts (so the prefix cache serves none).
std::vector<int32_t> random_prompt(Rng& rng, int64_t n_vocab, int32_t len);

}  // namespace tf::bench
