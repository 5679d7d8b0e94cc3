// Requests and their streamed outputs (public API).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "twofold/sampling.h"

namespace tf {

using RequestId = int64_t;

struct GenerateRequest {
  std::string prompt;              // tokenized with the model's tokenizer when prompt_ids is empty
  std::vector<int32_t> prompt_ids; // used as is when not empty
  SamplingParams sampling;
  int32_t priority = 0;            // higher runs first; first come first served within one
};

enum class FinishReason : uint8_t { None, Stop, Length, Abort };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "abort"

// A token and its log-probability under the model's raw distribution softmax(logits), before
// repetition penalty, temperature and truncation (what vLLM and the OpenAI API report).
struct LogprobEntry {
  int32_t id = -1;
  double logprob = 0;
};

// The log-probability of one sampled token and of the most likely alternatives.
struct SampledLogprobs {
  LogprobEntry sampled;
  std::vector<LogprobEntry> top;  // SamplingParams::logprobs entries, most likely first (ties: lower id)
};

// What one engine step produced for one request.
struct RequestOutput {
  RequestId id = -1;
  std::vector<int32_t> new_token_ids;  // tokens sampled this step (usually one)
  std::vector<SampledLogprobs> logprobs;  // one per new token when SamplingParams::logprobs >= 0
  // SamplingParams::prompt_logprobs >= 0: on the request's first output, one per prompt token
  // after the first (prompt[i + 1] given prompt[0..i]).
  std::vector<SampledLogprobs> prompt_logprobs;
  std::string text;                    // text that became final this step (whole UTF-8)
  bool finished = false;
  FinishReason finish_reason = FinishReason::None;
  // On a request's first output with a token: how many of its prompt tokens were not computed
  // for it, their K/V taken from the prefix cache (or from a request computing the same prefix
  // beside it); -1 on the others.
  int32_t n_cached_prompt_tokens = -1;
};

// Per-request statistics, available once a request finished.
struct RequestStats {
  int32_t n_prompt_tokens = 0;
  int32_t n_output_tokens = 0;
  int32_t n_cached_prompt_tokens = 0;  // see RequestOutput
  double ttft_s = 0;     // arrival to first token
  double total_s = 0;    // arrival to finish
  double decode_tokens_per_s = 0;  // (n_output - 1) / (total - ttft)
  // Speculative decoding: verifications of at least one proposal, proposals verified, and
  // those accepted (see EngineMetrics).
  int32_t n_spec_drafts = 0;
  int32_t n_spec_draft_tokens = 0;
  int32_t n_spec_accepted_tokens = 0;
};

}  // namespace tf
