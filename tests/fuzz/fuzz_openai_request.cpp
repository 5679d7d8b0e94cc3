// libFuzzer harness: the OpenAI request decoder, body JSON -> ApiRequest, for completions and
// chat (parse_completion_request, parse_chat_request) and then fit_max_tokens. Input: byte 0
// picks the endpoint (even: completions, odd: chat) and the prompt length used for
// fit_max_tokens; the rest is the body. Refusals are ApiError; anything else thrown, a
// sanitizer report, or an accepted request whose fields are out of their documented
// ranges (tools included: a non-empty list of named functions) is a bug.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "serve/api_error.h"
#include "serve/openai_protocol.h"

namespace {

using namespace tf::serve;

// What a request that passed validation promises the engine (openai_protocol.cpp).
bool in_range(const ApiRequest& r) {
  const tf::SamplingParams& s = r.sampling;
  if (!(s.temperature >= 0) || !(s.top_p > 0 && s.top_p <= 1) || !(s.min_p >= 0 && s.min_p <= 1)) return false;
  if (!(s.repetition_penalty > 0) || s.top_k < 0 || s.logprobs < -1 || s.logprobs > 20) return false;
  if (!(s.presence_penalty >= -2 && s.presence_penalty <= 2) || !(s.frequency_penalty >= -2 && s.frequency_penalty <= 2))
    return false;
  for (const auto& [id, bias] : s.logit_bias)
    if (id < 0 || !(bias >= -100 && bias <= 100)) return false;
  if (r.max_tokens && *r.max_tokens < 1) return false;
  if (r.n < 1 || r.n > 128) return false;
  if (!r.tools.is_null()) {
    if (r.endpoint != Endpoint::Chat || !r.tools.is_array() || r.tools.empty()) return false;
    for (const auto& t : r.tools) {
      const auto fn = t.find("function");
      if (t.value("type", "") != "function" || fn == t.end() || !fn->is_object() || !fn->contains("name") ||
          !(*fn)["name"].is_string() || (*fn)["name"].get<std::string>().empty())
        return false;
    }
  }
  if (r.endpoint == Endpoint::Chat) return r.messages.is_array() && !r.messages.empty();
  if (r.prompt_is_ids) return !r.prompt_ids.empty();
  return !r.prompt_text.empty();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const Endpoint endpoint = (data[0] & 1) ? Endpoint::Chat : Endpoint::Completions;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    ApiRequest r = endpoint == Endpoint::Chat ? parse_chat_request(body) : parse_completion_request(body);
    if (!in_range(r)) __builtin_trap();
    const int64_t n_prompt = 1 + (data[0] >> 1) * 8;  // 1 .. 1017 tokens
    fit_max_tokens(r, n_prompt, 1024);
    if (r.sampling.max_tokens < 1 || n_prompt + r.sampling.max_tokens > 1024) __builtin_trap();
  } catch (const ApiError& e) {
    if (e.status() != 400 || std::string_view(e.what()).empty()) __builtin_trap();
    (void)dump(e.to_json());
  }
  return 0;
}
