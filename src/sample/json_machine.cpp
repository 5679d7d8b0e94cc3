#include "sample/json_machine.h"

namespace tf {

namespace {

constexpr std::string_view kLiterals[] = {"true", "false", "null"};

int hex_value(uint8_t c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool is_ws(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

}  // namespace

size_t JsonMachine::hash() const {
  uint64_t h = stack_ * 0x9e3779b97f4a7c15ull;
  const uint64_t small[] = {uint64_t(mode_), depth_, ws_, nl_, key_, low_, hex_n_, hex_v_, utf8_left_, utf8_lo_, utf8_hi_,
                            lit_, lit_pos_, uint64_t(num_), num_n_};
  for (uint64_t v : small) h = (h ^ v) * 0x100000001b3ull + (h >> 29);
  return size_t(h);
}

bool JsonMachine::feed(std::string_view s) {
  JsonMachine m = *this;
  for (char c : s)
    if (!m.feed(uint8_t(c))) return false;
  *this = m;
  return true;
}

bool JsonMachine::feed(uint8_t c) {
  const JsonMachine before = *this;
  bool ok = false;
  switch (mode_) {
    case Mode::Start: ok = c == '{' && open(false); break;
    case Mode::Value: ok = whitespace(c) || value_start(c); break;
    case Mode::ValueOrEnd: ok = whitespace(c) || (c == ']' ? close(true) : value_start(c)); break;
    case Mode::KeyOrEnd:
    case Mode::Key:
      if (whitespace(c)) {
        ok = true;
      } else if (c == '"') {
        mode_ = Mode::String, key_ = 1, ok = true;
      } else if (c == '}' && mode_ == Mode::KeyOrEnd) {
        ok = close(false);
      }
      break;
    case Mode::Colon:
      ok = whitespace(c) || c == ':';
      if (c == ':') mode_ = Mode::Value;
      break;
    case Mode::AfterValue:
      if (whitespace(c)) {
        ok = true;
      } else if (c == ',') {
        mode_ = top_is_array() ? Mode::Value : Mode::Key, ok = true;
      } else if (c == ']' || c == '}') {
        ok = close(c == ']');
      }
      break;
    case Mode::String:
    case Mode::Utf8: ok = string_byte(c); break;
    case Mode::Escape:
      if (c == 'u') {
        mode_ = Mode::Hex, low_ = 0, hex_n_ = 0, hex_v_ = 0, ok = true;
      } else if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't') {
        mode_ = Mode::String, ok = true;
      }
      break;
    case Mode::Hex: ok = hex_digit(c); break;
    case Mode::LowSlash:
      ok = c == '\\';
      if (ok) mode_ = Mode::LowU;
      break;
    case Mode::LowU:
      ok = c == 'u';
      if (ok) mode_ = Mode::Hex, low_ = 1, hex_n_ = 0, hex_v_ = 0;
      break;
    case Mode::Literal:
      ok = c == uint8_t(kLiterals[lit_][lit_pos_]);
      if (ok && ++lit_pos_ == kLiterals[lit_].size()) value_done();
      break;
    case Mode::Number: ok = number_byte(c); break;
    case Mode::Done: break;
  }
  if (!ok) *this = before;  // the helpers may have moved part of the state
  return ok;
}

bool JsonMachine::take_whitespace(uint8_t c, int depth, uint8_t& run, uint8_t& indent) {
  if (!is_ws(c)) {
    run = 0, indent = 0;
    return false;
  }
  switch (run) {
    case 0:
      run = c == '\n' ? 3 : c == '\r' ? 2 : 1;
      return true;
    case 2:
      if (c != '\n') return false;
      run = 3;
      return true;
    case 3:
      if (c == '\n' || c == '\r' || indent >= kIndentPerLevel * depth) return false;
      ++indent;
      return true;
    default: return false;
  }
}

bool JsonMachine::whitespace(uint8_t c) { return take_whitespace(c, depth_, ws_, nl_); }

bool JsonMachine::value_start(uint8_t c) {
  switch (c) {
    case '{': return open(false);
    case '[': return open(true);
    case '"': mode_ = Mode::String, key_ = 0; return true;
    case 't': mode_ = Mode::Literal, lit_ = 0, lit_pos_ = 1; return true;
    case 'f': mode_ = Mode::Literal, lit_ = 1, lit_pos_ = 1; return true;
    case 'n': mode_ = Mode::Literal, lit_ = 2, lit_pos_ = 1; return true;
    case '-': mode_ = Mode::Number, num_ = Num::Minus, num_n_ = 0; return true;
    case '0': mode_ = Mode::Number, num_ = Num::Zero, num_n_ = 1; return true;
    default:
      if (c >= '1' && c <= '9') {
        mode_ = Mode::Number, num_ = Num::Int, num_n_ = 1;
        return true;
      }
      return false;
  }
}

bool JsonMachine::open(bool array) {
  if (depth_ >= kMaxDepth) return false;
  stack_ = array ? stack_ | (uint64_t(1) << depth_) : stack_ & ~(uint64_t(1) << depth_);
  ++depth_;
  mode_ = array ? Mode::ValueOrEnd : Mode::KeyOrEnd;
  return true;
}

bool JsonMachine::close(bool array) {
  if (depth_ == 0 || top_is_array() != array) return false;
  --depth_;
  stack_ &= ~(uint64_t(1) << depth_);  // equal states, equal bits
  value_done();
  return true;
}

// A value (scalar or container) ended: the top level is done, or its container goes on.
void JsonMachine::value_done() {
  mode_ = depth_ == 0 ? Mode::Done : Mode::AfterValue;
}

// Inside a string: the closing quote, an escape, printable ASCII, or UTF-8 (lead bytes set the
// range of the first continuation byte so that overlong forms, surrogates and code points past
// U+10FFFF never start).
bool JsonMachine::string_byte(uint8_t c) {
  if (mode_ == Mode::Utf8) {
    if (c < utf8_lo_ || c > utf8_hi_) return false;
    utf8_lo_ = 0x80, utf8_hi_ = 0xBF;
    if (--utf8_left_ == 0) mode_ = Mode::String;
    return true;
  }
  if (c == '"') {
    if (key_) {
      mode_ = Mode::Colon;
      key_ = 0;
    } else {
      value_done();
    }
    return true;
  }
  if (c == '\\') {
    mode_ = Mode::Escape;
    return true;
  }
  if (c < 0x20) return false;
  if (c < 0x80) return true;
  uint8_t left = 0, lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    left = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    left = 2;
    if (c == 0xE0) lo = 0xA0;  // no overlong 3-byte forms
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    left = 3;
    if (c == 0xF0) lo = 0x90;  // no overlong 4-byte forms
    if (c == 0xF4) hi = 0x8F;  // nothing past U+10FFFF
  } else {
    return false;
  }
  mode_ = Mode::Utf8, utf8_left_ = left, utf8_lo_ = lo, utf8_hi_ = hi;
  return true;
}

// A hex digit of \uXXXX. A low surrogate (DC00-DFFF) is refused at its second digit unless a
// high surrogate came just before; after a high surrogate (D800-DBFF) the next escape must be
// a low one, refused at the first digit that rules it out.
bool JsonMachine::hex_digit(uint8_t c) {
  const int d = hex_value(c);
  if (d < 0) return false;
  if (low_) {
    if (hex_n_ == 0 && d != 0xD) return false;
    if (hex_n_ == 1 && d < 0xC) return false;
  } else if (hex_n_ == 1 && hex_v_ == 0xD && d >= 0xC) {
    return false;
  }
  hex_v_ = uint16_t(hex_v_ * 16 + d);
  if (++hex_n_ < 4) return true;
  const bool high = !low_ && hex_v_ >= 0xD800 && hex_v_ <= 0xDBFF;
  mode_ = high ? Mode::LowSlash : Mode::String;
  low_ = 0, hex_n_ = 0, hex_v_ = 0;
  return true;
}

// One byte inside a number (-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?). A byte that
// cannot continue it ends it where it may end, and is then read as what follows the value.
bool JsonMachine::number_byte(uint8_t c) {
  const bool digit = c >= '0' && c <= '9';
  switch (num_) {
    case Num::Minus:
      if (!digit) return false;
      num_ = c == '0' ? Num::Zero : Num::Int, num_n_ = 1;
      return true;
    case Num::Zero:
    case Num::Int:
      if (digit && num_ == Num::Int) {
        if (num_n_ >= kMaxIntDigits) return false;
        ++num_n_;
        return true;
      }
      if (c == '.') return num_ = Num::Dot, num_n_ = 0, true;
      if (c == 'e' || c == 'E') return num_ = Num::E, num_n_ = 0, true;
      break;
    case Num::Dot:
      if (!digit) return false;
      num_ = Num::Frac;
      return true;
    case Num::Frac:
      if (digit) return true;
      if (c == 'e' || c == 'E') return num_ = Num::E, true;
      break;
    case Num::E:
      if (c == '+' || c == '-') return num_ = Num::ESign, true;
      [[fallthrough]];
    case Num::ESign:
      if (!digit) return false;
      num_ = Num::Exp, num_n_ = 1;
      return true;
    case Num::Exp:
      if (digit) {
        if (num_n_ >= kMaxExpDigits) return false;
        ++num_n_;
        return true;
      }
      break;
  }
  // The number may end here (Zero, Int, Frac, Exp): what follows it is read after the value.
  num_ = Num::Minus, num_n_ = 0;
  value_done();
  return feed(c);
}

}  // namespace tf
