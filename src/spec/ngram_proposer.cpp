#include "spec/ngram_proposer.h"

#include <algorithm>

#include "core/error.h"

namespace tf {

NgramProposer::NgramProposer(const NgramParams& p) : params_(p) {
  if (p.min_n < 1 || p.max_n < p.min_n) fail("n-gram proposer: need 1 <= min_n <= max_n, got {} and {}", p.min_n, p.max_n);
}

void NgramProposer::propose(std::span<const ProposeRequest> reqs, std::vector<Proposal>& out) {
  out.assign(reqs.size(), {});
  for (size_t i = 0; i < reqs.size(); ++i) out[i].tokens = ngram_lookup(*reqs[i].tokens, params_, reqs[i].k);
}

// A backwards scan per suffix length: O(len * max_n) per call. At the context lengths served
// here (thousands of tokens, tens of sequences per step) that is microseconds; a suffix
// automaton would make it O(k) but must be kept in step with every appended token.
std::vector<int32_t> ngram_lookup(std::span<const int32_t> tokens, const NgramParams& p, int32_t k) {
  const int64_t len = int64_t(tokens.size());
  std::vector<int32_t> out;
  if (k <= 0) return out;
  for (int32_t n = std::min<int64_t>(p.max_n, len - 1); n >= p.min_n; --n) {
    const std::span<const int32_t> suffix = tokens.subspan(size_t(len - n));
    // Occurrences starting at j end before the suffix starts overlapping itself at the end:
    // j + n <= len - 1, so at least one token follows.
    for (int64_t j = len - n - 1; j >= 0; --j) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + j)) continue;
      for (int64_t t = j + n; int32_t(out.size()) < k; ++t)
        out.push_back(t < len ? tokens[size_t(t)] : out[size_t(t - len)]);
      return out;
    }
  }
  return out;
}

}  // namespace tf
