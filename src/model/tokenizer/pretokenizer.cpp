#include "model/tokenizer/pretokenizer.h"

#include <algorithm>

#include "model/tokenizer/byte_level.h"
#include "model/tokenizer/json_field.h"
#include "model/tokenizer/regex.h"

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

Behavior parse_behavior(const json& j, const JsonAt& at) {
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
                                   parse_behavior(j, at), json_opt_bool(j, "invert", false, at));
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
  if (type == "Sequence") {
    const json& list = json_need(j, "pretokenizers", at);
    if (!list.is_array()) (at / "pretokenizers").fail("expected an array");
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (size_t i = 0; i < list.size(); ++i) {
      if (auto p = make_pre_tokenizer(list[i], (at / "pretokenizers")[i])) parts.push_back(std::move(p));
    }
    return std::make_unique<Sequence>(std::move(parts));
  }
  (at / "type").fail("pre_tokenizer type {:?} is not supported (expected Split, ByteLevel, Metaspace or "
                     "Sequence)", type);
}

}  // namespace tf::tok
