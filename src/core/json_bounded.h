// JSON from untrusted bytes (model files, HTTP bodies) with a nesting limit.
//
// nlohmann::json builds, copies, compares and destroys values recursively, so a document nested
// tens of thousands of levels deep (a 50 KB request body of '[') overflows the stack wherever
// the value is touched. The limit is checked by the parser callback while parsing, before such
// a value exists; the partial value unwound on the error is at most max_depth deep.
#pragma once

#include <nlohmann/json.hpp>

#include <string_view>

#include "core/error.h"

namespace tf {

// Deep enough for every real config.json, tokenizer.json, safetensors header and OpenAI
// request (the deepest real ones nest under 10 levels; tool schemas under 30).
constexpr int kJsonMaxDepth = 128;

template <typename Json = nlohmann::json>
struct JsonParseOptions {
  int max_depth = kJsonMaxDepth;
  // Called for every parse event after the depth check (nlohmann's parser_callback_t
  // contract: return false to leave the value out of the result).
  typename Json::parser_callback_t callback = nullptr;
};

namespace detail {
struct JsonTooDeep {};  // thrown out of the parser callback; nlohmann lets it pass
}  // namespace detail

// Parses `text` into Json (nlohmann::json or ordered_json); throws tf::Error "<origin>: ..."
// naming the fault: not valid JSON (with nlohmann's byte position, or the offset of a NUL
// byte) or nesting deeper than opt.max_depth.
template <typename Json = nlohmann::json>
Json parse_json_bounded(std::string_view text, std::string_view origin,
                        const JsonParseOptions<Json>& opt = {}) {
  // depth = the number of containers enclosing the event (the root container starts at 0).
  typename Json::parser_callback_t check = [&](int depth, typename Json::parse_event_t event,
                                               Json& parsed) {
    if ((event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) &&
        depth >= opt.max_depth)
      throw detail::JsonTooDeep{};
    return opt.callback ? opt.callback(depth, event, parsed) : true;
  };
  // nlohmann takes a NUL byte for the end of the input and ignores what follows it, so
  // `{...}\0garbage` would parse; JSON text never contains a raw NUL (RFC 8259: control
  // characters must be escaped even in strings), so any NUL is an error here.
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos)
    fail("{}: not valid JSON: a NUL byte at offset {}", origin, nul);
  try {
    return Json::parse(text.begin(), text.end(), check);
  } catch (const detail::JsonTooDeep&) {
    fail("{}: JSON nested deeper than {} levels", origin, opt.max_depth);
  } catch (const typename Json::exception& e) {
    fail("{}: not valid JSON: {}", origin, e.what());
  }
}

}  // namespace tf
