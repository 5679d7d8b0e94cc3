// Prompt lookup (n-gram) proposals: no model. The last n tokens of the sequence (n from max_n
// down to min_n) are looked up in the sequence itself (prompt + output); at the most recent
// earlier occurrence, the tokens that followed it are proposed. Outputs that quote or repeat
// their prompt (code edits, summaries with citations, extraction, greedy loops) are
// continued for free. Deterministic: q is a point mass.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "spec/proposer.h"

namespace tf {

struct NgramParams {
  int32_t min_n = 1;  // shortest suffix looked up
  int32_t max_n = 3;  // longest suffix looked up (tried first)
};

class NgramProposer final : public Proposer {
 public:
  explicit NgramProposer(const NgramParams& p);
  std::string name() const override { return "ngram"; }
  void propose(std::span<const ProposeRequest> reqs, std::vector<Proposal>& out) override;

 private:
  NgramParams params_;
};

// Up to k tokens that followed the most recent earlier occurrence of the longest suffix of
// `tokens` (length max_n down to min_n) that occurs earlier. A copy that runs into the end of
// `tokens` continues with its own proposals (a repeating span keeps repeating).
// Empty when no suffix of length >= min_n occurs earlier.
std::vector<int32_t> ngram_lookup(std::span<const int32_t> tokens, const NgramParams& p, int32_t k);

}  // namespace tf
