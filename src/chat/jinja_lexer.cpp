#include "chat/jinja_lexer.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "chat/jinja_value.h"
#include "core/error.h"

namespace tf::jinja {

void fail_at(int line, const std::string& what) { tf::fail("chat template: line {}: {}", line, what); }

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }
bool is_ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// Python's str.rstrip(): trailing Unicode whitespace.
std::string rstrip_py(const std::string& s) {
  std::u32string u = utf8_decode(s);
  while (!u.empty() && is_py_space(u.back())) u.pop_back();
  return utf8_encode(u);
}

// Python string-literal escapes (jinja2 decodes literals with "unicode-escape").
std::string unescape(std::string_view s, int line) {
  std::string out;
  auto hex = [&](size_t i, size_t n) -> uint32_t {
    if (i + n > s.size()) fail_at(line, "truncated \\x, \\u or \\U escape in a string");
    uint32_t v = 0;
    for (size_t k = i; k < i + n; ++k) {
      const char c = s[k];
      const int d = is_digit(c) ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                                          : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
      if (d < 0) fail_at(line, "bad \\x, \\u or \\U escape in a string");
      v = v * 16 + uint32_t(d);
    }
    return v;
  };
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    const char c = s[++i];
    switch (c) {
      case '\n': break;  // a line continuation
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'v': out += '\v'; break;
      case 'x': out += utf8_encode(std::u32string(1, char32_t(hex(i + 1, 2)))); i += 2; break;
      case 'u': out += utf8_encode(std::u32string(1, char32_t(hex(i + 1, 4)))); i += 4; break;
      case 'U': out += utf8_encode(std::u32string(1, char32_t(hex(i + 1, 8)))); i += 8; break;
      case 'N': fail_at(line, "\\N{...} escapes are not supported");
      default:
        if (c >= '0' && c <= '7') {
          uint32_t v = 0;
          size_t k = i;
          for (; k < s.size() && k < i + 3 && s[k] >= '0' && s[k] <= '7'; ++k) v = v * 8 + uint32_t(s[k] - '0');
          out += utf8_encode(std::u32string(1, char32_t(v)));
          i = k - 1;
        } else {  // an unknown escape stays as written
          out += '\\';
          out += c;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) {
    // Newlines: "\r\n" and "\r" read as "\n"; one trailing newline is dropped.
    src_.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_ += source[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
  }

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      const size_t tag = find_tag(pos_);
      if (tag == std::string::npos) {
        emit_text(src_.substr(pos_));
        break;
      }
      const char kind = src_[tag + 1];  // '{', '%' or '#'
      size_t after = tag + 2;
      char sign = 0;
      if (after < src_.size() && (src_[after] == '-' || src_[after] == '+')) sign = src_[after++];
      size_t raw_end = 0;
      if (kind == '%' && raw_begin(after, raw_end)) {
        emit_text(control_text(src_.substr(pos_, tag - pos_), sign, /*is_block=*/true));
        pos_ = raw_end;
        lex_raw();
        continue;
      }
      emit_text(control_text(src_.substr(pos_, tag - pos_), sign, /*is_block=*/kind != '{'));
      pos_ = after;
      if (kind == '#') lex_comment();
      else lex_tag(kind == '%');
    }
    tokens_.push_back({Tok::End, "", line_});
    return std::move(tokens_);
  }

 private:
  size_t find_tag(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#'))
        return i;
    }
    return std::string::npos;
  }

  // The text before a tag, after the tag's whitespace control; advances the line count over
  // the text as it was.
  std::string control_text(std::string text, char sign, bool is_block) {
    const int lines = int(std::count(text.begin(), text.end(), '\n'));
    if (sign == '-') {
      text = rstrip_py(text);
    } else if (sign != '+' && is_block) {
      // lstrip_blocks: only whitespace between the line start and the tag.
      const size_t line_start = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
      if (line_start > 0 || line_starting_) {
        const std::u32string rest = utf8_decode(std::string_view(text).substr(line_start));
        if (!rest.empty() && std::all_of(rest.begin(), rest.end(), is_py_space)) text.resize(line_start);
      }
    }
    pending_lines_ = lines;
    return text;
  }

  void emit_text(std::string text) {
    if (!text.empty()) tokens_.push_back({Tok::Text, std::move(text), line_});
    line_ += pending_lines_;
    pending_lines_ = 0;
  }

  // After a tag's end: -%} eats all whitespace, %} one newline (trim_blocks), +%} nothing.
  void after_tag_end(char end_sign, bool trim_newline) {
    if (end_sign == '-') {
      while (pos_ < src_.size()) {
        const size_t before = pos_;
        const char32_t c = next_char();
        if (!is_py_space(c)) {
          pos_ = before;
          break;
        }
        if (c == '\n') ++line_;
      }
    } else if (end_sign != '+' && trim_newline && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
      ++line_;
    }
    line_starting_ = src_[pos_ - 1] == '\n';
  }

  char32_t next_char() {
    const auto b = uint8_t(src_[pos_]);
    const size_t len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : 4;
    const std::u32string u = utf8_decode(std::string_view(src_).substr(pos_, len));
    pos_ = std::min(src_.size(), pos_ + len);
    return u.empty() ? U'\uFFFD' : u[0];
  }

  void lex_comment() {
    const int start_line = line_;
    const size_t body = pos_;
    const size_t close = src_.find("#}", pos_);
    if (close == std::string::npos) fail_at(start_line, "missing end of comment tag");
    char sign = 0;
    if (close > body && (src_[close - 1] == '-' || src_[close - 1] == '+')) sign = src_[close - 1];
    line_ += int(std::count(src_.begin() + long(body), src_.begin() + long(close), '\n'));
    pos_ = close + 2;
    after_tag_end(sign, /*trim_newline=*/true);
  }

  // {% raw %} at `from` (just after "{%" and its sign); on success `end` is past its "%}".
  bool raw_begin(size_t from, size_t& end) const {
    size_t i = skip_ascii_space(from);
    if (src_.compare(i, 3, "raw") != 0 || (i + 3 < src_.size() && is_name_char(src_[i + 3])))
      return false;
    i = skip_ascii_space(i + 3);
    if (src_.compare(i, 3, "-%}") == 0) {
      end = skip_ascii_space(i + 3);
      return true;
    }
    if (src_.compare(i, 2, "%}") == 0) {
      end = i + 2;
      return true;
    }
    return false;
  }

  size_t skip_ascii_space(size_t i) const {
    while (i < src_.size() && is_ascii_space(src_[i])) ++i;
    return i;
  }

  void lex_raw() {
    const int start_line = line_;
    for (size_t tag = find_tag(pos_); tag != std::string::npos; tag = find_tag(tag + 1)) {
      if (src_[tag + 1] != '%') continue;
      size_t i = tag + 2;
      char sign = 0;
      if (i < src_.size() && (src_[i] == '-' || src_[i] == '+')) sign = src_[i++];
      i = skip_ascii_space(i);
      if (src_.compare(i, 6, "endraw") != 0) continue;
      i = skip_ascii_space(i + 6);
      char end_sign = 0;
      if (i < src_.size() && (src_[i] == '-' || src_[i] == '+')) end_sign = src_[i++];
      if (src_.compare(i, 2, "%}") != 0) continue;
      emit_text(control_text(src_.substr(pos_, tag - pos_), sign, /*is_block=*/true));
      pos_ = i + 2;
      after_tag_end(end_sign, /*trim_newline=*/true);
      return;
    }
    fail_at(start_line, "missing {% endraw %}");
  }

  // The tokens of one {{ ... }} or {% ... %}, up to and including its end.
  void lex_tag(bool is_block) {
    const int start_line = line_;
    tokens_.push_back({is_block ? Tok::BlockBegin : Tok::VarBegin, "", line_});
    std::vector<char> open;  // closing brackets still expected
    while (true) {
      if (pos_ >= src_.size())
        fail_at(start_line, fmt::format("unexpected end of template: '{}' is never closed",
                                        is_block ? "{%" : "{{"));
      if (open.empty() && lex_tag_end(is_block)) return;
      const char c = src_[pos_];
      if (is_ascii_space(c)) {
        if (c == '\n') ++line_;
        ++pos_;
      } else if (is_digit(c)) {
        lex_number();
      } else if (is_name_start(c)) {
        size_t end = pos_;
        while (end < src_.size() && is_name_char(src_[end])) ++end;
        tokens_.push_back({Tok::Name, src_.substr(pos_, end - pos_), line_});
        pos_ = end;
      } else if (c == '\'' || c == '"') {
        lex_string();
      } else {
        lex_operator(open);
      }
    }
  }

  bool lex_tag_end(bool is_block) {
    const char* close = is_block ? "%}" : "}}";
    char sign = 0;
    if (src_.compare(pos_, 2, close) == 0) {
      pos_ += 2;
    } else if ((src_[pos_] == '-' || (is_block && src_[pos_] == '+')) &&
               src_.compare(pos_ + 1, 2, close) == 0) {
      sign = src_[pos_];
      pos_ += 3;
    } else {
      return false;
    }
    tokens_.push_back({is_block ? Tok::BlockEnd : Tok::VarEnd, "", line_});
    after_tag_end(sign, /*trim_newline=*/is_block);
    return true;
  }

  // Integers (decimal with '_', 0b, 0o, 0x) and floats (a fraction and/or an exponent).
  void lex_number() {
    size_t i = pos_;
    auto digits = [&](size_t& k) {
      const size_t start = k;
      while (k < src_.size() && (is_digit(src_[k]) || (src_[k] == '_' && k > start && k + 1 < src_.size() && is_digit(src_[k + 1])))) ++k;
      return k > start;
    };
    const char next = i + 1 < src_.size() ? char(src_[i + 1] | 0x20) : 0;
    if (src_[i] == '0' && (next == 'b' || next == 'o' || next == 'x')) {
      const int base = next == 'b' ? 2 : next == 'o' ? 8 : 16;
      size_t k = i + 2;
      std::string text;
      while (k < src_.size() && (std::isxdigit(uint8_t(src_[k])) || src_[k] == '_')) {
        if (src_[k] != '_') text += src_[k];
        ++k;
      }
      errno = 0;
      char* end = nullptr;
      const long long v = std::strtoll(text.c_str(), &end, base);
      if (text.empty() || *end || errno) fail_at(line_, "bad integer literal " + src_.substr(i, k - i));
      tokens_.push_back({Tok::Int, src_.substr(i, k - i), line_, int64_t(v)});
      pos_ = k;
      return;
    }
    digits(i);
    bool is_float = false;
    size_t k = i;
    if (k + 1 < src_.size() && src_[k] == '.' && is_digit(src_[k + 1])) {
      ++k;
      digits(k);
      is_float = true;
      i = k;
    }
    if (k < src_.size() && (src_[k] == 'e' || src_[k] == 'E')) {
      size_t e = k + 1;
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
      if (digits(e)) {
        is_float = true;
        i = e;
      }
    }
    // A number right after a '.' is an index (x.0.1), never a float.
    if (is_float && pos_ > 0 && src_[pos_ - 1] == '.') {
      i = pos_;
      digits(i);
      is_float = false;
    }
    std::string text = src_.substr(pos_, i - pos_);
    std::string clean;
    for (char c : text)
      if (c != '_') clean += c;
    Token t{is_float ? Tok::Float : Tok::Int, text, line_};
    errno = 0;
    if (is_float) {
      t.float_value = std::strtod(clean.c_str(), nullptr);
    } else {
      t.int_value = std::strtoll(clean.c_str(), nullptr, 10);
      if (errno) fail_at(line_, "integer literal " + text + " is too large");
    }
    tokens_.push_back(std::move(t));
    pos_ = i;
  }

  void lex_string() {
    const char quote = src_[pos_];
    size_t k = pos_ + 1;
    while (k < src_.size() && src_[k] != quote) k += src_[k] == '\\' ? 2 : 1;
    if (k >= src_.size()) fail_at(line_, "unterminated string literal");
    const std::string_view body = std::string_view(src_).substr(pos_ + 1, k - pos_ - 1);
    tokens_.push_back({Tok::String, unescape(body, line_), line_});
    line_ += int(std::count(body.begin(), body.end(), '\n'));
    pos_ = k + 1;
  }

  void lex_operator(std::vector<char>& open) {
    static const char* const kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
    for (const char* op : kTwo) {
      if (src_.compare(pos_, 2, op) == 0) {
        tokens_.push_back({Tok::Op, op, line_});
        pos_ += 2;
        return;
      }
    }
    const char c = src_[pos_];
    if (std::string_view("+-*/%~=.:|,()[]{}<>;").find(c) == std::string_view::npos)
      fail_at(line_, fmt::format("unexpected character '{}'", c));
    if (c == '(' || c == '[' || c == '{') {
      open.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (open.empty()) fail_at(line_, fmt::format("unexpected '{}'", c));
      if (open.back() != c) fail_at(line_, fmt::format("unexpected '{}', expected '{}'", c, open.back()));
      open.pop_back();
    }
    tokens_.push_back({Tok::Op, std::string(1, c), line_});
    ++pos_;
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  int pending_lines_ = 0;
  bool line_starting_ = true;  // the last thing lexed ended a line (for lstrip_blocks)
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Lexer(source).run(); }

}  // namespace tf::jinja
