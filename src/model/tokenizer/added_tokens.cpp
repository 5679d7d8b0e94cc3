#include "model/tokenizer/added_tokens.h"

#include "model/tokenizer/char_class.h"
#include "model/tokenizer/json_field.h"
#include "model/tokenizer/normalizer.h"
#include "model/tokenizer/utf8.h"

namespace tf::tok {

// ---- TokenTrie -------------------------------------------------------------------------

TokenTrie::TokenTrie() {
  nodes_.emplace_back();
  root_child_.fill(-1);
}

int32_t TokenTrie::child(int32_t node, uint8_t b) const {
  if (node == 0) return root_child_[b];
  for (auto [c, n] : nodes_[node].children) {
    if (c == b) return n;
  }
  return -1;
}

void TokenTrie::insert(std::string_view s, int32_t value) {
  int32_t node = 0;
  for (char ch : s) {
    const auto b = uint8_t(ch);
    int32_t next = child(node, b);
    if (next < 0) {
      next = int32_t(nodes_.size());
      nodes_.emplace_back();
      if (node == 0) root_child_[b] = next;
      nodes_[node].children.emplace_back(b, next);
    }
    node = next;
  }
  if (nodes_[node].value < 0) ++n_strings_;
  nodes_[node].value = value;
}

std::pair<int32_t, size_t> TokenTrie::longest_at(std::string_view s, size_t pos) const {
  std::pair<int32_t, size_t> best{-1, 0};
  int32_t node = 0;
  for (size_t i = pos; i < s.size(); ++i) {
    node = child(node, uint8_t(s[i]));
    if (node < 0) break;
    if (nodes_[node].value >= 0) best = {nodes_[node].value, i + 1 - pos};
  }
  return best;
}

// ---- AddedVocabulary -------------------------------------------------------------------

namespace {

// The code point that ends s[0..end) (s valid UTF-8, end > 0 on a character boundary).
uint32_t cp_before(std::string_view s, size_t end) {
  size_t b = end - 1;
  while (b > 0 && (uint8_t(s[b]) & 0xC0) == 0x80) --b;
  return utf8_next(s, b);
}

}  // namespace

AddedVocabulary::AddedVocabulary(const json& added, const JsonAt& at, const Normalizer* normalizer,
                                 IdLimit ids) {
  if (added.is_null()) return;
  if (!added.is_array()) at.fail("expected an array");
  for (size_t i = 0; i < added.size(); ++i) {
    const json& t = added[i];
    const JsonAt ti = at[i];
    AddedToken tok;
    tok.id = json_need_id(json_need(t, "id", ti), ti / "id", ids);
    tok.content = json_need_string(t, "content", ti);
    tok.special = json_opt_bool(t, "special", false, ti);
    tok.single_word = json_opt_bool(t, "single_word", false, ti);
    tok.lstrip = json_opt_bool(t, "lstrip", false, ti);
    tok.rstrip = json_opt_bool(t, "rstrip", false, ti);
    tok.normalized = json_opt_bool(t, "normalized", !tok.special, ti);
    if (tok.content.empty()) continue;  // HF ignores empty added tokens
    const auto index = int32_t(tokens_.size());
    tok.decode_text = tok.content;
    if (tok.normalized) {
      if (normalizer) normalizer->normalize(tok.decode_text);
      if (!tok.decode_text.empty()) normalized_.insert(tok.decode_text, index);
    } else {
      raw_.insert(tok.content, index);
    }
    tokens_.push_back(std::move(tok));
  }
}

// HF's AddedVocabulary::find_matches over one trie.
void AddedVocabulary::split(std::string_view s, bool normalized_set, std::vector<Piece>& out) const {
  const TokenTrie& trie = normalized_set ? normalized_ : raw_;
  size_t text_begin = 0;  // start of the pending run of ordinary text
  size_t pos = 0;
  if (!trie.empty()) {
    while (pos < s.size()) {
      const auto [index, len] = trie.longest_at(s, pos);
      if (index < 0) {
        ++pos;
        continue;
      }
      const AddedToken& tok = tokens_[size_t(index)];
      size_t begin = pos, end = pos + len;
      pos = end;  // the search resumes after the match whether or not it is kept
      if (tok.single_word) {
        const bool word_before = begin > 0 && is_word(cp_before(s, begin));
        size_t k = end;
        const bool word_after = end < s.size() && is_word(utf8_next(s, k));
        if (word_before || word_after) continue;
      }
      if (tok.lstrip) {
        while (begin > text_begin && is_whitespace(cp_before(s, begin))) {
          do --begin;
          while ((uint8_t(s[begin]) & 0xC0) == 0x80);
        }
      }
      if (tok.rstrip) {
        while (end < s.size()) {
          size_t k = end;
          if (!is_whitespace(utf8_next(s, k))) break;
          end = k;
        }
        pos = end;
      }
      if (begin > text_begin) out.push_back({text_begin, begin, -1});
      out.push_back({begin, end, tok.id});
      text_begin = end;
    }
  }
  if (s.size() > text_begin) out.push_back({text_begin, s.size(), -1});
}

}  // namespace tf::tok
