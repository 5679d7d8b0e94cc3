// tokenizer.json "added_tokens": tokens matched in the text before anything else runs, as HF
// `tokenizers` does. Matching is leftmost-longest over all tokens (HF uses Aho-Corasick with
// that match kind); a match honours the token's flags:
//   single_word  the match must not touch a word character (\w) on either side, else it is
//                ignored;
//   lstrip       whitespace to its left joins the token (and disappears from the text);
//   rstrip       whitespace to its right joins the token;
//   normalized   the token is matched in the normalized text, against its normalized form;
//                otherwise in the raw text, before normalization.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/tokenizer/id_limit.h"

namespace tf::tok {

struct JsonAt;
class Normalizer;

struct AddedToken {
  std::string content;
  // What decode() starts from: the normalized form of content when normalized (so that the
  // decoder can undo, e.g., a byte-level normalizer), else content, as `tokenizers` 0.23
  // decodes (older versions started from content).
  std::string decode_text;
  int32_t id = -1;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
};

// A byte trie over token strings for "longest token starting here" queries.
class TokenTrie {
 public:
  TokenTrie();
  void insert(std::string_view s, int32_t value);
  // The value of the longest inserted string that s[pos..] starts with, and its length;
  // {-1, 0} if none.
  std::pair<int32_t, size_t> longest_at(std::string_view s, size_t pos) const;
  bool empty() const { return n_strings_ == 0; }

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // (byte, node index)
    int32_t value = -1;
  };
  int32_t child(int32_t node, uint8_t b) const;
  std::vector<Node> nodes_;
  std::array<int32_t, 256> root_child_{};  // fast first step: most positions fail here
  size_t n_strings_ = 0;
};

class AddedVocabulary {
 public:
  AddedVocabulary() = default;
  // `normalizer` (may be null) gives the matching form of tokens with normalized = true.
  // Ids must be below ids.limit().
  AddedVocabulary(const nlohmann::json& added_tokens, const JsonAt& at, const Normalizer* normalizer,
                  IdLimit ids);

  // A piece of text: a run of ordinary text [begin, end) (id < 0) or an added token's id.
  struct Piece {
    size_t begin, end;
    int32_t id;
  };
  // Splits `s` on the tokens with normalized == `normalized_set`; empty text runs are dropped.
  void split(std::string_view s, bool normalized_set, std::vector<Piece>& out) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  std::vector<AddedToken> tokens_;
  TokenTrie raw_;         // tokens with normalized == false, by content
  TokenTrie normalized_;  // tokens with normalized == true, by normalized content
};

}  // namespace tf::tok
