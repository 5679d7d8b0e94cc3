// Building OpenAI response JSON; see openai_response.h.
#include "serve/openai_response.h"

#include "model/tokenizer/tokenizer.h"

namespace tf::serve {
namespace {

using nlohmann::json;

json usage_json(Usage u) {
  json j{{"prompt_tokens", u.prompt_tokens},
         {"completion_tokens", u.completion_tokens},
         {"total_tokens", u.prompt_tokens + u.completion_tokens},
         {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
  if (u.reasoning_tokens >= 0) j["completion_tokens_details"] = {{"reasoning_tokens", u.reasoning_tokens}};
  return j;
}

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}

// Completions: {tokens, token_logprobs, top_logprobs: [{token: logprob}], text_offset}. The
// sampled token is always among its top_logprobs keys, as vLLM reports it.
json completion_logprobs(const Tokenizer& tok, std::span<const SampledLogprobs> lps, size_t text_offset) {
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(), offsets = json::array();
  for (const SampledLogprobs& lp : lps) {
    const std::string t = tok.token_bytes(lp.sampled.id);
    tokens.push_back(t);
    token_logprobs.push_back(lp.sampled.logprob);
    json alts = json::object();
    for (const LogprobEntry& e : lp.top) alts[tok.token_bytes(e.id)] = e.logprob;
    alts[t] = lp.sampled.logprob;
    top.push_back(alts);
    offsets.push_back(text_offset);
    text_offset += t.size();
  }
  return json{{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top}, {"text_offset", offsets}};
}

// The echoed prompt's entries in the completions form: the first token's logprob and
// alternatives null; then each token's, as completion_logprobs writes them.
json echo_logprobs(const Tokenizer& tok, const EchoedPrompt& e) {
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(), offsets = json::array();
  size_t offset = 0;
  for (size_t i = 0; i < e.ids.size(); ++i) {
    const std::string t = tok.token_bytes(e.ids[i]);
    tokens.push_back(t);
    offsets.push_back(offset);
    offset += t.size();
    if (i == 0 || i - 1 >= e.logprobs.size()) {
      token_logprobs.push_back(nullptr);
      top.push_back(nullptr);
      continue;
    }
    const SampledLogprobs& lp = e.logprobs[i - 1];
    token_logprobs.push_back(lp.sampled.logprob);
    json alts = json::object();
    for (const LogprobEntry& a : lp.top) alts[tok.token_bytes(a.id)] = a.logprob;
    alts[t] = lp.sampled.logprob;
    top.push_back(alts);
  }
  return json{{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top}, {"text_offset", offsets}};
}

// a's arrays followed by b's, key by key.
json concat_logprobs(json a, const json& b) {
  for (const char* k : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
    for (const json& v : b[k]) a[k].push_back(v);
  return a;
}

json chat_logprob_entry(const Tokenizer& tok, const LogprobEntry& e) {
  const std::string t = tok.token_bytes(e.id);
  return json{{"token", t}, {"logprob", e.logprob}, {"bytes", bytes_of(t)}};
}

// Chat: {content: [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}.
json chat_logprobs(const Tokenizer& tok, std::span<const SampledLogprobs> lps) {
  json content = json::array();
  for (const SampledLogprobs& lp : lps) {
    json entry = chat_logprob_entry(tok, lp.sampled);
    json top = json::array();
    for (const LogprobEntry& e : lp.top) top.push_back(chat_logprob_entry(tok, e));
    entry["top_logprobs"] = top;
    content.push_back(entry);
  }
  return json{{"content", content}};
}

json envelope(const ResponseMeta& m, const char* object) {
  return json{{"id", m.id}, {"object", object}, {"created", m.created}, {"model", m.model},
              {"system_fingerprint", nullptr}};
}

}  // namespace

const char* finish_reason_text(FinishReason r) {
  switch (r) {
    case FinishReason::Length: return "length";
    case FinishReason::Abort: return "abort";
    case FinishReason::Stop:
    case FinishReason::None: break;
  }
  return "stop";
}

json response_choice(const ResponseMeta& m, const Tokenizer& tok, int index, const std::string& text,
                     std::span<const SampledLogprobs> logprobs, FinishReason finish, std::span<const ToolCall> calls,
                     const std::optional<std::string>& reasoning, const EchoedPrompt* echo) {
  json choice{{"index", index}, {"finish_reason", calls.empty() ? finish_reason_text(finish) : "tool_calls"},
              {"logprobs", nullptr}};
  if (m.endpoint == Endpoint::Chat) {
    choice["message"] = json{{"role", "assistant"}, {"content", text}};
    if (!calls.empty()) {
      if (text.empty()) choice["message"]["content"] = nullptr;
      json tc = json::array();
      for (const ToolCall& c : calls) tc.push_back(tool_call_json(c));
      choice["message"]["tool_calls"] = tc;
    }
    if (reasoning) choice["message"]["reasoning_content"] = reasoning->empty() ? json(nullptr) : json(*reasoning);
    if (m.logprobs) choice["logprobs"] = chat_logprobs(tok, logprobs);
  } else if (echo) {
    choice["text"] = std::string(echo->text) + text;
    if (m.logprobs)
      choice["logprobs"] = concat_logprobs(echo_logprobs(tok, *echo), completion_logprobs(tok, logprobs, echo->token_bytes));
  } else {
    choice["text"] = text;
    if (m.logprobs) choice["logprobs"] = completion_logprobs(tok, logprobs, 0);
  }
  return choice;
}

json full_response(const ResponseMeta& m, json choices, Usage usage) {
  json out = envelope(m, m.endpoint == Endpoint::Chat ? "chat.completion" : "text_completion");
  out["choices"] = std::move(choices);
  out["usage"] = usage_json(usage);
  return out;
}

json stream_chunk(const ResponseMeta& m, const Tokenizer& tok, const ChunkPart& p) {
  json choice{{"index", p.index}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
  if (p.finish) choice["finish_reason"] = p.finish_with_tool_calls ? "tool_calls" : finish_reason_text(*p.finish);
  json out;
  if (m.endpoint == Endpoint::Chat) {
    out = envelope(m, "chat.completion.chunk");
    json delta = json::object();
    if (p.first) delta["role"] = "assistant";
    if (!p.reasoning.empty()) delta["reasoning_content"] = p.reasoning;
    if (p.first || !p.text.empty()) delta["content"] = p.text;
    if (p.call) {
      json c = tool_call_json(*p.call);
      c["index"] = p.call_index;
      delta["tool_calls"] = json::array({c});
    }
    choice["delta"] = delta;
    if (m.logprobs && !p.logprobs.empty()) choice["logprobs"] = chat_logprobs(tok, p.logprobs);
  } else if (p.echo) {
    out = envelope(m, "text_completion");
    choice["text"] = std::string(p.echo->text);
    if (m.logprobs) choice["logprobs"] = echo_logprobs(tok, *p.echo);
  } else {
    out = envelope(m, "text_completion");
    choice["text"] = p.text;
    if (m.logprobs && !p.logprobs.empty()) choice["logprobs"] = completion_logprobs(tok, p.logprobs, p.text_offset);
  }
  out["choices"] = json::array({choice});
  if (m.include_usage) out["usage"] = nullptr;
  return out;
}

json usage_chunk(const ResponseMeta& m, Usage usage) {
  json out = envelope(m, m.endpoint == Endpoint::Chat ? "chat.completion.chunk" : "text_completion");
  out["choices"] = json::array();
  out["usage"] = usage_json(usage);
  return out;
}


std::string sse_event(const json& j) { return "data: " + dump(j) + "\n\n"; }

}  // namespace tf::serve
