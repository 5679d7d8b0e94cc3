// Proposers for speculative decoding: something cheap that guesses a sequence's next tokens,
// so that the target model can score the guesses in one step and keep the ones it would have
// produced (verifier.h). Two kinds sit behind this interface: a small draft model
// (draft_proposer.h) and prompt lookup (ngram_proposer.h).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "sample/sampler.h"
#include "twofold/sampling.h"

namespace tf {

// One sequence that wants proposals this step.
struct ProposeRequest {
  int64_t seq = -1;
  // Prompt + output so far (all verified). The caller keeps it alive, and only appends to it,
  // until release(seq).
  const std::vector<int32_t>* tokens = nullptr;
  size_t n_prompt = 0;  // tokens[0, n_prompt) are the prompt (the presence and frequency penalties skip them)
  int32_t k = 0;                              // at most k proposals (k >= 1)
  const SamplingParams* sampling = nullptr;   // how the target samples this sequence
  Rng* rng = nullptr;                         // the sequence's own draws for sampled proposals
};

// What a proposer offers one sequence.
struct Proposal {
  std::vector<int32_t> tokens;  // [n] proposed tokens, n <= k (0: nothing to offer)
  // [n][n_vocab] the distribution tokens[i] was drawn from, after the same penalty,
  // temperature and truncation as the target's (so q and p are comparable); empty when every
  // token is a point mass (a deterministic proposer, or a greedy sequence).
  std::vector<std::vector<float>> q;
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  virtual std::string name() const = 0;
  // out[i] is the proposal for reqs[i] (out is resized to reqs.size()).
  virtual void propose(std::span<const ProposeRequest> reqs, std::vector<Proposal>& out) = 0;
  // Forgets sequence `seq` (finished, aborted or preempted) and frees what it holds. No-op if
  // unknown.
  virtual void release(int64_t seq) { (void)seq; }
  // Seconds of one proposal step for `batch` sequences (one draft-model forward), for the
  // cost model of adaptive lengths; 0 for a proposer that runs no model.
  virtual double measure_step_seconds(int32_t batch) {
    (void)batch;
    return 0;
  }
  // Tokens of `tokens` (sequence `seq`'s prompt + output, as propose() would get them) that
  // the proposer would run before its first proposal: a draft model's catch-up (at least 1,
  // the last token, whose logits give proposal 1; the whole prompt for a sequence it has not
  // seen); 0 for a proposer that runs no model.
  virtual int32_t backlog(int64_t seq, const std::vector<int32_t>& tokens) const {
    (void)seq;
    (void)tokens;
    return 0;
  }
  // Runs, untimed, a forward of every shape the proposer's catch-up (backlog) can take for up
  // to max_seqs sequences, so that each shape's first-sight costs (a backend's per-shape
  // kernel choice, scratch grown) fall here rather than into a step the adaptive policy
  // measures; returns the forwards run (0 where it runs no model or warmed these already).
  virtual int32_t warm_catch_up(int32_t max_seqs) {
    (void)max_seqs;
    return 0;
  }
  // Catch-up forwards run at a shape warm_catch_up did not cover (all of them before it ran).
  virtual int64_t n_cold_catch_ups() const { return 0; }
  // KV blocks the proposer holds for sequences (a draft model's own pool); 0 without a model.
  virtual int32_t kv_blocks_used() const { return 0; }
  // "" when the proposer's own structures (a draft model's KV blocks) are consistent. For tests.
  virtual std::string check_invariants() const { return ""; }
};

}  // namespace tf
