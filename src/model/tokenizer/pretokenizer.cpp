#include "model/tokenizer/pretokenizer.h"

#include <algorithm>

#include "model/tokenizer/byte_level.h"
#include "model/tokenizer/char_class.h"
#include "model/tokenizer/json_field.h"
#include "model/tokenizer/regex.h"
#include "model/tokenizer/utf8.h"

namespace tf::tok {

namespace {

// How matches of a Split pattern become pieces (HF's SplitDelimiterBehavior).
enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

struct Span {
  size_t begin, end;
  bool is_match;
};

// Splits one piece by `matches` as HF's NormalizedString::split does: first the piece is cut
// into alternating gap/match spans covering it all, then the behavior merges or drops spans,
// and empty spans are dropped.
void split_piece(const PreToken& piece, const std::vector<std::pair<size_t, size_t>>& matches,
                 Behavior behavior, bool invert, std::vector<PreToken>& out) {
  const std::string& s = piece.text;
  std::vector<Span> spans;
  size_t prev = 0;
  for (auto [b, e] : matches) {
    if (prev != b) spans.push_back({prev, b, invert});
    spans.push_back({b, e, !invert});
    prev = e;
  }
  if (prev != s.size()) spans.push_back({prev, s.size(), invert});

  std::vector<Span> merged;  // is_match here means "remove"
  switch (behavior) {
    case Behavior::Isolated:
      for (Span sp : spans) merged.push_back({sp.begin, sp.end, false});
      break;
    case Behavior::Removed:
      merged = spans;
      break;
    case Behavior::Contiguous: {
      bool prev_match = false;
      for (Span sp : spans) {
        if (sp.is_match == prev_match && !merged.empty()) {
          merged.back().end = sp.end;
        } else {
          merged.push_back({sp.begin, sp.end, false});
        }
        prev_match = sp.is_match;
      }
      break;
    }
    case Behavior::MergedWithPrevious: {
      bool prev_match = false;
      for (Span sp : spans) {
        if (sp.is_match && !prev_match && !merged.empty()) {
          merged.back().end = sp.end;
        } else {
          merged.push_back({sp.begin, sp.end, false});
        }
        prev_match = sp.is_match;
      }
      break;
    }
    case Behavior::MergedWithNext: {
      bool prev_match = false;
      for (size_t i = spans.size(); i-- > 0;) {
        const Span sp = spans[i];
        if (sp.is_match && !prev_match && !merged.empty()) {
          merged.back().begin = sp.begin;
        } else {
          merged.push_back({sp.begin, sp.end, false});
        }
        prev_match = sp.is_match;
      }
      std::reverse(merged.begin(), merged.end());
      break;
    }
  }
  for (Span sp : merged) {
    if (sp.is_match || sp.end == sp.begin) continue;
    out.push_back({s.substr(sp.begin, sp.end - sp.begin), piece.at_start && sp.begin == 0});
  }
}

class Split final : public PreTokenizer {
 public:
  Split(Pattern pattern, Behavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}

  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    std::vector<PreToken> out;
    out.reserve(pieces.size() * 4);
    for (const PreToken& p : pieces) split_piece(p, pattern_.find_all(p.text), behavior_, invert_, out);
    pieces = std::move(out);
  }

 private:
  Pattern pattern_;
  Behavior behavior_;
  bool invert_;
};

using Matches = std::vector<std::pair<size_t, size_t>>;

// Every character of `s` for which pred(code point) holds, each its own match (HF's split on
// a char predicate: Contiguous is what joins neighbouring matches).
template <typename Pred>
Matches char_matches(const std::string& s, Pred pred) {
  Matches out;
  for (size_t i = 0; i < s.size();) {
    const size_t begin = i;
    if (pred(utf8_next(s, i))) out.emplace_back(begin, i);
  }
  return out;
}

// Splits every piece on single characters chosen by a predicate: Digits, Punctuation,
// WhitespaceSplit, CharDelimiterSplit.
class CharSplit final : public PreTokenizer {
 public:
  using Pred = bool (*)(uint32_t);
  CharSplit(Pred pred, Behavior behavior) : pred_(pred), behavior_(behavior) {}

  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    std::vector<PreToken> out;
    out.reserve(pieces.size() * 2);
    for (const PreToken& p : pieces) split_piece(p, char_matches(p.text, pred_), behavior_, false, out);
    pieces = std::move(out);
  }

