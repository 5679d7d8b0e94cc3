// OpenAI API requests -> what the engine runs. Parses and validates the JSON body of
// POST /v1/completions and POST /v1/chat/completions field by field, so that every mistake
// comes back as a 400 naming the field (ApiError), never as a crash or a vague message.
//
// Supported fields (both endpoints unless marked): model, max_tokens (chat also
// max_completion_tokens), temperature, top_p, top_k, min_p, repetition_penalty,
// presence_penalty, frequency_penalty, logit_bias, seed, stop,
// n (1 to 128 choices), stream, stream_options.include_usage, priority, ignore_eos (a vLLM
// extension), logprobs (completions: an integer; chat: a bool with top_logprobs);
// completions: prompt (a string, a list of token ids, or a one-element list of either), echo
// (the prompt before the output, and with logprobs the prompt tokens' logprobs, the first
// null; max_tokens may then be 0: the prompt is scored, nothing generated);
// chat: messages, add_generation_prompt and chat_template_kwargs (vLLM extensions), tools
// (functions) with tool_choice ("auto", "none", "required" or a named function: tool_choice.h)
// and parallel_tool_calls (see tool_calls.h for the output side), response_format (text,
// json_object, json_schema: sample/json_schema.h).
// Accepted without effect (they matter only to OpenAI's own service): user; chat: metadata,
// service_tier, safety_identifier, prompt_cache_key.
// Refused by name unless they ask for nothing, since they are not implemented:
// best_of > 1, suffix; chat: functions, function_call (the deprecated form of tools),
// modalities (other than text), store, audio, prediction, reasoning_effort, verbosity,
// web_search_options.
// Any other field is refused by name, as the OpenAI API refuses unrecognized arguments.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "twofold/sampling.h"

namespace tf::serve {

enum class Endpoint : uint8_t { Completions, Chat };

struct ApiRequest {
  Endpoint endpoint = Endpoint::Completions;
  std::optional<std::string> model;  // absent: the served model
  // Completions: the prompt as text, or as token ids (then prompt_text is unused).
  std::string prompt_text;
  std::vector<int32_t> prompt_ids;
  bool prompt_is_ids = false;
  bool echo = false;  // completions: the prompt comes back before the output
  // Chat: the messages (validated shape: objects with a role and string/array/null content),
  // the tools and the template's extra variables, with objects' keys in the order the client
  // sent them (as Python's json.loads keeps them for transformers' templates).
  nlohmann::ordered_json messages;
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
  // Function tools ({"type": "function", "function": {"name", ...}}); null when none were
  // given, the array was empty, or tool_choice is "none" (then the prompt does not list them
  // and the output is not searched for calls).
  nlohmann::ordered_json tools;
  bool parallel_tool_calls = true;  // false: only the output's first call is returned
  // tool_choice "required" (any tool) or {"type": "function", "function": {"name"}}: the output
  // is held to one call (serve/tool_choice.h); "auto" and "none" leave it free.
  bool tool_required = false;
  std::optional<std::string> tool_named;
  bool add_generation_prompt = true;

  std::optional<int32_t> max_tokens;  // absent: completions 16 (OpenAI's default), chat the rest of the
                                      // context; 0 only with echo
  SamplingParams sampling;            // max_tokens filled in by fit_max_tokens
  bool seed_given = false;            // false: the server draws a random seed
  int32_t priority = 0;
  int32_t n = 1;  // choices, each its own engine request with seed + its index
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool want_logprobs = false;  // completions logprobs != null; chat logprobs == true
};

// Throw ApiError (400) naming the field on invalid JSON, a wrong type or an out-of-range value.
ApiRequest parse_completion_request(std::string_view body);
ApiRequest parse_chat_request(std::string_view body);

// Sets sampling.max_tokens from max_tokens and the context left after an n_prompt-token
// prompt; 400 (param "max_tokens") when an explicit value does not fit, 400 (param "prompt"
// or "messages") when the prompt leaves no room for one new token.
void fit_max_tokens(ApiRequest& r, int64_t n_prompt, int64_t max_position);

// The field a prompt-related error names: "prompt" or "messages".
const char* prompt_param(Endpoint e);

}  // namespace tf::serve
