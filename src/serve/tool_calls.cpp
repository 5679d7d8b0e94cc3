// Tool calls out of generated text; see tool_calls.h.
#include "serve/tool_calls.h"

#include "core/error.h"
#include "core/json_bounded.h"
#include "serve/name_table.h"

namespace tf::serve {
namespace {

using nlohmann::json;
// The model's objects keep their key order: `arguments` goes back as the model wrote it.
using ojson = nlohmann::ordered_json;

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralCalls = "[TOOL_CALLS]";
constexpr std::string_view kMistralArgs = "[ARGS]";
constexpr std::string_view kMistralCallId = "[CALL_ID]";

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

std::string_view rtrim(std::string_view s) {
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// One call object: {"name": string, "arguments" (or "parameters"): object or a string holding
// one}. nullopt when it is not one.
std::optional<ToolCall> call_of(const ojson& j, std::string (*new_id)()) {
  if (!j.is_object()) return std::nullopt;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get_ref<const std::string&>().empty()) return std::nullopt;
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");
  ojson a = ojson::object();
  if (args != j.end()) {
    if (args->is_string()) {
      try {
        a = parse_json_bounded<ojson>(args->get_ref<const std::string&>(), "tool call arguments");
      } catch (const Error&) {
        return std::nullopt;
      }
    } else {
      a = *args;
    }
  }
  if (!a.is_object()) return std::nullopt;
  return ToolCall{.id = new_id(), .name = name->get<std::string>(), .arguments = a.dump()};
}

// The calls in one JSON text: an object, or (hermes, as SmolLM2 writes) an array of objects.
bool add_calls(std::string_view body, bool array_ok, std::vector<ToolCall>& out, std::string (*new_id)()) {
  ojson j;
  try {
    j = parse_json_bounded<ojson>(trim(body), "tool call");
  } catch (const Error&) {
    return false;
  }
  if (j.is_array() && array_ok && !j.empty()) {
    for (const ojson& x : j) {
      auto c = call_of(x, new_id);
      if (!c) return false;
      out.push_back(std::move(*c));
    }
    return true;
  }
  auto c = call_of(j, new_id);
  if (!c) return false;
  out.push_back(std::move(*c));
  return true;
}

// The end (one past the closing brace) of the JSON object starting at s[0] == '{', skipping
// strings with their escapes; npos when it does not close.
size_t object_end(std::string_view s) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

// hermes, from the first "<tool_call>" on: the calls, and the text between and after them
// (trimmed pieces joined by "\n"). false when a call does not parse.
bool hermes_section(std::string_view s, std::vector<ToolCall>& calls, std::string& after, std::string (*new_id)()) {
  while (!s.empty()) {
    const size_t open = s.find(kHermesOpen);
    const std::string_view outside = trim(s.substr(0, open));
    if (!outside.empty()) {
      if (!after.empty()) after += '\n';
      after += outside;
    }
    if (open == std::string_view::npos) break;
    s.remove_prefix(open + kHermesOpen.size());
    const size_t close = s.find(kHermesClose);  // none: the output ended inside the call
    if (!add_calls(s.substr(0, close), /*array_ok=*/true, calls, new_id)) return false;
    s = close == std::string_view::npos ? std::string_view() : s.substr(close + kHermesClose.size());
  }
  return !calls.empty();
}

// llama3-json: the output (after whitespace and an optional <|python_tag|>) is one or more
// objects joined by ';'. false unless all of it parses.
bool llama3_calls(std::string_view s, std::vector<ToolCall>& calls, std::string (*new_id)()) {
  s = trim(s);
  if (s.starts_with(kPythonTag)) s = trim(s.substr(kPythonTag.size()));
  while (true) {
    if (!s.starts_with('{')) return false;
    const size_t end = object_end(s);
    if (end == std::string_view::npos || !add_calls(s.substr(0, end), /*array_ok=*/false, calls, new_id)) return false;
    s = trim(s.substr(end));
    if (s.empty()) return true;
    if (s.front() != ';') return false;
    s = trim(s.substr(1));
  }
}

// mistral, from the first "[TOOL_CALLS]" on: each marker followed by a JSON list of calls (or
// one call object), or by name[ARGS]{...} (name[CALL_ID]id[ARGS]{...}). false unless all of
// it parses.
bool mistral_calls(std::string_view s, std::vector<ToolCall>& calls, std::string (*new_id)()) {
  while (!s.empty()) {
    if (!s.starts_with(kMistralCalls)) return false;
    s = trim(s.substr(kMistralCalls.size()));
    if (!s.starts_with('[') && !s.starts_with('{')) {  // name[ARGS]{...}
      const size_t args = s.find(kMistralArgs);
      if (args == std::string_view::npos) return false;
      std::string_view name = s.substr(0, args);
      if (const size_t id = name.find(kMistralCallId); id != std::string_view::npos) name = name.substr(0, id);
      name = trim(name);
      s = trim(s.substr(args + kMistralArgs.size()));
      if (name.empty() || !s.starts_with('{') || name.find_first_of("{}[]\"") != std::string_view::npos) return false;
      const size_t end = object_end(s);
      if (end == std::string_view::npos) return false;
      ojson call = ojson::object();
      call["name"] = std::string(name);
      try {
        call["arguments"] = parse_json_bounded<ojson>(s.substr(0, end), "tool call arguments");
      } catch (const Error&) {
        return false;
      }
      auto c = call_of(call, new_id);
      if (!c) return false;
      calls.push_back(std::move(*c));
      s = trim(s.substr(end));
      continue;
    }
    const size_t end = object_end(s);  // a list of calls, or one
    if (end == std::string_view::npos || !add_calls(s.substr(0, end), /*array_ok=*/true, calls, new_id)) return false;
    s = trim(s.substr(end));
  }
  return !calls.empty();
}

// The marker that starts the calls of a format whose calls may follow content, or "".
std::string_view call_marker(ToolCallFormat f) {
  return f == ToolCallFormat::Hermes ? kHermesOpen : f == ToolCallFormat::Mistral ? kMistralCalls : std::string_view();
}

// The length of the longest suffix of s that is a proper prefix of `marker`.
size_t partial_marker(std::string_view s, std::string_view marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n)
    if (marker.starts_with(s.substr(s.size() - n))) return n;
  return 0;
}

}  // namespace