 private:
  Pred pred_;
  Behavior behavior_;
};

// CharDelimiterSplit: one given character is the delimiter, removed.
class DelimiterSplit final : public PreTokenizer {
 public:
  explicit DelimiterSplit(uint32_t delimiter) : delimiter_(delimiter) {}

  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    std::vector<PreToken> out;
    for (const PreToken& p : pieces) {
      split_piece(p, char_matches(p.text, [this](uint32_t c) { return c == delimiter_; }), Behavior::Removed, false, out);
    }
    pieces = std::move(out);
  }

 private:
  uint32_t delimiter_;
};

// Whitespace: the pieces are the matches of \w+|[^\w\s]+ (the regex crate's Unicode \w and
// \s); the whitespace between them is dropped. A regex engine is not needed for that: the
// matches are the maximal runs of word characters and of characters that are neither word
// nor whitespace, found in one pass over the code points.
class Whitespace final : public PreTokenizer {
 public:
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    std::vector<PreToken> out;
    for (const PreToken& p : pieces) {
      enum Kind { Space, Word, Other };
      Matches runs;
      Kind run_kind = Space;
      for (size_t i = 0; i < p.text.size();) {
        const size_t begin = i;
        const uint32_t c = utf8_next(p.text, i);
        const Kind k = is_word(c) ? Word : is_whitespace(c) ? Space : Other;
        if (k != Space && k == run_kind) {
          runs.back().second = i;
        } else if (k != Space) {
          runs.emplace_back(begin, i);
        }
        run_kind = k;
      }
      split_piece(p, runs, Behavior::Removed, /*invert=*/true, out);
    }
    pieces = std::move(out);
  }
};

// BertPreTokenizer: whitespace removed, then every punctuation character isolated.
class Bert final : public PreTokenizer {
 public:
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    whitespace_.pre_tokenize(pieces);
    punctuation_.pre_tokenize(pieces);
  }

 private:
  CharSplit whitespace_{is_whitespace, Behavior::Removed};
  CharSplit punctuation_{is_punctuation, Behavior::Isolated};
};

class ByteLevel final : public PreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, bool use_regex, const JsonAt& at) : add_prefix_space_(add_prefix_space) {
    if (use_regex) regex_ = std::make_unique<Regex>(kGpt2Pattern, at.file + ": " + at.field);
  }

  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    std::vector<PreToken> split;
    split.reserve(pieces.size());
    for (PreToken& p : pieces) {
      if (add_prefix_space_ && (p.text.empty() || p.text[0] != ' ')) p.text.insert(0, " ");
      if (regex_) {
        split_piece(p, regex_->find_all(p.text), Behavior::Isolated, false, split);
      } else if (!p.text.empty()) {
        split.push_back(std::move(p));
      }
    }
    for (PreToken& p : split) {
      std::string mapped;
      mapped.reserve(p.text.size() + p.text.size() / 2);
      bytes_to_unicode(p.text, mapped);
      p.text = std::move(mapped);
    }
    pieces = std::move(split);
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

class Metaspace final : public PreTokenizer {
 public:
  enum class Prepend { Always, First, Never };
  Metaspace(std::string replacement, Prepend prepend, bool split)
      : replacement_(std::move(replacement)), prepend_(prepend), split_(split) {}

  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    std::vector<PreToken> out;
    for (const PreToken& p : pieces) {
      PreToken q{replace_spaces(p.text), p.at_start};
      const bool starts_with_rep = q.text.compare(0, replacement_.size(), replacement_) == 0;
      if (!starts_with_rep && (prepend_ == Prepend::Always || (prepend_ == Prepend::First && q.at_start))) {
        q.text.insert(0, replacement_);
      }
      if (!split_) {
        if (!q.text.empty()) out.push_back(std::move(q));
        continue;
      }
      std::vector<std::pair<size_t, size_t>> matches;
      for (size_t pos = q.text.find(replacement_); pos != std::string::npos;
           pos = q.text.find(replacement_, pos + replacement_.size())) {
        matches.emplace_back(pos, pos + replacement_.size());
      }
      split_piece(q, matches, Behavior::MergedWithNext, false, out);
    }
    pieces = std::move(out);
  }

 private:
  std::string replace_spaces(const std::string& s) const {
    std::string out;
    out.reserve(s.size() * 2);
    for (char c : s) {
      if (c == ' ') {
        out.append(replacement_);
      } else {
        out.push_back(c);
      }
    }
    return out;
  }

  std::string replacement_;
  Prepend prepend_;
  bool split_;
};

