// Sampling parameters of one request (public API).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tf {

// What the output must be, enforced while decoding: a token that would break it is never
// sampled, and the end-of-sequence token only once the value is whole (max_tokens may still
// cut it short). JsonObject: one JSON object (OpenAI's response_format {"type":
// "json_object"}); JsonSchema: one JSON value that SamplingParams::json_schema allows
// ({"type": "json_schema"}; the subset in src/sample/json_schema.h); Regex: a text that
// SamplingParams::regex matches whole (vLLM's guided_regex; the subset in
// src/sample/regex_dfa.h).
enum class OutputFormat : uint8_t { Text, JsonObject, JsonSchema, Regex };

struct SamplingParams {
  float temperature = 1.0f;        // 0 = greedy (argmax)
  int32_t top_k = 0;               // 0 = off
  float top_p = 1.0f;              // 1 = off
  float min_p = 0.0f;              // 0 = off; keep tokens with p >= min_p * p_max
  float repetition_penalty = 1.0f; // 1 = off; HF/CTRL rule over prompt + generated tokens
  float presence_penalty = 0.0f;   // 0 = off; OpenAI's: minus this from each id already generated
  float frequency_penalty = 0.0f;  // 0 = off; OpenAI's: minus this times the id's count in the
                                   // generated tokens (the prompt is not counted by either)
  std::vector<std::pair<int32_t, float>> logit_bias;  // OpenAI's: (token id, added to its raw
                                                      // logit), each in [-100, 100]
  uint64_t seed = 0;               // same seed, same tokens
  int32_t max_tokens = 16;         // new tokens at most
  std::vector<std::string> stop;   // stop strings (not included in the output text)
  bool ignore_eos = false;         // keep going past EOS (benchmarks)
  int32_t logprobs = -1;           // -1 = off; n >= 0: each sampled token's log-probability plus the
                                   // n most likely tokens' (RequestOutput::logprobs)
  // -1 = off; n >= 0: the same for each prompt token after the first, given the ones before it
  // (RequestOutput::prompt_logprobs). The prompt is then computed whole, without prefix-cache
  // hits, and max_tokens may be 0 (the prompt is scored, nothing is generated).
  int32_t prompt_logprobs = -1;
  OutputFormat output_format = OutputFormat::Text;
  std::string json_schema;         // OutputFormat::JsonSchema: the schema (JSON text)
  std::string json_before, json_after;  // ... and fixed texts around the value (a tool-call
                                        // format's tags); json_after not empty if either is
  std::string json_between;             // ... not empty: one or more values, this between each
                                        // two (several tool calls)
  std::string regex;                    // OutputFormat::Regex: the pattern

  bool greedy() const { return temperature <= 0.0f; }
};

}  // namespace tf
