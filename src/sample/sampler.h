// Turning one row of logits into one token id.
//
// Order of operations, as in Hugging Face's generate and vLLM: repetition penalty on the raw
// logits, then temperature, then top-k, top-p and min-p on the resulting distribution, then
// one draw. temperature == 0 is greedy (argmax over the penalised logits; ties go to the
// lowest id). Each request has its own RNG seeded from SamplingParams::seed, so the same seed
// gives the same tokens whatever else runs in the batch.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "twofold/sampling.h"

namespace tf {

// Deterministic, platform-independent RNG (SplitMix64 seeding + xoshiro256**): std::
// distributions differ between standard libraries, so we draw our own uniforms.
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t next_u64();
  double uniform();  // [0, 1), 53 random bits

 private:
  uint64_t s_[4];
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // logits: [n_vocab], modified in place (penalties, temperature, masking).
  // history: prompt + generated ids so far, for the repetition penalty.
  int32_t sample(std::span<float> logits, std::span<const int32_t> history);

  // The probability of every token after penalties, temperature and truncation, as `sample`
  // draws from it (zero outside the kept set). For tests and logprobs. logits not modified.
  std::vector<float> distribution(std::span<const float> logits,
                                  std::span<const int32_t> history) const;

 private:
  SamplingParams params_;
  Rng rng_;
};

// Applies the HF/CTRL repetition penalty: for every distinct id in history, a positive logit
// is divided by `penalty`, a negative one multiplied.
void apply_repetition_penalty(std::span<float> logits, std::span<const int32_t> history,
                              float penalty);

int32_t argmax(std::span<const float> logits);

// log-softmax of one entry: log p(id) = logits[id] - logsumexp(logits).
double log_softmax_at(std::span<const float> logits, int32_t id);

}  // namespace tf
