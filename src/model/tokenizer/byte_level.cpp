#include "model/tokenizer/byte_level.h"

#include <array>

#include "model/tokenizer/utf8.h"

namespace tf::tok {

namespace {

struct Tables {
  std::array<std::string, 256> byte_to_utf8;
  std::array<int16_t, 324> cp_to_byte;  // every code point in the image is < 256 + 68

  Tables() {
    cp_to_byte.fill(-1);
    int n_shifted = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const uint32_t cp = printable ? uint32_t(b) : uint32_t(256 + n_shifted++);
      utf8_append(byte_to_utf8[b], cp);
      cp_to_byte[cp] = int16_t(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

std::string_view byte_to_unicode(uint8_t b) { return tables().byte_to_utf8[b]; }

int unicode_to_byte(uint32_t cp) {
  const Tables& t = tables();
  return cp < t.cp_to_byte.size() ? t.cp_to_byte[cp] : -1;
}

void bytes_to_unicode(std::string_view bytes, std::string& out) {
  const Tables& t = tables();
  for (char c : bytes) out.append(t.byte_to_utf8[uint8_t(c)]);
}

std::string unicode_to_bytes(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  size_t i = 0;
  while (i < token.size()) {
    const int b = unicode_to_byte(utf8_next(token, i));
    if (b < 0) return std::string(token);
    out.push_back(char(b));
  }
  return out;
}

}  // namespace tf::tok
