#include "model/tokenizer/normalizer.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/locid.h>
#include <unicode/unistr.h>

#include <vector>

#include "model/tokenizer/byte_level.h"
#include "model/tokenizer/char_class.h"
#include "model/tokenizer/json_field.h"
#include "model/tokenizer/regex.h"
#include "model/tokenizer/utf8.h"

namespace tf::tok {

namespace {

bool is_ascii(const std::string& s) {
  for (char c : s) {
    if (uint8_t(c) >= 0x80) return false;
  }
  return true;
}

// One of the four Unicode normalization forms, through ICU.
class UnicodeForm final : public Normalizer {
 public:
  enum class Form { Nfc, Nfd, Nfkc, Nfkd };
  UnicodeForm(Form form, const JsonAt& at) {
    UErrorCode st = U_ZERO_ERROR;
    switch (form) {
      case Form::Nfc: norm_ = icu::Normalizer2::getNFCInstance(st); break;
      case Form::Nfd: norm_ = icu::Normalizer2::getNFDInstance(st); break;
      case Form::Nfkc: norm_ = icu::Normalizer2::getNFKCInstance(st); break;
      case Form::Nfkd: norm_ = icu::Normalizer2::getNFKDInstance(st); break;
    }
    if (U_FAILURE(st) || !norm_) at.fail("ICU normalizer unavailable: {}", u_errorName(st));
  }

  void normalize(std::string& s) const override {
    if (is_ascii(s)) return;  // ASCII is invariant under all four forms
    UErrorCode st = U_ZERO_ERROR;
    const icu::StringPiece src(s.data(), int32_t(s.size()));
    if (norm_->isNormalizedUTF8(src, st) && U_SUCCESS(st)) return;
    st = U_ZERO_ERROR;
    std::string out;
    icu::StringByteSink<std::string> sink(&out, int32_t(s.size()));
    norm_->normalizeUTF8(0, src, sink, nullptr, st);
    TF_ASSERT(U_SUCCESS(st), "ICU normalizeUTF8 failed: {}", u_errorName(st));
    s = std::move(out);
  }

 private:
  const icu::Normalizer2* norm_ = nullptr;
};

// Prepend: puts `prepend` before every non-empty piece (SentencePiece's leading "▁").
class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& s) const override {
    if (!s.empty()) s.insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

// Replace: every match of `pattern` becomes `content`.
class Replace final : public Normalizer {
 public:
  Replace(Pattern pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void normalize(std::string& s) const override {
    const auto matches = pattern_.find_all(s);
    if (matches.empty()) return;
    std::string out;
    out.reserve(s.size() + matches.size() * content_.size());
    size_t prev = 0;
    for (auto [b, e] : matches) {
      out.append(s, prev, b - prev);
      out.append(content_);
      prev = e;
    }
    out.append(s, prev, std::string::npos);
    s = std::move(out);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

// ByteLevel normalizer: maps bytes to GPT-2's unicode characters.
class ByteLevelNorm final : public Normalizer {
 public:
  void normalize(std::string& s) const override {
    std::string out;
    bytes_to_unicode(s, out);
    s = std::move(out);
  }
};

// Lowercase: each character by its own full lowercase mapping, as Rust's char::to_lowercase
// (no context, so a final capital sigma becomes σ, not ς; İ becomes "i̇").
class Lowercase final : public Normalizer {
 public:
  void normalize(std::string& s) const override {
    if (is_ascii(s)) {
      for (char& c : s) c = (c >= 'A' && c <= 'Z') ? char(c - 'A' + 'a') : c;
      return;
    }
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
      const uint32_t cp = utf8_next(s, i);
      if (cp < 0x80) {
        out.push_back((cp >= 'A' && cp <= 'Z') ? char(cp - 'A' + 'a') : char(cp));
        continue;
      }
      // Per character: ICU's string mapping would apply the final-sigma context rule.
      icu::UnicodeString one = icu::UnicodeString(UChar32(cp));
      one.toLower(icu::Locale::getRoot());
      one.toUTF8String(out);
    }
    s = std::move(out);
  }
};

// Strip: removes leading and/or trailing whitespace (char::is_whitespace).
class Strip final : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& s) const override {
    size_t begin = 0, end = s.size();
    if (left_) {
      for (size_t i = 0; i < end;) {
        if (!is_whitespace(utf8_next(s, i))) break;
        begin = i;
      }
    }
    if (right_) {
      while (end > begin) {
        size_t start = end - 1;
        while (start > begin && (uint8_t(s[start]) & 0xC0) == 0x80) --start;
        size_t i = start;
        if (!is_whitespace(utf8_next(s, i))) break;
        end = start;
      }
    }
    s = s.substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

// StripAccents: drops combining marks (general category M*).
class StripAccents final : public Normalizer {
 public:
  void normalize(std::string& s) const override {
    if (is_ascii(s)) return;
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
      const size_t begin = i;
      if (!is_mark(utf8_next(s, i))) out.append(s, begin, i - begin);
    }
    s = std::move(out);
  }
};

class Sequence final : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  void normalize(std::string& s) const override {
    for (const auto& p : parts_) p->normalize(s);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const json& j, const JsonAt& at) {
  if (j.is_null()) return nullptr;
  const std::string type = json_type(j, at);
  if (type == "NFC") return std::make_unique<UnicodeForm>(UnicodeForm::Form::Nfc, at);
  if (type == "NFD") return std::make_unique<UnicodeForm>(UnicodeForm::Form::Nfd, at);
  if (type == "NFKC") return std::make_unique<UnicodeForm>(UnicodeForm::Form::Nfkc, at);
  if (type == "NFKD") return std::make_unique<UnicodeForm>(UnicodeForm::Form::Nfkd, at);
  if (type == "Prepend") return std::make_unique<Prepend>(json_need_string(j, "prepend", at));
  if (type == "Replace") {
    return std::make_unique<Replace>(Pattern::from_json(json_need(j, "pattern", at), at / "pattern"),
                                     json_need_string(j, "content", at));
  }
  if (type == "ByteLevel") return std::make_unique<ByteLevelNorm>();
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "Strip") {
    return std::make_unique<Strip>(json_opt_bool(j, "strip_left", true, at), json_opt_bool(j, "strip_right", true, at));
  }
  if (type == "StripAccents") return std::make_unique<StripAccents>();
  if (type == "Sequence") {
    const json& list = json_need(j, "normalizers", at);
    if (!list.is_array()) (at / "normalizers").fail("expected an array");
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (size_t i = 0; i < list.size(); ++i) {
      if (auto n = make_normalizer(list[i], (at / "normalizers")[i])) parts.push_back(std::move(n));
    }
    return std::make_unique<Sequence>(std::move(parts));
  }
  (at / "type").fail("normalizer type {:?} is not supported (expected NFC, NFD, NFKC, NFKD, Prepend, "
                     "Replace, Lowercase, Strip, StripAccents, ByteLevel or Sequence)", type);
}

}  // namespace tf::tok
