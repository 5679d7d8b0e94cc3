// tokenizer.json "pre_tokenizer": splits normalized text into the words BPE runs on.
// Supported: null, Split (String or Regex pattern, every behavior, invert), ByteLevel
// (add_prefix_space, use_regex with GPT-2's pattern; maps bytes to GPT-2's characters),
// Metaspace (replacement, prepend_scheme first/always/never, split), Digits
// (individual_digits), Punctuation (behavior), Whitespace, WhitespaceSplit, BertPreTokenizer,
// CharDelimiterSplit, Sequence. Character classes are Rust's, as HF uses them (char_class.h).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <memory>
#include <string>
#include <vector>

namespace tf::tok {

struct JsonAt;

struct PreToken {
  std::string text;
  bool at_start = false;  // begins at offset 0 of the original input (Metaspace "first")
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces each piece by its sub-pieces, dropping empty ones.
  virtual void pre_tokenize(std::vector<PreToken>& pieces) const = 0;
};

// nullptr for a JSON null (the whole piece is one word).
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j, const JsonAt& at);

// GPT-2's word pattern, which ByteLevel uses when use_regex is true.
inline constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace tf::tok
