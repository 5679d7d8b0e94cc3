#include "model/tokenizer/utf8.h"

namespace tf::tok {

Utf8Step utf8_step(std::string_view s) {
  const auto b0 = uint8_t(s[0]);
  if (b0 < 0x80) return {1, Utf8Kind::Valid};
  // Number of continuation bytes, and the allowed range of the first one (the ranges that
  // rule out overlong forms, surrogates and code points above U+10FFFF).
  size_t n_cont = 0;
  uint8_t lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n_cont = 1;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n_cont = 2;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n_cont = 3;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {1, Utf8Kind::Invalid};
  }
  for (size_t k = 1; k <= n_cont; ++k) {
    if (k >= s.size()) return {k, Utf8Kind::Truncated};
    const auto b = uint8_t(s[k]);
    if (b < lo || b > hi) return {k, Utf8Kind::Invalid};
    lo = 0x80;
    hi = 0xBF;
  }
  return {n_cont + 1, Utf8Kind::Valid};
}

bool utf8_is_valid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (uint8_t(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const Utf8Step st = utf8_step(s.substr(i));
    if (st.kind != Utf8Kind::Valid) return false;
    i += st.len;
  }
  return true;
}

std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const Utf8Step st = utf8_step(s.substr(i));
    if (st.kind == Utf8Kind::Valid) {
      out.append(s.substr(i, st.len));
    } else {
      out.append(kReplacementChar);
    }
    i += st.len;
  }
  return out;
}

size_t utf8_complete_prefix(std::string_view s) {
  // A truncated sequence is always the last one and starts at a lead byte (never consumed as
  // a continuation byte), within the last 3 bytes; anything before it is complete.
  const size_t lo = s.size() > 3 ? s.size() - 3 : 0;
  for (size_t i = s.size(); i-- > lo;) {
    if (uint8_t(s[i]) >= 0xC0) {
      return utf8_step(s.substr(i)).kind == Utf8Kind::Truncated ? i : s.size();
    }
  }
  return s.size();
}

uint32_t utf8_next(std::string_view s, size_t& i) {
  const auto b0 = uint8_t(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  size_t n = b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : 2;
  uint32_t cp = b0 & (0x7F >> n);
  for (size_t k = 1; k < n && i + k < s.size(); ++k) cp = (cp << 6) | (uint8_t(s[i + k]) & 0x3F);
  i += n;
  return cp;
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xC0 | (cp >> 6)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(char(0xE0 | (cp >> 12)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (cp >> 18)));
    out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  }
}

}  // namespace tf::tok
