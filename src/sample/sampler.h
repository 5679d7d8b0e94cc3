// Turning one row of logits into one token id.
//
// Order of operations: the logit bias added to the raw logits, then, as in vLLM, the repetition
// penalty, then the frequency and presence penalties (Hugging Face's generate has only the
// repetition penalty), then temperature, then top-k, top-p and min-p on the resulting distribution, then
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

// Checks a request's sampling fields; throws tf::Error naming the first bad field:
// temperature >= 0, top_k >= 0, top_p in (0, 1], min_p in [0, 1], repetition_penalty > 0,
// presence_penalty and frequency_penalty in [-2, 2] (OpenAI's range), logit_bias ids >= 0 and
// values in [-100, 100] (temperature and repetition_penalty must also be finite; the ids'
// upper bound, the vocabulary, is the engine's to check). Shared with the server.
void validate(const SamplingParams& params);

// Whether sampling reads the tokens so far (a penalty is on).
bool uses_history(const SamplingParams& params);
// Whether sampling changes the raw logits before temperature (a penalty or a logit bias).
bool adjusts_logits(const SamplingParams& params);

// Implementation details of Sampler, here so that Sampler stays a copyable value.
// One candidate token while a distribution is built.
struct SampleCandidate {
  int32_t id;
  float logit;  // after the repetition penalty, before temperature
  float w;      // unnormalised probability exp((logit - max_logit) / T); the best token has 1
};

// Buffers reused between calls so that a 128k-vocab step does not allocate.
struct SamplerScratch {
  std::vector<float> w;             // [n_vocab]: every token's w, when nothing is truncated
  std::vector<double> block_mass;   // [ceil(n_vocab / 1024)]: sums of w per block, for the draw
  std::vector<SampleCandidate> candidates;  // the kept set, when something is truncated
};

class Sampler {
 public:
  // Validates params (tf::Error on a bad field). The first n_prompt ids of every history are
  // the prompt, which the presence and frequency penalties do not count.
  explicit Sampler(const SamplingParams& params, size_t n_prompt = 0);

  // Draws one uniform u from the RNG (none when greedy) and returns the smallest id whose
  // cumulative probability, in id order, exceeds u: the same token for the same distribution
  // and seed, however the kept set was computed.
  // logits: [n_vocab]; adjust_logits is applied to it in place, nothing else.
  // history: prompt + generated ids so far, for the penalties; each in [0, n_vocab).
  // Preconditions: n_vocab > 0 and a finite maximum logit (asserted); no NaN (asserted where
  // one reaches the weights). -inf masks a token.
  int32_t sample(std::span<float> logits, std::span<const int32_t> history);
  // The uniform that sample() would draw next (advancing the RNG the same way), for a caller
  // that draws the token elsewhere (the GPU sampler).
  double draw_uniform() { return rng_.uniform(); }

  // The probability of every token after penalties, temperature and truncation, as `sample`
  // draws from it (zero outside the kept set). For tests and logprobs. logits not modified.
  std::vector<float> distribution(std::span<const float> logits,
                                  std::span<const int32_t> history) const;

 private:
  SamplingParams params_;
  size_t n_prompt_;
  Rng rng_;
  SamplerScratch scratch_;  // sample() only; distribution() uses its own
};

// Applies the HF/CTRL repetition penalty: for every distinct id in history, a positive logit
// is divided by `penalty`, a negative one multiplied.
void apply_repetition_penalty(std::span<float> logits, std::span<const int32_t> history,
                              float penalty);

// What `params` does to the raw logits, in order: the logit bias added, the repetition penalty
// over all of history, then for each distinct id among history[n_prompt:] (the generated
// tokens) logit -= count * frequency_penalty, then logit -= presence_penalty (vLLM's rule).
void adjust_logits(std::span<float> logits, std::span<const int32_t> history, size_t n_prompt,
                   const SamplingParams& params);

int32_t argmax(std::span<const float> logits);

// log-softmax of one entry: log p(id) = logits[id] - logsumexp(logits).
double log_softmax_at(std::span<const float> logits, int32_t id);

}  // namespace tf
