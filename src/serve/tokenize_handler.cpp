// /tokenize and /detokenize; see tokenize_handler.h.
#include "serve/tokenize_handler.h"

#include <algorithm>

#include "core/error.h"
#include "core/json_bounded.h"
#include "model/config.h"
#include "model/tokenizer/tokenizer.h"
#include "serve/api_error.h"
#include "serve/openai_protocol.h"
#include "serve/replica_router.h"

namespace tf::serve {
namespace {

using ojson = nlohmann::ordered_json;

ojson parse_object(std::string_view body) {
  ojson j;
  try {
    j = parse_json_bounded<ojson>(body, "request body");
  } catch (const tf::Error& e) {
    throw ApiError(400, std::string("the body is not valid JSON: ") + e.what(), "invalid_request_error");
  }
  if (!j.is_object()) throw ApiError(400, "the body must be a JSON object", "invalid_request_error");
  return j;
}

void check_model(const CompletionContext& ctx, const ojson& j) {
  const auto m = j.find("model");
  if (m == j.end() || m->is_null()) return;
  if (!m->is_string()) bad_request("model", "'model' must be a string");
  check_served_model(ctx, m->get<std::string>());
}

void refuse_other_fields(const ojson& j, std::initializer_list<std::string_view> known) {
  for (const auto& [key, value] : j.items())
    if (std::find(known.begin(), known.end(), key) == known.end())
      throw ApiError(400, "Unrecognized request argument supplied: " + key.substr(0, 200), "invalid_request_error",
                     key.substr(0, 200), "unknown_parameter");
}

}  // namespace

std::string tokenize_response(const CompletionContext& ctx, std::string_view body) {
  const ojson j = parse_object(body);
  refuse_other_fields(j, {"model", "prompt", "messages", "add_generation_prompt", "chat_template_kwargs", "tools",
                          "add_special_tokens"});
  check_model(ctx, j);
  const bool chat = j.contains("messages");
  if (chat == j.contains("prompt")) bad_request("prompt", "give one of 'prompt' (text) or 'messages'");
  bool add_special = !chat;
  if (const auto a = j.find("add_special_tokens"); a != j.end()) {
    if (!a->is_boolean()) bad_request("add_special_tokens", "'add_special_tokens' must be a boolean");
    add_special = a->get<bool>();
  }
  std::string text;
  if (chat) {
    ojson req = ojson::object();  // the chat request's own checks of these fields
    for (const char* k : {"messages", "add_generation_prompt", "chat_template_kwargs", "tools"})
      if (j.contains(k)) req[k] = j.at(k);
    text = render_chat_prompt(ctx, parse_chat_request(req.dump()));
  } else {
    for (const char* k : {"add_generation_prompt", "chat_template_kwargs", "tools"})
      if (j.contains(k)) bad_request(k, std::string("'") + k + "' goes with 'messages', not 'prompt'");
    const ojson& p = j.at("prompt");
    if (!p.is_string()) bad_request("prompt", "'prompt' must be a string");
    text = p.get<std::string>();
  }
  const std::vector<int32_t> ids = ctx.loop.tokenizer().encode(text, add_special);
  return ojson{{"count", ids.size()}, {"max_model_len", ctx.loop.config().max_position}, {"tokens", ids}}.dump();
}

std::string detokenize_response(const CompletionContext& ctx, std::string_view body) {
  const ojson j = parse_object(body);
  refuse_other_fields(j, {"model", "tokens"});
  check_model(ctx, j);
  const auto t = j.find("tokens");
  if (t == j.end() || !t->is_array()) bad_request("tokens", "'tokens' must be a list of token ids");
  const int64_t n_vocab = ctx.loop.config().n_vocab;
  std::vector<int32_t> ids;
  for (size_t i = 0; i < t->size(); ++i) {
    const ojson& v = (*t)[i];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= n_vocab)
      bad_request("tokens", "'tokens' element " + std::to_string(i) + " is not a token id in [0, " +
                                std::to_string(n_vocab) + ")");
    ids.push_back(int32_t(v.get<int64_t>()));
  }
  return ojson{{"prompt", ctx.loop.tokenizer().decode(ids)}}.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

}  // namespace tf::serve
