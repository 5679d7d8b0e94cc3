#include "model/tokenizer/decoder.h"

#include "model/tokenizer/byte_level.h"
#include "model/tokenizer/json_field.h"
#include "model/tokenizer/regex.h"
#include "model/tokenizer/utf8.h"

namespace tf::tok {

namespace {

// Byte-level: every token's characters back to bytes, all concatenated into one string and
// made valid with U+FFFD (String::from_utf8_lossy).
class ByteLevel final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens) bytes += unicode_to_bytes(t);
    tokens.assign(1, utf8_lossy(bytes));
  }
  void token_bytes(std::string& token) const override { token = unicode_to_bytes(token); }
};

// Replace: in every token, matches of `pattern` become `content` (e.g. "▁" -> " ").
class Replace final : public Decoder {
 public:
  Replace(Pattern pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) token_bytes(t);
  }
  void token_bytes(std::string& t) const override {
    if (!pattern_.is_literal() && !utf8_is_valid(t)) return;  // a lone byte token: nothing to match
    const auto matches = pattern_.find_all(t);
    if (matches.empty()) return;
    std::string out;
    size_t prev = 0;
    for (auto [b, e] : matches) {
      out.append(t, prev, b - prev);
      out.append(content_);
      prev = e;
    }
    out.append(t, prev, std::string::npos);
    t = std::move(out);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

// The byte a "<0xNN>" token stands for, or -1.
int byte_token(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

// ByteFallback: each run of <0xNN> tokens becomes the string of its bytes if they are valid
// UTF-8, else one U+FFFD per byte (HF's rule, not from_utf8_lossy's).
class ByteFallback final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string run;
    size_t run_len = 0;
    auto flush = [&] {
      if (run_len == 0) return;
      if (utf8_is_valid(run)) {
        out.push_back(run);
      } else {
        for (size_t k = 0; k < run_len; ++k) out.emplace_back(kReplacementChar);
      }
      run.clear();
      run_len = 0;
    };
    for (std::string& t : tokens) {
      const int b = byte_token(t);
      if (b >= 0) {
        run.push_back(char(b));
        ++run_len;
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens = std::move(out);
  }
  void token_bytes(std::string& t) const override {
    const int b = byte_token(t);
    if (b >= 0) t.assign(1, char(b));
  }
};

class Fuse final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
  void token_bytes(std::string&) const override {}
};

// Strip: removes up to `start` leading and `stop` trailing `content` characters per token.
class Strip final : public Decoder {
 public:
  Strip(std::string content, size_t start, size_t stop) : content_(std::move(content)), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    const size_t n = content_.size();
    for (std::string& t : tokens) {
      size_t b = 0, e = t.size();
      for (size_t k = 0; k < start_ && e - b >= n && t.compare(b, n, content_) == 0; ++k) b += n;
      for (size_t k = 0; k < stop_ && e - b >= n && t.compare(e - n, n, content_) == 0; ++k) e -= n;
      t = t.substr(b, e - b);
    }
  }
  void token_bytes(std::string&) const override {}

 private:
  std::string content_;
  size_t start_, stop_;
};

// Every occurrence of `what` (non-empty) in t becomes `with`.
void replace_all(std::string& t, std::string_view what, std::string_view with) {
  std::string out;
  size_t prev = 0;
  for (size_t pos = t.find(what); pos != std::string::npos; pos = t.find(what, prev)) {
    out.append(t, prev, pos - prev);
    out.append(with);
    prev = pos + what.size();
  }
  out.append(t, prev, std::string::npos);
  t = std::move(out);
}

// Metaspace: the replacement character becomes a space, except that the first token loses
// its replacement characters entirely unless prepend_scheme is "never" (HF's rule).
class Metaspace final : public Decoder {
 public:
  Metaspace(std::string replacement, bool strip_first) : rep_(std::move(replacement)), strip_first_(strip_first) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) replace_all(tokens[i], rep_, i == 0 && strip_first_ ? "" : " ");
  }
  void token_bytes(std::string& t) const override { replace_all(t, rep_, " "); }

 private:
  std::string rep_;
  bool strip_first_;
};

// BPEDecoder: the end-of-word suffix becomes a space, except in the last token where it is
// dropped.
class BpeSuffix final : public Decoder {
 public:
  explicit BpeSuffix(std::string suffix) : suffix_(std::move(suffix)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    if (suffix_.empty()) return;
    for (size_t i = 0; i < tokens.size(); ++i) replace_all(tokens[i], suffix_, i + 1 == tokens.size() ? "" : " ");
  }
  void token_bytes(std::string& t) const override {
    if (!suffix_.empty()) replace_all(t, suffix_, " ");
  }

 private:
  std::string suffix_;
};

class Sequence final : public Decoder {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& p : parts_) p->decode_chain(tokens);
  }
  void token_bytes(std::string& t) const override {
    for (const auto& p : parts_) p->token_bytes(t);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

size_t need_count(const json& j, const char* key, const JsonAt& at) {
  const int64_t v = json_need_int(json_need(j, key, at), at / key);
  if (v < 0) (at / key).fail("expected a count >= 0");
  return size_t(v);
}

}  // namespace

std::unique_ptr<Decoder> make_decoder(const json& j, const JsonAt& at) {
  if (j.is_null()) return nullptr;
  const std::string type = json_type(j, at);
  if (type == "ByteLevel") return std::make_unique<ByteLevel>();
  if (type == "Replace") {
    return std::make_unique<Replace>(Pattern::from_json(json_need(j, "pattern", at), at / "pattern"),
                                     json_need_string(j, "content", at));
  }
  if (type == "ByteFallback") return std::make_unique<ByteFallback>();
  if (type == "Fuse") return std::make_unique<Fuse>();
  if (type == "BPEDecoder") {
    const json* suffix = json_find(j, "suffix");
    if (suffix && !suffix->is_string()) (at / "suffix").fail("expected a string");
    return std::make_unique<BpeSuffix>(suffix ? suffix->get<std::string>() : "</w>");
  }
  if (type == "Strip") {
    const std::string content = json_need_string(j, "content", at);
    size_t len = 0;
    for (size_t i = 0; i < content.size(); ++len) utf8_next(content, i);
    if (len != 1) (at / "content").fail("expected a single character");
    return std::make_unique<Strip>(content, need_count(j, "start", at), need_count(j, "stop", at));
  }
  if (type == "Metaspace") {
    std::string rep = "\xE2\x96\x81";
    if (const json* r = json_find(j, "replacement")) {
      if (!r->is_string() || r->get_ref<const std::string&>().empty()) {
        (at / "replacement").fail("expected a non-empty string");
      }
      rep = r->get<std::string>();
    }
    bool strip_first = json_opt_bool(j, "add_prefix_space", true, at);
    if (const json* ps = json_find(j, "prepend_scheme")) strip_first = !(ps->is_string() && *ps == "never");
    return std::make_unique<Metaspace>(std::move(rep), strip_first);
  }
  if (type == "Sequence") {
    const json& list = json_need(j, "decoders", at);
    if (!list.is_array()) (at / "decoders").fail("expected an array");
    std::vector<std::unique_ptr<Decoder>> parts;
    for (size_t i = 0; i < list.size(); ++i) {
      if (auto d = make_decoder(list[i], (at / "decoders")[i])) parts.push_back(std::move(d));
    }
    return std::make_unique<Sequence>(std::move(parts));
  }
  (at / "type").fail("decoder type {:?} is not supported (expected ByteLevel, Replace, ByteFallback, Fuse, "
                     "Strip, Metaspace, BPEDecoder or Sequence)", type);
}

}  // namespace tf::tok
