// Tool calls in a chat model's output: which format a model writes them in, and taking them
// out of the generated text into OpenAI's `tool_calls`, whole or while streaming.
//
// Formats (the text the model was trained to write; its chat template tells it so):
//   hermes       <tool_call>{"name": "f", "arguments": {...}}</tool_call>, once or several
//                times, with content before the first call (Qwen2.5, Qwen3, Hermes; SmolLM2
//                writes a list of such objects inside one pair of tags, also taken).
//   llama3-json  the whole output is {"name": "f", "parameters": {...}} (or "arguments"),
//                several joined by ";", optionally after <|python_tag|> (Llama 3.1-3.3).
//   mistral      [TOOL_CALLS] after any content, then either a JSON list of call objects
//                ([TOOL_CALLS] [{"name": "f", "arguments": {...}}]: Mistral 7B v0.3, Mixtral
//                8x22B, NeMo, Small 3) or the name and its arguments ([TOOL_CALLS]f[ARGS]{...},
//                a [CALL_ID]id between them allowed, once per call: Small 3.1 and later).
// A call's arguments must be a JSON object; `arguments` of the result is its compact dump.
// Text that does not parse as calls stays content, as vLLM's parsers leave it.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tf::serve {

enum class ToolCallFormat : uint8_t { None, Hermes, Llama3Json, Mistral };

// "none", "hermes", "llama3-json", "mistral"; nullopt for another name.
std::optional<ToolCallFormat> tool_call_format_named(std::string_view name);
std::vector<std::string> tool_call_format_names();  // those names
const char* tool_call_format_name(ToolCallFormat f);
// The format a chat template's source asks the model for; None when it names none that is
// known (a template that renders no tools, or an unknown convention).
ToolCallFormat tool_call_format_of_template(std::string_view source);

struct ToolCall {
  std::string id;         // "call_" + 24 hex digits
  std::string name;
  std::string arguments;  // a JSON object, compact
};

struct ParsedOutput {
  std::string content;  // the text outside the calls (trimmed of the whitespace beside them)
  std::vector<ToolCall> calls;
};

// The calls of a whole output. `new_id` names each call (a random id in the server);
// `max_calls`: the calls past it are dropped (1: the request's parallel_tool_calls false).
ParsedOutput parse_tool_calls(ToolCallFormat format, std::string_view text, std::string (*new_id)(),
                              size_t max_calls = SIZE_MAX);

// Streaming: content goes out as it comes, except text that may begin a call, which is held
// until it is known not to (hermes, mistral: a suffix that could start "<tool_call>" or
// "[TOOL_CALLS]"; llama3-json: whitespace at the start). From the first call on, the rest is
// held and parsed at the end.
class ToolCallStream {
 public:
  ToolCallStream(ToolCallFormat format, std::string (*new_id)(), size_t max_calls = SIZE_MAX)
      : format_(format), new_id_(new_id), max_calls_(max_calls) {}
  // Content that can be sent now.
  std::string feed(std::string_view delta);
  // At the end of the output: the content still held (text that did not parse as calls
  // included) and the calls.
  ParsedOutput finish();

 private:
  ToolCallFormat format_;
  std::string (*new_id_)();
  size_t max_calls_;
  std::string held_;       // text not yet sent
  bool in_calls_ = false;  // held_ holds the first call's marker (hermes, mistral) or is all calls (llama3-json)
  bool decided_ = false;   // llama3-json: the output's first non-space character was seen
  bool sent_any_ = false;  // hermes: some content went out, so text after the calls joins it with "\n"
};

nlohmann::json tool_call_json(const ToolCall& c);

}  // namespace tf::serve
