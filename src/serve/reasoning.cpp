// Reasoning blocks in chat output; see reasoning.h.
#include "serve/reasoning.h"

#include <algorithm>

#include "serve/name_table.h"

namespace tf::serve {
namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

size_t skip_space(std::string_view s, size_t i = 0) {
  while (i < s.size() && is_space(s[i])) ++i;
  return i;
}

// The length of the longest suffix of `s` that is a proper prefix of `tag`.
size_t partial_tag_suffix(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  return 0;
}

}  // namespace

namespace {
// vLLM's names for the same convention too (QwQ takes deepseek_r1 there).
constexpr NameTable<ReasoningFormat, 4> kFormats = {{"none", ReasoningFormat::None},
                                                    {"think", ReasoningFormat::Think},
                                                    {"qwen3", ReasoningFormat::Think},
                                                    {"deepseek_r1", ReasoningFormat::Think}};
}  // namespace

std::optional<ReasoningFormat> reasoning_format_named(std::string_view name) { return value_named(kFormats, name); }
std::vector<std::string> reasoning_format_names() { return names_of(kFormats); }
const char* reasoning_format_name(ReasoningFormat f) { return name_of(kFormats, f); }

ReasoningFormat reasoning_format_of_template(std::string_view source) {
  return source.find(kClose) != std::string_view::npos ? ReasoningFormat::Think : ReasoningFormat::None;
}

bool prompt_opens_reasoning(std::string_view prompt) {
  const size_t open = prompt.rfind(kOpen);
  if (open == std::string_view::npos) return false;
  const size_t close = prompt.rfind(kClose);
  if (close != std::string_view::npos && close > open) return false;
  return skip_space(prompt, open + kOpen.size()) == prompt.size();
}

ReasoningSplit split_reasoning(std::string_view text, bool open) {
  size_t begin = 0;
  if (!open) {
    const size_t first = skip_space(text);
    if (!text.substr(first).starts_with(kOpen)) return {.reasoning = "", .content = std::string(text)};
    begin = first + kOpen.size();
  }
  const size_t end = text.find(kClose, begin);
  if (end == std::string_view::npos) return {.reasoning = std::string(text.substr(begin)), .content = ""};
  return {.reasoning = std::string(text.substr(begin, end - begin)),
          .content = std::string(text.substr(skip_space(text, end + kClose.size())))};
}

int32_t reasoning_token_count(std::string_view text, bool open, std::span<const std::string> token_bytes) {
  size_t begin = 0;
  if (!open) {
    const size_t first = skip_space(text);
    if (!text.substr(first).starts_with(kOpen)) return 0;
    begin = first + kOpen.size();
  }
  const size_t end = text.find(kClose, begin);
  const size_t content = end == std::string_view::npos ? text.size() : skip_space(text, end + kClose.size());
  int32_t n = 0;
  size_t at = 0;  // where the next token begins
  for (const std::string& t : token_bytes) {
    if (at >= content) break;
    ++n;
    at += t.size();
  }
  return n;
}

ReasoningSplit ReasoningStream::feed(std::string_view delta) {
  held_ += delta;
  ReasoningSplit out;
  for (;;) {
    switch (state_) {
      case State::Start: {
        const size_t first = skip_space(held_);
        const std::string_view rest = std::string_view(held_).substr(first);
        if (rest.starts_with(kOpen)) {
          held_.erase(0, first + kOpen.size());
          state_ = State::Reasoning;
          continue;
        }
        if (kOpen.starts_with(rest)) return out;  // whitespace, or whitespace and the tag's start
        state_ = State::Content;
        continue;
      }
      case State::Reasoning: {
        const size_t end = held_.find(kClose);
        if (end != std::string::npos) {
          out.reasoning += held_.substr(0, end);
          held_.erase(0, end + kClose.size());
          state_ = State::AfterEnd;
          continue;
        }
        const size_t keep = partial_tag_suffix(held_, kClose);
        out.reasoning += held_.substr(0, held_.size() - keep);
        held_.erase(0, held_.size() - keep);
        return out;
      }
      case State::AfterEnd:
        held_.erase(0, skip_space(held_));
        if (held_.empty()) return out;
        state_ = State::Content;
        continue;
      case State::Content:
        out.content += held_;
        held_.clear();
        return out;
    }
  }
}

ReasoningSplit ReasoningStream::finish() {
  ReasoningSplit out;
  if (state_ == State::Reasoning) out.reasoning = std::move(held_);
  else out.content = std::move(held_);  // Start: whitespace or a tag's start that never finished
  held_.clear();
  return out;
}

}  // namespace tf::serve
