// libFuzzer harness: chat output parsers, tool calls (src/serve/tool_calls.*) and reasoning
// (src/serve/reasoning.*), alone and chained as the server chains them (the reasoning split
// first, the calls looked for in its content). Input: byte 0 picks the format (bit 0:
// llama3-json, else bit 2: mistral, else hermes), whether the prompt opened a <think> block
// (bit 1) and the piece size the streams are fed in (1 + byte 0 / 2 bytes); the rest is the
// output text. A bug: anything thrown, a sanitizer report, streamed reasoning, content or calls
// that differ from the whole parse, a call whose arguments are not a JSON object, or more
// reasoning tokens than pieces (the pieces taken as the tokens).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve/reasoning.h"
#include "serve/tool_calls.h"

namespace {

using namespace tf::serve;

std::string next_id() { return "call_x"; }

bool same_calls(const ParsedOutput& a, const ParsedOutput& b) {
  if (a.calls.size() != b.calls.size()) return false;
  for (size_t i = 0; i < a.calls.size(); ++i)
    if (a.calls[i].name != b.calls[i].name || a.calls[i].arguments != b.calls[i].arguments) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const ToolCallFormat f = (data[0] & 1)   ? ToolCallFormat::Llama3Json
                          : (data[0] & 4) ? ToolCallFormat::Mistral
                                          : ToolCallFormat::Hermes;
  const size_t piece = 1 + (data[0] >> 1);
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const ParsedOutput whole = parse_tool_calls(f, text, next_id);
  for (const ToolCall& c : whole.calls) {
    const auto args = nlohmann::json::parse(c.arguments, nullptr, /*allow_exceptions=*/false);
    if (!args.is_object() || c.name.empty()) __builtin_trap();
  }
  ToolCallStream s(f, next_id);
  std::string content;
  for (size_t at = 0; at < text.size(); at += piece) content += s.feed(text.substr(at, piece));
  ParsedOutput rest = s.finish();
  content += rest.content;
  if (content != whole.content || !same_calls(rest, whole)) __builtin_trap();

  const bool open = (data[0] & 2) != 0;
  const ReasoningSplit split = split_reasoning(text, open);
  std::vector<std::string> pieces;
  for (size_t at = 0; at < text.size(); at += piece) pieces.emplace_back(text.substr(at, piece));
  const int32_t n_reasoning = reasoning_token_count(text, open, pieces);
  if (n_reasoning < 0 || size_t(n_reasoning) > pieces.size() || (split.reasoning.empty() && !open && n_reasoning != 0 &&
                                                                   text.find("<think>") == std::string_view::npos))
    __builtin_trap();
  const ParsedOutput after = parse_tool_calls(f, split.content, next_id);
  ReasoningStream r(open);
  ToolCallStream t(f, next_id);
  std::string reasoning;
  content.clear();
  for (size_t at = 0; at < text.size(); at += piece) {
    const ReasoningSplit out = r.feed(text.substr(at, piece));
    reasoning += out.reasoning;
    content += t.feed(out.content);
  }
  const ReasoningSplit held = r.finish();
  reasoning += held.reasoning;
  content += t.feed(held.content);
  rest = t.finish();
  content += rest.content;
  if (reasoning != split.reasoning || content != after.content || !same_calls(rest, after)) __builtin_trap();
  return 0;
}
