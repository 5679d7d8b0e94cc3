#include "sample/json_lexemes.h"

namespace tf {

namespace {

int hex_value(uint8_t c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

enum Part : uint8_t { kMinus, kZero, kInt, kDot, kFrac, kE, kESign, kExp };

}  // namespace

bool is_json_whitespace(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

uint64_t JsonString::bits() const {
  return uint64_t(mode) | uint64_t(low) << 8 | uint64_t(hex_n) << 16 | uint64_t(hex_v) << 24 |
         uint64_t(utf8_left) << 40 | uint64_t(utf8_lo) << 48 | uint64_t(utf8_hi) << 56;
}

JsonString::Step JsonString::feed(uint8_t c) {
  using S = Step;
  switch (mode) {
    case 1:  // after '\'
      if (c == 'u') {
        mode = 2, low = 0, hex_n = 0, hex_v = 0;
        return S::Took;
      }
      if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't') {
        mode = 0;
        return S::Took;
      }
      return S::Refused;
    case 2: {  // a hex digit
      const int d = hex_value(c);
      if (d < 0) return S::Refused;
      if (low) {
        if ((hex_n == 0 && d != 0xD) || (hex_n == 1 && d < 0xC)) return S::Refused;
      } else if (hex_n == 1 && hex_v == 0xD && d >= 0xC) {
        return S::Refused;
      }
      hex_v = uint16_t(hex_v * 16 + d);
      if (++hex_n < 4) return S::Took;
      mode = !low && hex_v >= 0xD800 && hex_v <= 0xDBFF ? 3 : 0;
      low = 0, hex_n = 0, hex_v = 0;
      return S::Took;
    }
    case 3:
      if (c != '\\') return S::Refused;
      mode = 4;
      return S::Took;
    case 4:
      if (c != 'u') return S::Refused;
      mode = 2, low = 1, hex_n = 0, hex_v = 0;
      return S::Took;
    case 5:
      if (c < utf8_lo || c > utf8_hi) return S::Refused;
      utf8_lo = 0x80, utf8_hi = 0xBF;
      if (--utf8_left == 0) mode = 0;
      return S::Took;
    default: break;
  }
  if (c == '"') return S::Closed;
  if (c == '\\') {
    mode = 1;
    return S::Took;
  }
  if (c < 0x20) return S::Refused;
  if (c < 0x80) return S::Took;
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
    return S::Refused;
  }
  mode = 5, utf8_left = left, utf8_lo = lo, utf8_hi = hi;
  return S::Took;
}

bool JsonNumber::start(uint8_t c) {
  if (c == '-') return part = kMinus, n = 0, true;
  if (c == '0') return part = kZero, n = 1, true;
  if (c >= '1' && c <= '9') return part = kInt, n = 1, true;
  return false;
}

JsonNumber::Step JsonNumber::feed(uint8_t c, bool integer) {
  using S = Step;
  const bool digit = c >= '0' && c <= '9';
  switch (part) {
    case kMinus:
      if (!digit) return S::Refused;
      part = c == '0' ? kZero : kInt, n = 1;
      return S::Took;
    case kZero:
    case kInt:
      if (digit && part == kInt) {
        if (n >= kMaxIntDigits) return S::Refused;
        ++n;
        return S::Took;
      }
      if (!integer && c == '.') return part = kDot, n = 0, S::Took;
      if (!integer && (c == 'e' || c == 'E')) return part = kE, n = 0, S::Took;
      break;
    case kDot:
      if (!digit) return S::Refused;
      part = kFrac;
      return S::Took;
    case kFrac:
      if (digit) return S::Took;
      if (c == 'e' || c == 'E') return part = kE, S::Took;
      break;
    case kE:
      if (c == '+' || c == '-') return part = kESign, S::Took;
      [[fallthrough]];
    case kESign:
      if (!digit) return S::Refused;
      part = kExp, n = 1;
      return S::Took;
    default:  // kExp
      if (digit) {
        if (n >= kMaxExpDigits) return S::Refused;
        ++n;
        return S::Took;
      }
      break;
  }
  return S::Ended;  // it may end here (0, digits, a fraction, an exponent); c comes after it
}

bool take_json_whitespace(uint8_t c, int depth, uint8_t& run, uint8_t& indent) {
  if (!is_json_whitespace(c)) {
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

}  // namespace tf