namespace {
constexpr NameTable<ToolCallFormat, 4> kFormats = {{"none", ToolCallFormat::None},
                                                   {"hermes", ToolCallFormat::Hermes},
                                                   {"llama3-json", ToolCallFormat::Llama3Json},
                                                   {"mistral", ToolCallFormat::Mistral}};
}  // namespace

std::optional<ToolCallFormat> tool_call_format_named(std::string_view name) { return value_named(kFormats, name); }
std::vector<std::string> tool_call_format_names() { return names_of(kFormats); }
const char* tool_call_format_name(ToolCallFormat f) { return name_of(kFormats, f); }

ToolCallFormat tool_call_format_of_template(std::string_view source) {
  if (source.find(kHermesOpen) != std::string_view::npos) return ToolCallFormat::Hermes;
  if (source.find(kMistralCalls) != std::string_view::npos) return ToolCallFormat::Mistral;
  // Llama 3.1-3.3 tell the model: {"name": function name, "parameters": dictionary of
  // argument name and its value}; their templates also write <|python_tag|>.
  if (source.find(kPythonTag) != std::string_view::npos ||
      source.find("\"parameters\": dictionary of argument name") != std::string_view::npos)
    return ToolCallFormat::Llama3Json;
  return ToolCallFormat::None;
}

ParsedOutput parse_tool_calls(ToolCallFormat format, std::string_view text, std::string (*new_id)(),
                              size_t max_calls) {
  ParsedOutput out;
  bool ok = false;
  if (format == ToolCallFormat::Hermes) {
    const size_t open = text.find(kHermesOpen);
    std::string after;
    ok = open != std::string_view::npos && hermes_section(text.substr(open), out.calls, after, new_id);
    if (ok) {
      out.content = rtrim(text.substr(0, open));
      if (!after.empty()) out.content += (out.content.empty() ? "" : "\n") + after;
    }
  } else if (format == ToolCallFormat::Llama3Json) {
    ok = llama3_calls(text, out.calls, new_id);
  } else if (format == ToolCallFormat::Mistral) {
    const size_t open = text.find(kMistralCalls);
    ok = open != std::string_view::npos && mistral_calls(text.substr(open), out.calls, new_id);
    if (ok) out.content = rtrim(text.substr(0, open));
  }
  if (ok) {
    if (out.calls.size() > max_calls) out.calls.resize(max_calls);
    return out;
  }
  out.calls.clear();
  out.content = text;
  return out;
}

std::string ToolCallStream::feed(std::string_view delta) {
  held_ += delta;
  if (in_calls_) return {};
  if (format_ == ToolCallFormat::Llama3Json && !decided_) {
    const std::string_view t = trim(held_);
    if (t.empty() || (t.size() < kPythonTag.size() && kPythonTag.starts_with(t))) return {};
    decided_ = true;
    in_calls_ = t.starts_with('{') || t.starts_with(kPythonTag);
    if (in_calls_) return {};
  }
  const std::string_view marker = call_marker(format_);
  if (marker.empty()) {
    std::string out = std::move(held_);
    held_.clear();
    return out;
  }
  // hermes, mistral: send all but the trailing whitespace and a partial marker at the end;
  // from a whole marker on, hold everything, the whitespace before it included (sent if the
  // calls do not parse, dropped if they do).
  const size_t open = held_.find(marker);
  std::string_view sendable = std::string_view(held_).substr(0, open);
  if (open == std::string::npos) sendable.remove_suffix(partial_marker(sendable, marker));
  sendable = rtrim(sendable);
  std::string out(sendable);
  held_.erase(0, sendable.size());
  if (!out.empty()) sent_any_ = true;
  in_calls_ = open != std::string::npos;
  return out;
}

ParsedOutput ToolCallStream::finish() {
  ParsedOutput out;
  if (in_calls_) {
    std::string after;
    bool ok = false;
    if (format_ == ToolCallFormat::Hermes) {
      const std::string_view s = held_;
      ok = hermes_section(s.substr(s.find(kHermesOpen)), out.calls, after, new_id_);
      if (ok && !after.empty()) out.content = (sent_any_ ? "\n" : "") + after;
    } else if (format_ == ToolCallFormat::Mistral) {
      const std::string_view s = held_;
      ok = mistral_calls(s.substr(s.find(kMistralCalls)), out.calls, new_id_);
    } else {
      ok = llama3_calls(held_, out.calls, new_id_);
    }
    if (ok) {
      if (out.calls.size() > max_calls_) out.calls.resize(max_calls_);
      return out;
    }
    out.calls.clear();
    out.content.clear();
  }
  out.content = std::move(held_);
  held_.clear();
  return out;
}

nlohmann::json tool_call_json(const ToolCall& c) {
  return json{{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}};
}

}  // namespace tf::serve