class Sequence final : public PreTokenizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    for (const auto& p : parts_) p->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

// `behavior` of Split (required) and Punctuation (Isolated when absent).
Behavior parse_behavior(const json& j, const JsonAt& at, bool required) {
  if (!required && !json_find(j, "behavior")) return Behavior::Isolated;
  const std::string b = json_need_string(j, "behavior", at);
  if (b == "Removed") return Behavior::Removed;
  if (b == "Isolated") return Behavior::Isolated;
  if (b == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::MergedWithNext;
  if (b == "Contiguous") return Behavior::Contiguous;
  (at / "behavior").fail("unknown split behavior {:?}", b);
}

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const json& j, const JsonAt& at) {
  if (j.is_null()) return nullptr;
  const std::string type = json_type(j, at);
  if (type == "Split") {
    return std::make_unique<Split>(Pattern::from_json(json_need(j, "pattern", at), at / "pattern"),
                                   parse_behavior(j, at, /*required=*/true),
                                   json_opt_bool(j, "invert", false, at));
  }
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevel>(json_opt_bool(j, "add_prefix_space", true, at),
                                       json_opt_bool(j, "use_regex", true, at), at);
  }
  if (type == "Metaspace") {
    std::string replacement = "\xE2\x96\x81";  // "▁"
    if (const json* r = json_find(j, "replacement")) {
      if (!r->is_string() || r->get_ref<const std::string&>().empty()) {
        (at / "replacement").fail("expected a non-empty string");
      }
      replacement = r->get<std::string>();
    }
    // Older files have add_prefix_space instead of prepend_scheme.
    Metaspace::Prepend prepend = json_opt_bool(j, "add_prefix_space", true, at) ? Metaspace::Prepend::Always
                                                                                : Metaspace::Prepend::Never;
    if (const json* ps = json_find(j, "prepend_scheme")) {
      const std::string s = ps->is_string() ? ps->get<std::string>() : "";
      if (s == "always") {
        prepend = Metaspace::Prepend::Always;
      } else if (s == "first") {
        prepend = Metaspace::Prepend::First;
      } else if (s == "never") {
        prepend = Metaspace::Prepend::Never;
      } else {
        (at / "prepend_scheme").fail("expected \"always\", \"first\" or \"never\"");
      }
    }
    return std::make_unique<Metaspace>(std::move(replacement), prepend, json_opt_bool(j, "split", true, at));
  }
  if (type == "Digits") {
    const bool individual = json_opt_bool(j, "individual_digits", false, at);
    return std::make_unique<CharSplit>(is_numeric, individual ? Behavior::Isolated : Behavior::Contiguous);
  }
  if (type == "Punctuation") return std::make_unique<CharSplit>(is_punctuation, parse_behavior(j, at, /*required=*/false));
  if (type == "WhitespaceSplit") return std::make_unique<CharSplit>(is_whitespace, Behavior::Removed);
  if (type == "Whitespace") return std::make_unique<Whitespace>();
  if (type == "BertPreTokenizer") return std::make_unique<Bert>();
  if (type == "CharDelimiterSplit") {
    const std::string d = json_need_string(j, "delimiter", at);
    size_t end = 0;
    const uint32_t c = d.empty() ? 0 : utf8_next(d, end);
    if (d.empty() || end != d.size()) (at / "delimiter").fail("expected a single character, got {:?}", d);
    return std::make_unique<DelimiterSplit>(c);
  }
  if (type == "Sequence") {
    const json& list = json_need(j, "pretokenizers", at);
    if (!list.is_array()) (at / "pretokenizers").fail("expected an array");
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (size_t i = 0; i < list.size(); ++i) {
      if (auto p = make_pre_tokenizer(list[i], (at / "pretokenizers")[i])) parts.push_back(std::move(p));
    }
    return std::make_unique<Sequence>(std::move(parts));
  }
  (at / "type").fail("pre_tokenizer type {:?} is not supported (expected Split, ByteLevel, Metaspace, Digits, "
                     "Punctuation, Whitespace, WhitespaceSplit, BertPreTokenizer, CharDelimiterSplit or Sequence)",
                     type);
}

}  // namespace tf::tok
