// Reasoning in a chat model's output: what a thinking model (Qwen3, QwQ, DeepSeek-R1) writes
// between <think> and </think> before its answer, taken out of `content` into
// `reasoning_content`, the field llama.cpp's server and the DeepSeek API return it in.
//
// The output is reasoning from its start when it begins with <think> (after whitespace), or
// when the prompt leaves a <think> block open (templates that open it for the model), up to
// the first </think>; when </think> never comes (the output was cut off while thinking), all of
// it. What follows </think> is content, without the whitespace right after the tag. A prompt
// that closes the block itself (Qwen3 with enable_thinking false ends in "<think>\n\n</think>\n\n")
// and an output that does not begin with <think> leave the whole output content.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tf::serve {

enum class ReasoningFormat : uint8_t { None, Think };

// "none", "think" (also "qwen3", "deepseek_r1", vLLM's names); nullopt for another name.
std::optional<ReasoningFormat> reasoning_format_named(std::string_view name);
std::vector<std::string> reasoning_format_names();  // those names
const char* reasoning_format_name(ReasoningFormat f);
// Think when a chat template's source writes or reads </think> (Qwen3's and DeepSeek-R1's
// split earlier turns' reasoning off with it), else None.
ReasoningFormat reasoning_format_of_template(std::string_view source);
// Whether a rendered prompt ends inside a <think> block: its last "<think>" comes after its
// last "</think>" and only whitespace follows it.
bool prompt_opens_reasoning(std::string_view prompt);

struct ReasoningSplit {
  std::string reasoning;
  std::string content;
};

// The whole output; `open`: the prompt left a <think> block open.
ReasoningSplit split_reasoning(std::string_view text, bool open);

// How many of an output's tokens are reasoning (usage's reasoning_tokens): those that begin
// before its content, given each token's bytes in order and the output text (its content
// being split_reasoning's, a suffix of the text). 0 when the output has no reasoning.
int32_t reasoning_token_count(std::string_view text, bool open, std::span<const std::string> token_bytes);

// Streaming: each piece of output in, what can be sent of each part out. Text that may be
// the start of a tag is held until it is known (a prefix of "<think>" after leading
// whitespace at the start; a suffix that may begin "</think>" in the reasoning; whitespace
// right after "</think>"). The pieces joined equal split_reasoning of the joined text.
class ReasoningStream {
 public:
  explicit ReasoningStream(bool open) : state_(open ? State::Reasoning : State::Start) {}
  ReasoningSplit feed(std::string_view delta);
  // At the end of the output: what is still held.
  ReasoningSplit finish();

 private:
  enum class State : uint8_t {
    Start,      // nothing but whitespace seen, or a prefix of "<think>" after it
    Reasoning,  // inside the block
    AfterEnd,   // "</think>" seen, only whitespace since
    Content,    // the rest is content
  };
  State state_;
  std::string held_;
};

}  // namespace tf::serve
