// Engine results -> OpenAI response JSON, shaped as the OpenAI API shapes them:
//   completions:  object "text_completion", choices[0].text, logprobs {tokens, token_logprobs,
//                 top_logprobs, text_offset};
//   chat:         object "chat.completion" with choices[0].message, or "chat.completion.chunk"
//                 with choices[0].delta (the first chunk carries the role), logprobs
//                 {content: [{token, logprob, bytes, top_logprobs}]}; tool calls as
//                 message.tool_calls [{id, type "function", function {name, arguments}}]
//                 (content null when there is no other text) or, streamed, one delta
//                 tool_calls [{index, id, type, function}] per call, and finish_reason
//                 "tool_calls"; with a reasoning parser, message.reasoning_content (null when
//                 the model wrote none) or, streamed, delta.reasoning_content;
//   both:         usage {prompt_tokens, completion_tokens, total_tokens, prompt_tokens_details
//                 {cached_tokens}}, chat also completion_tokens_details {reasoning_tokens}
//                 (OpenAI's usage objects); when streaming with
//                 stream_options.include_usage every chunk has "usage": null and one last chunk
//                 has empty choices and the usage.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string_view>
#include <span>
#include <string>

#include "serve/api_error.h"
#include "serve/openai_protocol.h"
#include "serve/tool_calls.h"
#include "twofold/request.h"

namespace tf {
class Tokenizer;
}

namespace tf::serve {

struct Usage {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_tokens = 0;      // prompt tokens taken from the prefix cache (the first choice's)
  int32_t reasoning_tokens = -1;  // chat: generated tokens of <think> blocks, all choices; -1: completions
};

// What every response or chunk of one request shares.
struct ResponseMeta {
  Endpoint endpoint = Endpoint::Completions;
  std::string id;       // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;
  bool logprobs = false;
  bool include_usage = false;  // streaming only
};

// "stop", "length"; "abort" only when the server cancelled the request (shutdown past its
// grace period), which the OpenAI API has no name for.
const char* finish_reason_text(FinishReason r);

// Completions with echo: the prompt before the output; with logprobs, its tokens' entries
// before the output's (the first token's logprob and alternatives null, as it has no context).
struct EchoedPrompt {
  std::string_view text;
  std::span<const int32_t> ids;
  std::span<const SampledLogprobs> logprobs;  // ids.size() - 1 of them, or none without logprobs
  size_t token_bytes = 0;                     // the ids' bytes: where the output's text_offset starts
};

// One choice of a whole response, number `index` of the request's n. calls: the chat output's
// tool calls (text: the rest); reasoning: the chat output's reasoning when the server splits it
// off (reasoning.h); echo: completions' echoed prompt.
nlohmann::json response_choice(const ResponseMeta& m, const Tokenizer& tok, int index, const std::string& text,
                               std::span<const SampledLogprobs> logprobs, FinishReason finish,
                               std::span<const ToolCall> calls = {},
                               const std::optional<std::string>& reasoning = std::nullopt,
                               const EchoedPrompt* echo = nullptr);
// The whole non-streamed response around its choices.
nlohmann::json full_response(const ResponseMeta& m, nlohmann::json choices, Usage usage);

// One streamed chunk, of choice `index`. text_offset: bytes of that choice's text streamed
// before this chunk (completions logprobs' text_offset); first: the chat role delta goes out
// with a choice's first chunk.
struct ChunkPart {
  int index = 0;
  std::string text;
  std::string reasoning;  // chat: delta.reasoning_content when not empty
  std::span<const SampledLogprobs> logprobs;
  std::optional<FinishReason> finish;
  bool finish_with_tool_calls = false;  // finish_reason "tool_calls" instead of `finish`'s
  const ToolCall* call = nullptr;       // a delta with this call, number `call_index`
  int call_index = 0;
  size_t text_offset = 0;
  bool first = false;
  const EchoedPrompt* echo = nullptr;  // completions: this chunk is the echoed prompt (text, logprobs unused)
};
nlohmann::json stream_chunk(const ResponseMeta& m, const Tokenizer& tok, const ChunkPart& part);
// The last chunk when include_usage: empty choices, the usage.
nlohmann::json usage_chunk(const ResponseMeta& m, Usage usage);

// "data: <json>\n\n", with invalid UTF-8 (a token that ends mid-character) replaced.
std::string sse_event(const nlohmann::json& j);

}  // namespace tf::serve
